"""``aidanbench --help`` answers without loading the benchmark's heavy dependencies."""

from __future__ import annotations

import argparse
import fcntl
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from aidanbench.cli import COMMANDS
from aidanbench.cli.main import SUMMARIES, build_parser, command_named
from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_flags

HEAVY = (
    "langgraph",
    "langchain_core",
    "openai",
    "httpx",
    "aiohttp",
    "numpy",
    "matplotlib",
    "torch",
)

PROBE = """
import sys
from aidanbench.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[0].split(",")))
print("LOADED", ",".join(heavy), file=sys.stderr)
"""


def loaded_by(*argv: str, watched: tuple[str, ...] = HEAVY) -> tuple[str, list[str]]:
    """stdout of ``aidanbench ARGV`` in a fresh interpreter, and which of the ``watched``
    modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.replace("sys.argv[0]", repr(",".join(watched))), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("LOADED")][-1]
    return done.stdout, [x for x in line.removeprefix("LOADED").strip().split(",") if x]


@pytest.mark.e2e
def test_help_loads_no_heavy_module() -> None:
    out, heavy = loaded_by("--help")
    assert "calibrate" in out and "score models on AidanBench" in out
    assert heavy == []


@pytest.mark.e2e
def test_a_command_loads_what_it_needs() -> None:
    """The probe can see heavy modules: ``demo --help`` imports the run engine."""
    out, heavy = loaded_by("demo", "--help")
    assert "--latency-scale" in out
    assert "langgraph" in heavy


@pytest.mark.e2e
def test_run_help_loads_no_engine() -> None:
    """``run`` imports the run engine only once its arguments are checked."""
    out, heavy = loaded_by("run", "--help")
    assert "--endpoint-concurrency" in out and "--no-preflight" in out
    assert not {"langgraph", "openai", "numpy"} & set(heavy)


@pytest.mark.e2e
def test_a_directory_in_use_is_refused_at_once(tmp_path: Path) -> None:
    """A second run on a directory whose lock is held is refused before the run engine,
    the OpenAI client or numpy are even imported (they took the 9-12 s the refusal used to
    take). What it costs is measured by ``bench/startup.py``, not asserted here: a timed
    bound failed under a loaded machine's load of 6."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = ["run", "--model", "m", "--run-dir", str(run_dir)]
    with open(run_dir / "lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _, heavy = loaded_by(*args)
        done = subprocess.run(
            [sys.executable, "-m", "aidanbench.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert done.stderr.strip().endswith("is in use by another aidanbench run")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not {"langgraph", "openai", "numpy"} & set(heavy)
    assert sorted(p.name for p in run_dir.iterdir()) == ["lock"], "nothing written"


@pytest.mark.e2e
def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == f"aidanbench {importlib.metadata.version('aidanbench')}\n"


@pytest.mark.e2e
def test_a_run_never_loads_langchain_openai(api_key: str, tmp_path: Path) -> None:
    """The command line chats through ``OpenAIChat`` (``services.chat``), so loading
    ``langchain_openai`` (0.1-0.2 s) before the first request would buy nothing."""
    with OpenAIStub(ScriptedBrain({bundled_questions(1)[0]: 2})) as stub:
        args = ["run", "--model", "m", "--questions", "1", "--run-dir", str(tmp_path / "r")]
        args += stub_flags(stub.base_url)
        _, loaded = loaded_by(*args, watched=("langgraph", "openai", "langchain_openai"))
        assert stub.count("generate") > 0, "the run reached the provider"
    assert loaded == ["langgraph", "openai"], "the probe sees what a run loads"


def test_summaries_are_the_commands_own_help() -> None:
    for name in COMMANDS:
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers()
        importlib.import_module(f"aidanbench.cli.{name}").register(subparsers)
        (action,) = subparsers._choices_actions
        assert action.help == SUMMARIES[name], name


def test_the_command_is_the_first_word() -> None:
    assert command_named(["run", "--model", "report"]) == "run"
    assert command_named(["--help"]) == command_named(["bogus"]) == ""
    assert set(build_parser().parse_args(["report", "x"]).__dict__) >= {"command", "handler"}
