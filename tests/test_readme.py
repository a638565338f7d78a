"""README runs as written: every Python block is a program, every keyless command works.

Each fenced ``python`` block of README.md runs in its own interpreter against the local
stub server, reached through the base-URL variables the snippets document
(``OPENAI_BASE_URL``, ``OPENROUTER_BASE_URL``). Any other destination goes to a proxy
that does not exist, so a snippet that ignored them fails instead of leaving the
machine. The ``aidanbench report``/``rescore``/``plot`` lines of README's shell blocks
run as printed, from a folder laid out like the repository's root.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aidanbench import reference
from aidanbench.testing import OpenAIStub, ScriptedBrain

from .conftest import REPO, TEST_KEY

pytestmark = pytest.mark.e2e

README = REPO / "README.md"
COMMAND = Path(sys.executable).with_name("aidanbench")
KEYLESS = ("report", "rescore", "plot")


def fenced(language: str, text: str) -> list[str]:
    """The bodies of the fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


PYTHON_BLOCKS = fenced("python", README.read_text("utf-8"))
SHELL_LINES = [
    line.strip()
    for block in fenced("bash", README.read_text("utf-8"))
    for line in block.splitlines()
    if line.strip().split(" ")[:2] in (["aidanbench", name] for name in KEYLESS)
]


def snippet_environment(stub: OpenAIStub) -> dict[str, str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": stub.base_url,
        "OPENROUTER_BASE_URL": stub.base_url,
        "OPENAI_API_KEY": TEST_KEY,
        "OPENROUTER_API_KEY": TEST_KEY,
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("PYTHONPATH", None)
    return env


def test_readme_has_the_blocks_it_should() -> None:
    assert len(PYTHON_BLOCKS) >= 3
    assert {line.split(" ")[1] for line in SHELL_LINES} == set(KEYLESS)


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs_as_written(index: int, tmp_path: Path) -> None:
    code = PYTHON_BLOCKS[index]
    (tmp_path / "snippet.py").write_text(code, "utf-8")
    with OpenAIStub(ScriptedBrain()) as stub:
        done = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            env=snippet_environment(stub),
            capture_output=True,
            text=True,
            timeout=120,
        )
        asked = stub.count("generate")
    assert done.returncode == 0, f"README python block {index + 1}:\n{code}\n{done.stderr}"
    assert asked > 0, "the snippet reached the local server"
    assert done.stdout.strip(), "the snippet printed its result"


@pytest.mark.parametrize("line", SHELL_LINES)
def test_keyless_command_runs_as_written(line: str, tmp_path: Path) -> None:
    (tmp_path / "reference").symlink_to(REPO / "reference", target_is_directory=True)
    argv = shlex.split(line)
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    done = subprocess.run(
        [str(COMMAND), *argv[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if argv[1] == "report":
        for model, total in reference.PUBLISHED_TOTALS.items():
            assert re.search(rf"{re.escape(model)}\s.*\b{total}\b", done.stdout), model
    if argv[1] == "plot":
        assert sorted(p.name for p in (tmp_path / argv[argv.index("-o") + 1]).iterdir())
