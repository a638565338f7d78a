"""``aidanbench forget RUN --model M``: a model out of a run directory, as if never run."""

from __future__ import annotations

import fcntl
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.lines import read_lines
from aidanbench.record.recorder import Recorder
from aidanbench.runner import forget as forget_module
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_flags

QUESTIONS = bundled_questions(2)


@pytest.fixture
def two_models(api_key: str, tmp_path: Path) -> Iterator[Path]:
    """A finished run of m1 and m2 (with its report) and the server it ran on."""
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS})) as stub:
        run_dir = tmp_path / "run"
        args = ["run", "-m", "m1", "-m", "m2", "--questions", "2", "--run-dir", str(run_dir)]
        assert main([*args, *stub_flags(stub.base_url)]) == 0
        yield run_dir


def threads(run_dir: Path) -> list[str]:
    with sqlite3.connect(run_dir / "checkpoints.sqlite") as db:
        return sorted(r[0] for r in db.execute("SELECT DISTINCT thread_id FROM checkpoints"))


def writes(run_dir: Path) -> set[str]:
    with sqlite3.connect(run_dir / "checkpoints.sqlite") as db:
        return {r[0] for r in db.execute("SELECT DISTINCT thread_id FROM writes")}


def metadata(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "metadata.json").read_text())


def test_forget_removes_the_models_threads_lines_and_entries_and_keeps_its_spend(
    two_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = two_models
    ledger_before = (run_dir / "usage.jsonl").read_text()
    capsys.readouterr()
    assert main(["forget", str(run_dir), "--model", "m2"]) == 0
    out = capsys.readouterr().out
    assert "forgot m2: 2 thread(s), 2 question line(s)" in out and "kept" in out
    assert all(t.startswith("m1|") for t in threads(run_dir)) and len(threads(run_dir)) == 2
    assert all(t.startswith("m1|") for t in writes(run_dir))
    for name in ("questions.jsonl", "answers.jsonl", "results.json", "report.html"):
        text = (run_dir / name).read_text()
        assert "m1" in text and '"m2"' not in text and ">m2<" not in text, name
    meta = metadata(run_dir)
    assert meta["spec"]["models"] == ["m1"] and list(meta["scoring_settings"]) == ["m1"]
    assert meta["totals"]["questions"] == 2 and meta["totals"]["score"] == 4
    assert meta["totals"]["api_calls"] == meta["usage"]["api_calls"], "the spend is whole"
    (entry,) = meta["forgotten"]
    assert (entry["model"], entry["threads"], entry["lines"]) == ("m2", 2, 2)
    assert entry["ledger_lines_kept"] > 0
    assert (run_dir / "usage.jsonl").read_text() == ledger_before, "the ledger is untouched"
    assert main(["report", str(run_dir)]) == 0
    report = capsys.readouterr().out
    assert "│ m1 " in report and "│ m2 " not in report, "no row; its spend stays in the costs"


def test_a_model_not_in_the_run_is_one_line_and_changes_nothing(
    two_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {p.name: p.read_bytes() for p in two_models.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["forget", str(two_models), "-m", "m3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "model m3 is not in run directory" in err
    assert "its models: m1, m2" in err
    assert {p.name: p.read_bytes() for p in two_models.iterdir() if p.is_file()} == before


def test_a_directory_in_use_is_refused(
    two_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open(two_models / "lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main(["forget", str(two_models), "-m", "m2"]) == 2
    assert "in use by another aidanbench run" in capsys.readouterr().err
    assert len(threads(two_models)) == 4


def test_a_forget_cut_short_is_finished_by_running_it_again(
    two_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the threads went (one transaction), before the results
    files: the model is still named there, and the same command completes the job."""

    def dies(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Recorder, "replace_lines", dies)
    with pytest.raises(KeyboardInterrupt):
        forget_module.forget(two_models, ["m2"])
    assert len(threads(two_models)) == 2, "the threads went together"
    assert "m2" in metadata(two_models)["spec"]["models"]
    monkeypatch.undo()
    assert main(["forget", str(two_models), "-m", "m2"]) == 0
    assert metadata(two_models)["spec"]["models"] == ["m1"]
    assert {line.model for line in read_lines(two_models)} == {"m1"}


def test_forgetting_every_model_leaves_no_report(two_models: Path) -> None:
    assert main(["forget", str(two_models), "-m", "m1", "-m", "m2"]) == 0
    assert threads(two_models) == [] and read_lines(two_models) == []
    assert not (two_models / "report.html").exists()
    assert metadata(two_models)["spec"]["models"] == []


def test_the_typos_threads_go_and_the_same_name_starts_afresh(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo refused mid-run (the preflight off) leaves its threads pending and nothing
    else; forget removes them."""
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS}), catalogue={"m1": None}) as stub:
        run_dir = tmp_path / "run"
        args = ["run", "--questions", "2", "--run-dir", str(run_dir), *stub_flags(stub.base_url)]
        args += ["--judge-model", "m1", "--embedding-model", "m1"]
        assert main([*args, "-m", "m11", "--no-preflight"]) == 2
        assert threads(run_dir) and all(t.startswith("m11|") for t in threads(run_dir))
        assert main(["forget", str(run_dir), "-m", "m11"]) == 0
        assert threads(run_dir) == []
        assert "forgot m11: 2 thread(s), 0 question line(s)" in capsys.readouterr().out
        assert main([*args, "-m", "m1"]) == 0
