"""``aidanbench forget RUN --model M``: a model out of a run directory, as if never run."""

from __future__ import annotations

import fcntl
import json
import resource
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.record import files
from aidanbench.record.lines import read_lines
from aidanbench.record.metadata import read_metadata
from aidanbench.record.recorder import Recorder, recount
from aidanbench.runner import forget as forget_module
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_flags

from .kill_points import killed
from .test_bad_input import AIDANBENCH
from .test_cost import args, metered_stub, prices_file

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


def shown(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The models every reader of ``run_dir`` shows (``report --json``, the lines, the
    metadata and the page, when there is one), asserting that they agree."""
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0, capsys.readouterr().err
    reported = {run["model"] for run in json.loads(capsys.readouterr().out)["runs"]}
    assert {line.model for line in read_lines(run_dir)} == reported
    meta = read_metadata(run_dir)
    assert meta is not None and meta.spec is not None and meta.scoring_settings is not None
    assert set(meta.spec.models) == set(meta.scoring_settings) == reported
    assert ("m2" in {f.model for f in meta.forgotten or []}) == ("m2" not in reported)
    page = run_dir / "report.html"
    if page.exists():
        assert ('"m2"' in page.read_text()) == ("m2" in reported), "the page shows the same"
    return reported


def outcome(run_dir: Path) -> dict[str, Any]:
    """What a forget leaves, but the time it records."""
    meta = metadata(run_dir)
    for entry in meta["forgotten"]:
        entry.pop("at")
    names = ("questions.jsonl", "answers.jsonl", "results.json", "outputs.json", "usage.jsonl")
    return {
        "files": sorted(p.name for p in run_dir.iterdir()),
        "bytes": {name: (run_dir / name).read_bytes() for name in names},
        "metadata": meta,
        "threads": threads(run_dir),
        "page": "m1" in (page := (run_dir / "report.html").read_text()) and '"m2"' not in page,
    }


@pytest.mark.e2e
def test_forget_killed_at_each_write_leaves_all_or_nothing_and_forget_again_finishes_it(
    two_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL just before each change forget makes to the disk, in turn: every reader shows
    the model wholly there or wholly gone (the page too), and the same forget finishes it
    to exactly what an uninterrupted one leaves; nothing asks for the run again."""
    reference, count = tmp_path / "reference", tmp_path / "count"
    shutil.copytree(two_models, reference)
    proc = killed(0, count, ["forget", str(reference), "-m", "m2"])
    assert proc.returncode == 0, proc.stderr
    expected, changes = outcome(reference), int(count.read_text())
    assert changes >= 8, "threads, line files, metadata, manifest and page"
    seen = []
    for kill_at in range(1, changes + 1):
        run_dir = tmp_path / f"killed-{kill_at}"
        shutil.copytree(two_models, run_dir)
        proc = killed(kill_at, count, ["forget", str(run_dir), "-m", "m2"])
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stderr)
        seen.append(shown(run_dir, capsys))
        assert main(["forget", str(run_dir), "-m", "m2"]) == 0, (kill_at, capsys.readouterr())
        out, err = capsys.readouterr()
        assert "aidanbench run" not in out + err and "forgot m2" in out, (out, err)
        assert outcome(run_dir) == expected, kill_at
        assert shown(run_dir, capsys) == {"m1"}
    assert {"m1", "m2"} in seen and {"m1"} in seen, "kills fell on both sides of the commit"


def test_a_forget_cut_short_after_its_commit_is_finished_by_the_next_run(
    two_models: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The process dies once the files are committed, before the threads went: every reader
    sees the model gone already, and the next run finishes the forget before it reads the
    directory: asking nothing again for m1, and m2 afresh."""

    def dies(*args: Any) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(forget_module.checkpoints, "delete_threads", dies)
        forget_module.forget(two_models, ["m2"])
    assert len(threads(two_models)) == 4, "the threads are still to go"
    assert not (two_models / "report.html").exists(), "no page shows m2"
    assert shown(two_models, capsys) == {"m1"}
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS})) as stub:
        args = ["run", "-m", "m1", "-m", "m2", "--questions", "2", "--run-dir", str(two_models)]
        assert main([*args, *stub_flags(stub.base_url)]) == 0
        asked = {r.model for r in stub.of_kind("generate")}
    assert asked == {"m2"}, "m1's threads were kept, m2's gone: asked afresh"
    assert metadata(two_models)["forgotten"][0]["model"] == "m2"


def test_a_forget_cut_short_is_finished_even_by_one_refused_for_another_model(
    two_models: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def dies(*args: Any) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(forget_module.checkpoints, "delete_threads", dies)
        forget_module.forget(two_models, ["m2"])
    capsys.readouterr()
    assert main(["forget", str(two_models), "-m", "m3"]) == 2
    assert "model m3 is not in run directory" in capsys.readouterr().err
    assert threads(two_models) and all(t.startswith("m1|") for t in threads(two_models))
    assert "forgetting" not in json.loads((two_models / "outputs.json").read_text())
    assert "m1" in (page := (two_models / "report.html").read_text()) and '"m2"' not in page
    assert main(["forget", str(two_models), "-m", "m2"]) == 2, "m2 is gone already"


def test_a_forget_killed_before_its_commit_changes_nothing_a_reader_sees(
    two_models: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed with every file of the commit staged but the manifest not yet written: the
    directory reads as it was, and the next writer puts the page back."""
    page = (two_models / "report.html").read_bytes()
    write = files.atomic_write

    def dies_at_the_manifest(path: Path, content: Any) -> None:
        if path.name == files.OUTPUTS:
            raise KeyboardInterrupt
        write(path, content)

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(files, "atomic_write", dies_at_the_manifest)
        forget_module.forget(two_models, ["m2"])
    assert shown(two_models, capsys) == {"m1", "m2"}
    assert len(threads(two_models)) == 4
    with Recorder.open(two_models):
        pass
    assert (two_models / "report.html").read_bytes() == page
    assert not [p.name for p in two_models.iterdir() if p.name.startswith(".")]


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


def test_every_figure_of_the_lines_is_counted_again_dollars_included(
    api_key: str, tmp_path: Path
) -> None:
    """The totals the recorded answers give (questions, answers, score, requests, tokens,
    dollars) are those of the lines kept, as a session ending on them records them; the
    ledger's (what was sent and spent) stay whole."""
    run_dir = tmp_path / "run"
    with metered_stub(2) as stub:
        prices = str(prices_file(tmp_path))
        assert main(args(stub, run_dir, ["m-table", "m-provider"], "--prices", prices)) == 0
    before = metadata(run_dir)["totals"]
    assert main(["forget", str(run_dir), "-m", "m-provider"]) == 0
    after = metadata(run_dir)["totals"]
    kept = [json.loads(line) for line in (run_dir / "questions.jsonl").read_text().splitlines()]
    assert {line["model"] for line in kept} == {"m-table"}
    assert after["recorded_dollars"] == pytest.approx(sum(line["cost_usd"] for line in kept))
    assert after["recorded_dollars"] < before["recorded_dollars"]
    assert after["questions"] == len(kept) and after["score"] == sum(x["score"] for x in kept)
    assert after["recorded_api_calls"] < before["recorded_api_calls"]
    assert after["recorded_tokens"] < before["recorded_tokens"]
    for name in ("api_calls", "tokens", "dollars", "unrecorded", "dollars_bound"):
        assert after[name] == before[name], f"{name}: the ledger's, kept whole"
    meta = read_metadata(run_dir)
    assert meta is not None
    recounted = meta.model_copy(deep=True)
    recount(recounted, read_lines(run_dir), run_dir / "usage.jsonl", {})
    assert recounted.totals == meta.totals, "what a session ending on these lines records"
    assert (recounted.questions, recounted.questions_sha256) == (
        meta.questions,
        meta.questions_sha256,
    )


def forget_limited(run_dir: Path, limit: int) -> subprocess.CompletedProcess[str]:
    """``aidanbench forget RUN -m m2`` in a process whose files may hold ``limit`` bytes at
    most (RLIMIT_FSIZE): its writes fail past that, as on a full disk."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [AIDANBENCH, "forget", str(run_dir), "-m", "m2"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )


@pytest.mark.e2e
def test_a_full_disk_stops_forget_in_one_line_before_or_after_its_commit(
    two_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No room for the commit's files: nothing forgotten, the page back in place. Room for
    them but not for the page: the model is forgotten and the line says the rest is left,
    which the same command finishes."""
    before = two_models / "report.html"
    page = before.read_bytes()
    biggest = max(len((two_models / n).read_bytes()) for n in ("answers.jsonl", "metadata.json"))
    copy = tmp_path / "copy"
    shutil.copytree(two_models, copy)
    proc = forget_limited(two_models, biggest // 2)
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "nothing was forgotten" in line, proc.stderr
    assert shown(two_models, capsys) == {"m1", "m2"}
    assert before.read_bytes() == page, "the page is back"
    assert not [p.name for p in two_models.iterdir() if p.name.startswith(".")]
    proc = forget_limited(copy, len(page) // 2)
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "m2 forgotten, the rest (threads, page)" in line, line
    assert shown(copy, capsys) == {"m1"}
    assert main(["forget", str(copy), "-m", "m2"]) == 0
    assert shown(copy, capsys) == {"m1"} and len(threads(copy)) == 2
    assert "m1" in (copy / "report.html").read_text()
