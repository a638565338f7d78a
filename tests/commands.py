"""``aidanbench`` as the tests call it: a run's arguments against one stub server, and the
command in a child process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from aidanbench.testing import OpenAIStub
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags
from tests.conftest import REPO


def stub_run(base_url: str, run_dir: Path, *extra: str, model: str = "m1") -> list[str]:
    """``aidanbench run`` of ``model`` into ``run_dir``, with every role at ``base_url``
    under the test key (judge ``j``, embeddings ``e``), then ``extra``."""
    return [
        *("run", "--model", model, "--judge-model", "j", "--embedding-model", "e"),
        *("--run-dir", str(run_dir), *stub_flags(base_url), *extra),
    ]


def stub_endpoints(base_url: str) -> dict[str, str]:
    """Settings fields putting every role at ``base_url`` under the test key: ``stub_flags``
    for the Python API."""
    fields = {}
    for role in ("", "judge_", "embedding_"):
        fields |= {f"{role}base_url": base_url, f"{role}api_key_env": TEST_KEY_VARIABLE}
    return fields


def run_cli(
    args: Sequence[str], env: Mapping[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python -m aidanbench.cli.main args`` in the checkout, to its end; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def interrupt_after(proc: subprocess.Popen[str], stub: OpenAIStub, calls: int, sig: int) -> str:
    """Send ``sig`` to ``proc`` once ``stub`` has had ``calls`` generate requests (or a
    minute has passed); its stderr once it has ended."""
    deadline = time.monotonic() + 60
    while stub.count("generate") < calls and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return err


def generations(stub: OpenAIStub) -> Counter[tuple[str, str]]:
    """How often the server was asked each (model, prompt) to answer (look-aheads
    included): a question run twice asks its prompts twice."""
    return Counter((str(r.model), r.prompt) for r in stub.of_kind("generate"))
