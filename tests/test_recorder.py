"""The run directory's one writer (``record.recorder``): outputs that never shrink, a
``rescore --into`` directory built aside, and every reply priced once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.lines import read_lines
from aidanbench.record.recorder import Recorder
from aidanbench.record.usage import read_ledger
from aidanbench.services.usage import Usage
from aidanbench.testing import OpenAIStub, ScriptedBrain
from tests.commands import stub_run
from tests.test_rejudge import KEY, PUBLISHED

QUESTIONS = bundled_questions(4)


def full_run(stub: OpenAIStub, run_dir: Path, questions: int = len(QUESTIONS)) -> int:
    return main(stub_run(stub.base_url, run_dir, "--questions", str(questions)))


@pytest.mark.parametrize("damage", ["cut", "interrupted write"])
def test_a_narrower_session_keeps_every_question_the_directory_holds(
    damage: str, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Line files that cannot be read (a line cut short; a write interrupted between two
    renames) are rebuilt from the checkpoints, so a session asking for two of four
    questions still writes all four, with their scores."""
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain({q: 2 + i for i, q in enumerate(QUESTIONS)})) as stub:
        assert full_run(stub, run_dir) == 0
        before = {line.question: line.score for line in read_lines(run_dir)}
        answers = run_dir / "answers.jsonl"
        if damage == "cut":
            answers.write_bytes(answers.read_bytes()[:-40])
        else:
            (run_dir / "questions.jsonl").write_text("{}\n")
        asked = stub.count("generate")
        capsys.readouterr()
        assert full_run(stub, run_dir, questions=2) == 0
        assert stub.count("generate") == asked, "nothing asked again"
    err = capsys.readouterr().err
    assert "rebuilt 4 question lines from the run's threads" in err
    assert {line.question: line.score for line in read_lines(run_dir)} == before
    assert json.loads((run_dir / "metadata.json").read_text())["questions"] == 4


def test_forget_refuses_lines_it_cannot_read(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub() as stub:
        assert full_run(stub, run_dir, questions=1) == 0
    (run_dir / "answers.jsonl").write_text("not json\n")
    written = (run_dir / "metadata.json").read_bytes()
    capsys.readouterr()
    assert main(["forget", "-m", "m1", str(run_dir)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot be read, so nothing is written over them" in line
    assert (run_dir / "metadata.json").read_bytes() == written


def rescore_into(server: OpenAIStub, into: Path) -> int:
    argv = ["rescore", str(PUBLISHED), "--judge-model", "stub-judge"]
    argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", KEY]
    argv += ["--coherence-threshold", "1", "--novelty-threshold", "0.1", "--json"]
    return main([*argv, "--into", str(into)])


@pytest.mark.parametrize("killed_in", ["replace_lines", "save"])
def test_rescore_into_killed_half_way_leaves_no_directory_and_resumes(
    killed_in: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Killed after the checkpoints (or after the lines) were written: no run directory
    is there to mislead ``report`` or ``run``; the same command builds it, asking the
    judge for nothing judged before."""
    from aidanbench.testing.published import published_chains
    from tests.judging import affine_judge

    monkeypatch.setenv(KEY, "sk-test-not-a-key")
    into = tmp_path / "rejudged"
    with OpenAIStub(affine_judge(published_chains())) as server:

        def killed(*args: Any) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(Recorder, killed_in, killed)
        with pytest.raises(KeyboardInterrupt):
            rescore_into(server, into)
        monkeypatch.undo()
        monkeypatch.setenv(KEY, "sk-test-not-a-key")
        assert not into.exists()
        assert main(["report", str(into)]) == 2
        assert "no such file or directory" in capsys.readouterr().err
        judged = server.count("coherence")
        assert rescore_into(server, into) == 0
        assert server.count("coherence") == judged, "every judgment came from the cache"
    payload = json.loads(capsys.readouterr().out)
    assert payload["into"]["threads"] == 49
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rejudged"], "nothing left beside"
    assert main(["report", str(into), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 5


def test_every_reply_is_priced_once(
    api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reply's ledger line is the one pricing of it: the answer records take their
    dollars from it, and a reply is priced once per ``usage`` line."""
    priced = []
    original = Usage.dollars

    def counted(self: Usage, price: Any) -> float | None:
        priced.append(self)
        return original(self, price)

    monkeypatch.setattr(Usage, "dollars", counted)
    prices = tmp_path / "prices.json"
    price = {"input": 1.0, "cached_input": None, "output": 2.0}
    prices.write_text(
        json.dumps({"date": "2026-11-01", "models": {"m1": price, "j": price, "e": price}})
    )
    run_dir = tmp_path / "run"
    with OpenAIStub() as stub:
        command = stub_run(stub.base_url, run_dir, "--questions", "2", "--prices", str(prices))
        assert main(command) == 0
    replies = [line for line in read_ledger(run_dir / "usage.jsonl") if line.event == "usage"]
    assert len(priced) == len(replies) > 0
    recorded = {
        line.id: line.cost_usd
        for line in replies
        if line.role == "model" and line.node in ("generate", "generate_next")
    }
    assert recorded and all(cost is not None for cost in recorded.values())
    spent = {a.calls["generate"]["cost_usd"] for line in read_lines(run_dir) for a in line.answers}
    assert spent <= set(recorded.values()), "each answer's dollars are its reply's line's"
