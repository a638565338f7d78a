"""Each judge of a panel is its own record: its served model, its refusals, its dollars and
its host in an error; a majority the judges who answered already make decides the answer;
a judge's refusals in every try are counted in the run's report.

Three judges on two local servers (``judge-a`` at A; ``judge-b`` and ``judge-c`` at B), the
model under test and the embedder at A, each judge scoring by its own rule (``ByJudge``:
what a judge answers depends on the model asked, never on the order of requests).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.core.state import CallStats
from aidanbench.core.thresholds import panel_verdict
from aidanbench.nodes.judge import Seat, panel_outcome
from aidanbench.record.lines import read_lines
from aidanbench.services import limits
from aidanbench.testing import OpenAIStub, ScriptedBrain, hang, when
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_settings
from tests.judging import ByJudge, Saying

JUDGES = ("judge-a", "judge-b", "judge-c")
QUESTIONS = ["What could a spoon be used for?", "Name a use for a brick."]

Rule = Callable[[str], str]
"""A judge's reply to the answer it is asked about."""


def score(value: int) -> Rule:
    return lambda answer: f"<coherence_score>{value}</coherence_score>"


def refusing(matching: str, otherwise: Rule) -> Rule:
    """Refuses (no score) every answer holding ``matching``, every time."""
    return lambda answer: "I will not rate this." if matching in answer else otherwise(answer)


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_VARIABLE, "sk-test-not-a-key")


@pytest.fixture
def two() -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    with OpenAIStub() as a, OpenAIStub() as b:
        yield a, b


def serve(stubs: tuple[OpenAIStub, OpenAIStub], rules: Mapping[str, Rule]) -> None:
    """Both servers play the same chains, each judge by its rule."""
    for stub in stubs:
        judges = {name: Saying(rule) for name, rule in rules.items()}
        stub.brain = ByJudge(ScriptedBrain(default_length=3), judges)


def run_panel(
    stubs: tuple[OpenAIStub, OpenAIStub],
    run_dir: Path,
    judges: Sequence[tuple[str, OpenAIStub]],
    *extra: str,
) -> int:
    a, _ = stubs
    questions = run_dir.parent / "questions.json"
    questions.write_text(json.dumps(QUESTIONS), "utf-8")
    argv = ["run", "-m", "m", "--questions-file", str(questions), "--run-dir", str(run_dir)]
    for role in ("", "embedding-"):
        argv += [f"--{role}base-url", a.base_url, f"--{role}api-key-env", TEST_KEY_VARIABLE]
    argv += ["--judge-api-key-env", TEST_KEY_VARIABLE]
    for name, stub in judges:
        argv += ["--judge-model", name, "--judge-base-url", stub.base_url]
        argv += ["--coherence-threshold", "15"]
    return main([*argv, *extra])


def report(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert main(["report", str(run_dir)]) == 0
    captured = capsys.readouterr()
    return row, " ".join((captured.out + captured.err).split())


def three(stubs: tuple[OpenAIStub, OpenAIStub]) -> list[tuple[str, OpenAIStub]]:
    a, b = stubs
    return [("judge-a", a), ("judge-b", b), ("judge-c", b)]


def test_a_healthy_panel_is_served_by_its_own_judges(
    two: tuple[OpenAIStub, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each answer records the model that served each judge (its own); the row's judge is
    served by itself, so no "served by" another judge and no warning of a swapped model."""
    serve(two, dict.fromkeys(JUDGES, score(80)))
    run_dir = tmp_path / "run"
    assert run_panel(two, run_dir, three(two)) == 0
    answers = [a for line in read_lines(run_dir) for a in line.answers]
    assert answers
    for answer in answers:
        assert (answer.calls or {})["judge"]["served_model"] == "judge-a"
        assert [j.get("served_model") for j in answer.judges or []] == list(JUDGES)
    row, text = report(run_dir, capsys)
    assert row["judge_served"] == {"judge-a": len(answers)}
    assert row["judge_panel"]["served"] == [{name: len(answers)} for name in JUDGES]
    assert f"judge-a; served by judge-a ({len(answers)} answers)" in text
    assert "served by judge-c" not in text and "served by judge-b" not in text
    assert "but the provider says" not in text


def test_a_majority_decides_when_one_judge_always_refuses(
    two: tuple[OpenAIStub, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """judge-c refuses every answer of the first idea in every try; judge-a and judge-b pass
    them, so those answers are decided (valid) all the same, judge-c's record there says it
    gave no score, and its refused replies are counted, by kind and by judge."""
    rules = {"judge-a": score(80), "judge-b": score(70), "judge-c": refusing("Idea 1", score(60))}
    serve(two, rules)
    run_dir = tmp_path / "run"
    assert run_panel(two, run_dir, three(two), "--judge-attempts", "2") == 0
    lines = read_lines(run_dir)
    assert all(line.stop_reason == "novelty" for line in lines), "no question undecided"
    refused = [a for line in lines for a in line.answers if "Idea 1" in a.answer]
    assert len(refused) == 2 * len(QUESTIONS), "the first answer, and its repeat that ends"
    for answer in refused:
        assert answer.valid == (answer.index == 1)
        a, b, c = answer.judges or []
        assert (a["passes"], b["passes"], c["passes"]) == (True, True, None)
        assert c["score"] is None and c.get("unreadable") == {"missing": 2}
        assert "judge-c" in c["error"]["message"] and c["error"]["kind"] == "judge_error"
    row, text = report(run_dir, capsys)
    assert row["judge_unreadable"] == {"missing": 2 * len(refused)}
    panel = row["judge_panel"]
    assert panel["unreadable"] == [{}, {}, {"missing": 2 * len(refused)}]
    assert panel["unscored"] == [0, 0, len(refused)]
    assert f"no score for {len(refused)}" in text
    assert f"unreadable replies: {2 * len(refused)} without a score (refused)" in text


def test_a_refusal_in_every_try_is_counted_in_the_run(
    two: tuple[OpenAIStub, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One judge, refusing the second answer of every question in every try: each question
    stops there (``judge_error``), and the report counts those refusals (they never led to a
    score, so no answer record holds them)."""
    a, _ = two
    serve(two, {"judge-a": refusing("Idea 2", score(80))})
    run_dir = tmp_path / "run"
    assert run_panel(two, run_dir, [("judge-a", a)], "--judge-attempts", "3") == 1, "errors"
    lines = read_lines(run_dir)
    assert [line.stop_reason for line in lines] == ["judge_error"] * len(QUESTIONS)
    row, text = report(run_dir, capsys)
    refused = f"{3 * len(QUESTIONS)} without a score (refused)"
    assert row["judge_unreadable"] == {"missing": 3 * len(QUESTIONS)}
    assert f"judge replies unreadable: {refused}" in text
    page = (run_dir / "report.html").read_text("utf-8")
    assert f'"judge_unreadable":"{refused}"' in page, "the HTML's judge rows say it too"


def test_a_hanging_judge_is_named_with_its_own_host(
    two: tuple[OpenAIStub, OpenAIStub],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """judge-b (at B) never answers in time: with two judges the answer needs both, so the
    question stops, and its error names judge-b and B's host, not judge-a's A. While it
    hangs the log says so, naming it, and its endpoint counts its time-outs."""
    monkeypatch.setattr(limits, "STALLED_S", 0.2)  # the run's own request takes 1 s here
    a, b = two
    serve(two, dict.fromkeys(JUDGES, score(80)))
    b.faults = when("coherence", hang(30))
    run_dir = tmp_path / "run"
    extra = ("--request-timeout", "1", "--max-retries", "0")
    assert run_panel(two, run_dir, [("judge-a", a), ("judge-b", b)], *extra) == 1, "errors"
    b.faults = None
    host_b = b.base_url.split("//")[1].split("/")[0]
    for line in read_lines(run_dir):
        assert line.error is not None
        assert line.error["message"] == f"judge judge-b at {host_b}: request timed out"
        assert line.error.get("judge") == "judge-b"
    log = capsys.readouterr().err
    assert re.search(rf"{host_b}: judge-b: \d+ requests? without an answer for \d+ s", log)
    assert f"{a.base_url.split('//')[1].split('/')[0]}: judge-a: " not in log
    limits_of = json.loads((run_dir / "metadata.json").read_text("utf-8"))["endpoint_limits"]
    assert limits_of[host_b]["timed_out"] == len(QUESTIONS)


def calls(cost: float, served: str, unreadable: dict[str, int] | None = None) -> CallStats:
    found = CallStats(served_model=served, latency_s=0.1, input_tokens=1, output_tokens=1, calls=1)
    found["cost_usd"] = cost
    if unreadable:
        found["unreadable"] = unreadable
    return found


def test_the_panel_outcome_keeps_each_judge_apart() -> None:
    """The summed calls carry the first judge's served model; a judge without a score is
    unknown, never a pass or a fail: it undecides only a vote the others leave open."""
    seats = [stub_settings("http://127.0.0.1:9/v1", judge_model=name) for name in JUDGES]
    error = {"kind": "judge_error", "role": "judge", "message": "m", "status": None}
    refused = Seat(seats[2], None, {**error, "retryable": True}, calls(0.5, "judge-c"))  # type: ignore[typeddict-item]
    decided = panel_outcome(
        [Seat(seats[0], ([80], calls(1.0, "a"))), Seat(seats[1], ([70], calls(2.0, "b"))), refused],
        1,
        1,
        [],
    )
    assert decided["call"]["served_model"] == "a" and decided["call"].get("cost_usd") == 3.5
    assert [j.get("served_model") for j in decided["panel"]] == ["a", "b", "judge-c"]
    open_vote = panel_outcome(
        [Seat(seats[0], ([80], calls(1.0, "a"))), Seat(seats[1], ([5], calls(2.0, "b"))), refused],
        1,
        1,
        [],
    )
    assert "error" in open_vote and "panel" not in open_vote
    assert panel_verdict([True, True, None]) is True
    assert panel_verdict([False, False, None]) is False
    assert panel_verdict([True, False, None]) is None
    assert panel_verdict([None, True, True]) is True
    assert panel_verdict([None, True]) is None
