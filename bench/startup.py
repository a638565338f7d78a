"""Start-up times of the ``aidanbench`` command, measured from outside.

    python -m bench.startup [--runs 5]

* ``aidanbench --help``: wall time of the whole process;
* ``aidanbench run``: from starting the process to the first request the local server
  receives (every role at a local ``OpenAIStub``, one bundled question; since the
  preflight, that is its ``GET /models``), which is what a user waits for before
  anything happens;
* ``aidanbench run`` on a run directory whose lock another process holds: wall time of
  the whole process, refused (the issue's bound: under one second).

Prints the median and range of ``--runs`` runs of each. For the import chain behind
them, use ``python -X importtime -m aidanbench.cli.main run --help``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags


def command() -> list[str]:
    """The installed console script, else the module."""
    script = shutil.which("aidanbench", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "aidanbench.cli.main"]


def help_seconds() -> float:
    start = time.monotonic()
    subprocess.run([*command(), "--help"], check=True, capture_output=True)
    return time.monotonic() - start


def first_request_seconds(stub: OpenAIStub) -> float:
    """Seconds from starting ``aidanbench run`` to the server's first request."""
    stub.clear()
    url = stub.base_url
    with tempfile.TemporaryDirectory() as tmp:
        args = ["run", "--model", "m", "--questions", "1", "--run-dir", str(Path(tmp) / "r")]
        args += stub_flags(url)
        env = {**os.environ, TEST_KEY_VARIABLE: "startup"}
        start = time.monotonic()
        subprocess.run([*command(), *args], check=True, capture_output=True, env=env)
    return min(r.started for r in stub.requests) - start


def in_use_seconds() -> float:
    """Wall seconds of ``aidanbench run`` refusing a run directory whose lock is held."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "r"
        run_dir.mkdir()
        with open(run_dir / "lock", "a+") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            start = time.monotonic()
            done = subprocess.run(
                [*command(), "run", "--model", "m", "--run-dir", str(run_dir)],
                capture_output=True,
                text=True,
            )
            seconds = time.monotonic() - start
    if done.returncode != 2 or "in use" not in done.stderr:
        raise RuntimeError(f"expected the in-use refusal, got {done.returncode}: {done.stderr}")
    return seconds


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s median ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    helps = [help_seconds() for _ in range(runs)]
    with OpenAIStub(ScriptedBrain(default_length=1)) as stub:
        firsts = [first_request_seconds(stub) for _ in range(runs)]
    refusals = [in_use_seconds() for _ in range(runs)]
    print(f"aidanbench --help            {spread(helps)}")
    print(f"aidanbench run, 1st request  {spread(firsts)}")
    print(f"aidanbench run, dir in use   {spread(refusals)}")
    print(f"load average                 {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
