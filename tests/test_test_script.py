"""``scripts/test.sh``: every stage runs whatever failed before it, each says its wall time,
and the script ends with every stage's outcome and time, exit 1 if any failed.

The script runs from a copy of itself against fakes: ``python3 -m venv DIR`` makes a
DIR/bin whose commands log their arguments and succeed, except those matching ``FAIL``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.e2e

FAKE_PYTHON3 = r"""#!/bin/sh
# python3 -m venv DIR: an environment of fakes (see the module docstring)
[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 0
mkdir -p "$3/bin"
for tool in python ruff mypy lint-imports; do
    printf '#!/bin/sh\necho "%s %s $*" >> "$LOG"\n' "$3" "$tool" > "$3/bin/$tool"
    printf 'echo "%s %s $*" | grep -qE "$FAIL" && exit 1\nexit 0\n' "$3" "$tool" >> "$3/bin/$tool"
    chmod +x "$3/bin/$tool"
done
printf 'OLD_PATH=$PATH\nPATH=%s/bin:$PATH\ndeactivate() { PATH=$OLD_PATH; }\n' "$PWD/$3" \
    > "$3/bin/activate"
"""

STAGES = [
    "setup .venv",
    "chromium",
    "ruff check",
    "ruff format",
    "mypy",
    "lint-imports",
    "pytest (fast tier)",
    "pytest -m e2e",
    "setup .venv-vf",
    "mypy (verifiers)",
    "pytest (verifiers)",
    "setup .venv-vf-seed",
    "mypy (verifiers-seed)",
    "pytest (verifiers-seed)",
]


def run_script(tmp_path: Path, fail: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """The script from a copy of the repository's, with fakes first on PATH (a fake
    ``chromium`` too, so it never installs one); returns the process and the fakes' log."""
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    script = tmp_path / "repo" / "scripts" / "test.sh"
    script.write_text((REPO / "scripts" / "test.sh").read_text())
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (("python3", FAKE_PYTHON3), ("chromium", "#!/bin/sh\n")):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    log = tmp_path / "log"
    env = {
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "LOG": str(log),
        "FAIL": fail,
    }
    done = subprocess.run(
        ["bash", str(script), "-q"], env=env, capture_output=True, text=True, timeout=60
    )
    return done, log.read_text() if log.exists() else ""


def outcomes(stderr: str) -> dict[str, str]:
    """The closing table: each stage's outcome."""
    table = stderr.split("stage                              outcome   time\n", 1)[1]
    found = {}
    for line in table.splitlines():
        row = re.fullmatch(r"(.+?) +(passed|FAILED|not run)(?: +\d+ s)?", line)
        if row:
            found[row[1]] = row[2]
    return found


def test_every_stage_runs_after_a_failure_and_each_failure_is_reported(tmp_path: Path) -> None:
    done, log = run_script(tmp_path, r"^\.venv ruff check|^\.venv-vf python -m pytest")
    assert done.returncode == 1
    assert outcomes(done.stderr) == {
        stage: "FAILED" if stage in ("ruff check", "pytest (verifiers)") else "passed"
        for stage in STAGES
    }
    assert ".venv-vf-seed python -m pytest -n 0" in log, "the last stage ran"
    assert ".venv python -m pytest -q" in log and ".venv python -m pytest -m e2e -n 0 -q" in log
    for stage in STAGES:
        assert re.search(rf"=== {re.escape(stage)}: (passed|FAILED) in \d+ s", done.stderr)
    assert re.search(r"total: \d+ s", done.stderr)


def test_an_environment_that_cannot_be_built_skips_its_stages_only(tmp_path: Path) -> None:
    done, _ = run_script(tmp_path, r"^\.venv python -m pip install -q torch")
    assert done.returncode == 1
    found = outcomes(done.stderr)
    assert found["setup .venv"] == "FAILED"
    assert {found[s] for s in STAGES[1:8]} == {"not run"}
    assert {found[s] for s in STAGES[8:]} == {"passed"}, "the other environments still ran"


def test_all_passed_is_exit_0(tmp_path: Path) -> None:
    done, _ = run_script(tmp_path, "^never$")
    assert done.returncode == 0, done.stderr
    assert set(outcomes(done.stderr).values()) == {"passed"}
