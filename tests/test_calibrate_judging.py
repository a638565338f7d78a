"""What ``calibrate --judge-model`` says of its judging: the requests it sent (every attempt
through the endpoint's limiter, as the ledger records them), a judge it could not calibrate by
name, a panel's majority when a judge refuses, the answers it judged, and no hidden file a
killed write left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.record.results import QuestionResult
from aidanbench.record.usage import read_ledger
from aidanbench.testing import OpenAIStub, fail_times
from tests.judging import ByJudge, Saying, Unreadable, affine_judge, one_question_reference

KEY = "AIDANBENCH_TEST_KEY"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-not-a-key")


def calibrate(server: OpenAIStub, out: Path, reference: Path, *judges: str) -> list[str]:
    argv = ["calibrate", "--reference", str(reference), "--out", str(out)]
    argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", KEY]
    for judge in judges:
        argv += ["--judge-model", judge]
    return argv


def refuses(answer: str) -> str:
    return "I cannot rate this."


def test_requests_are_counted_as_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """Every judgment's first attempt is answered 429 and asked again: the judging's
    ``requests`` are the attempts the server saw and the ledger holds, not the judgments."""
    reference = tmp_path / "small.json"
    answers = one_question_reference(reference)
    storm = fail_times("coherence", 1, 429, headers={"Retry-After": "0.01"})
    with OpenAIStub(affine_judge(chains), faults=storm) as server:
        assert main([*calibrate(server, tmp_path, reference, "j"), "--json"]) == 0
        asked = server.count("coherence")
    captured = capsys.readouterr()
    judging = json.loads(captured.out)["judging"]
    assert asked == 2 * len(set(answers))
    assert judging["requests"] == asked
    ledger = read_ledger(tmp_path / "judge-cache.usage.jsonl")
    assert sum(1 for line in ledger if line.role == "judge" and line.event == "sent") == asked
    progress = [line for line in captured.err.splitlines() if line.startswith("judged ")]
    assert progress[0].startswith(f"judged 0/{len(set(answers))} distinct answers")
    assert f"{asked} requests sent" in progress[-1]


def test_a_judge_that_decides_nothing_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """A panel whose second judge refuses every answer: the first is calibrated, and the
    command stops with one line naming the judge that could not be."""
    reference = tmp_path / "small.json"
    one_question_reference(reference)
    judge = affine_judge(chains)
    brain = ByJudge(judge, {"judge-c": Saying(refuses)})
    with OpenAIStub(brain) as server:
        argv = calibrate(server, tmp_path, reference, "judge-a", "judge-c")
        assert main([*argv, "--judge-attempts", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "cannot calibrate judge-c" in line and "the judge judge-c decided none" in line
    assert (tmp_path / "calibration-judge-judge-a.json").exists()


def test_a_majority_decides_the_panel_when_one_judge_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """Three judges, the third refusing one answer in every try: the two others agree, so the
    panel decides that answer too, and its agreement is over every answer."""
    reference = tmp_path / "small.json"
    answers = one_question_reference(reference)
    judge = affine_judge(chains)
    brain = ByJudge(judge, {"judge-c": Unreadable(judge, answers[1])})
    with OpenAIStub(brain) as server:
        argv = calibrate(server, tmp_path, reference, "judge-a", "judge-b", "judge-c")
        assert main([*argv, "--judge-attempts", "1", "--json"]) == 0
    panel = json.loads(capsys.readouterr().out)["panel"]
    assert panel["answers"] == len(answers) and panel["undecided"] == 0
    assert panel["agreement"] == 1.0


def test_the_report_counts_the_answers_of_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """With an answer refused in every try, the distinct answers judged and the repeats are
    the reference's (never a negative count), and the undecided answer is said."""
    reference = tmp_path / "small.json"
    answers = one_question_reference(reference)
    judge = affine_judge(chains)
    with OpenAIStub(Unreadable(judge, answers[1])) as server:
        assert main([*calibrate(server, tmp_path, reference, "j"), "--judge-attempts", "1"]) == 0
    out = capsys.readouterr().out
    distinct = len(set(answers))
    assert f"{distinct} distinct answers judged: {len(answers) - distinct} repeat" in out
    assert f"{len(answers)} answers, {len(answers) - 1} of them decided by the judge (1 left" in out


def test_a_killed_write_leaves_nothing_a_later_calibrate_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """``files.atomic_write``'s hidden temporary files, as a write killed before its rename
    leaves them, are removed by the next calibration of that judge; other files stay."""
    reference = tmp_path / "small.json"
    one_question_reference(reference)
    named = [".calibration-judge-j.json.k1lled_0", ".calibration-judge-j.png.x9y8z7w6"]
    others = [".calibration-judge-j.json.notes", ".calibration-judge-k.json.k1lled_0"]
    left, kept = [tmp_path / n for n in named], [tmp_path / n for n in others]
    for path in [*left, *kept]:
        path.write_text("{", "utf-8")
    with OpenAIStub(affine_judge(chains)) as server:
        assert main(calibrate(server, tmp_path, reference, "j")) == 0
    capsys.readouterr()
    assert not any(path.exists() for path in left)
    assert all(path.exists() for path in kept)
    document: dict[str, Any] = json.loads((tmp_path / "calibration-judge-j.json").read_text())
    assert document["judge"]["model"] == "j"
