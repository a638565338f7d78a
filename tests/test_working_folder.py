"""Outputs go where the run is, or where a path names: no command writes into the working
folder unasked (``view`` without ``-o``, ``rescore --judge-model``'s judgment cache and its
ledger, ``calibrate``'s files)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidanbench import reference
from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE
from tests.commands import stub_run

QUESTIONS = bundled_questions(2)
THRESHOLDS = ["--coherence-threshold", "15", "--novelty-threshold", "0.15"]


def if_exporting(command: list[str]) -> list[list[str]]:
    """``command`` where the [export] extra is installed (a contributor's ``.[dev]``
    venv lacks it, and ``export`` then refuses with one line: ``test_export``)."""
    return [command] if importlib.util.find_spec("inspect_ai") is not None else []


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS})) as server:
        yield server


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder of the commands, empty."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def judge(stub: OpenAIStub) -> list[str]:
    return ["--judge-model", "j", "--judge-base-url", stub.base_url]


def test_every_command_writes_where_the_run_is_or_where_it_is_told(
    api_key: str,
    stub: OpenAIStub,
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    assert main(stub_run(stub.base_url, run_dir, "--questions", "2")) == 0
    (run_dir / "report.html").unlink()
    key = ["--judge-api-key-env", TEST_KEY_VARIABLE]
    commands = [
        ["report", str(run_dir)],
        ["view", str(run_dir)],
        ["rescore", str(run_dir), *THRESHOLDS],
        ["rescore", str(run_dir), *THRESHOLDS, *judge(stub), *key],
        ["plot", str(run_dir), "-o", str(tmp_path / "charts")],
        *if_exporting(["export", str(run_dir), "--format", "inspect", "-o", str(tmp_path / "ai")]),
        ["estimate", "-m", "m1", "--questions", "2"],
        [*stub_run(stub.base_url, run_dir, "--questions", "2"), "--dry-run"],
        ["forget", str(run_dir), "-m", "m1"],
    ]
    for command in commands:
        assert main(command) == 0, (command, capsys.readouterr().err)
        assert list(folder.iterdir()) == [], command
    assert (run_dir / "judge-cache.sqlite").exists(), "the judgments are cached in the run"
    assert (run_dir / "judge-cache.usage.jsonl").exists(), "and their ledger beside them"


def test_view_writes_one_run_directorys_page_into_it(
    api_key: str, stub: OpenAIStub, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main(stub_run(stub.base_url, run_dir, "--questions", "2")) == 0
    (run_dir / "report.html").unlink()
    capsys.readouterr()
    assert main(["view", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.html")
    assert "m1" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize(
    "command",
    [
        ["view", str(reference.published_run())],
        ["view", "RUN", "RUN"],
        ["rescore", str(reference.published_run()), *THRESHOLDS, "--judge-model", "j"],
        ["calibrate", "--embedding-model", "local"],
    ],
    ids=["view of a results file", "view of two runs", "rescore a results file", "calibrate"],
)
def test_a_command_with_no_run_to_write_into_asks_where_in_one_line(
    command: list[str],
    api_key: str,
    stub: OpenAIStub,
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "RUN" in command:
        run_dir = tmp_path / "run"
        assert main(stub_run(stub.base_url, run_dir, "--questions", "2")) == 0
        command = [str(run_dir) if part == "RUN" else part for part in command]
    if command[0] == "rescore":
        command += ["--judge-base-url", stub.base_url, "--judge-api-key-env", TEST_KEY_VARIABLE]
    capsys.readouterr()
    judged = stub.count("coherence")
    try:
        status = main(command)
    except SystemExit as exc:  # argparse: a required flag missing
        status = int(str(exc.code))
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "-o FILE" in err or "--cache FILE" in err or "--out" in err, err
    assert list(folder.iterdir()) == []
    assert stub.count("coherence") == judged, "nothing judged"
