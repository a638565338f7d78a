"""Calibrating a successor judge against the published o1-mini scores
(``aidanbench calibrate --judge-model``), and the pure parts of it.

The judge is a stub on the local server whose score is a function of o1-mini's recorded
one (``testing.judges``): ``floor(0.5 · recorded + 40)`` keeps o1-mini's ranking on
another scale, where 15 becomes 47.5.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aidanbench import reference
from aidanbench.analysis.judge_calibration import (
    calibrate_judge,
    least_squares,
    rank_correlation,
)
from aidanbench.cli.main import main
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult, read_aidanbench_file
from aidanbench.testing import OpenAIStub, echo_key
from tests.conftest import REPO
from tests.judging import Unreadable, affine_judge, one_question_reference

PUBLISHED_TOTALS = reference.PUBLISHED_TOTALS
KEY = "AIDANBENCH_TEST_KEY"


@pytest.fixture(scope="module")
def stub_judge(chains: list[QuestionResult]) -> Iterator[OpenAIStub]:
    """The published run's models, embedder and a judge scoring floor(0.5·o1-mini + 40)."""
    with OpenAIStub(affine_judge(chains)) as server:
        yield server


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-not-a-key")


def calibrate(
    server: OpenAIStub, out: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    argv = ["calibrate", "--judge-model", "stub-judge", "--judge-base-url", server.base_url]
    argv += ["--judge-api-key-env", KEY, "--out", str(out), "--json", *extra]
    assert main(argv) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    return payload


@pytest.mark.e2e
def test_stub_judge_is_calibrated_to_its_image_of_15(
    stub_judge: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None
) -> None:
    """floor(0.5 r + 40): a threshold in [47, 50) with every decision o1-mini's, and the
    published totals unchanged. Only one answer of the 1,161 fails o1-mini's rule (scored
    0, judged 40 here), so every cut in [40, 52) agrees on every decision: the line fitted
    through all the answers is what puts the threshold at 15's image, 47.25 (the
    interval's midpoint, 46, would be outside [47, 50)). End-to-end: it judges the whole
    published run."""
    before = stub_judge.count("coherence")
    payload = calibrate(stub_judge, tmp_path, capsys)
    judge = payload["judge"]
    assert 47 <= judge["threshold"] < 50
    assert judge["agreement"] == 1.0
    assert judge["calibrated"]["false_pass"] == judge["calibrated"]["false_fail"] == 0
    assert judge["calibrated"]["model_totals"] == PUBLISHED_TOTALS
    assert judge["calibrated"]["kendall_tau"] == pytest.approx(1.0)
    assert judge["equivalent_interval"] == [40.0, 52.0]
    documented = (REPO / "docs" / "judge.md").read_text("utf-8")
    assert f"is calibrated to {judge['threshold']:.3f} (every cut in [40, 52)" in documented
    assert judge["answers"] == 1161 and judge["reference_failures"] == 1
    assert judge["spearman"] == pytest.approx(1.0, abs=1e-3)
    assert judge["fit"]["slope"] == pytest.approx(0.5, abs=0.01)
    # 15 unchanged passes the one failure: its chain runs past its recording
    at_15 = judge["at_reference_threshold"]
    assert at_15["agreement"] == pytest.approx(1160 / 1161)
    assert at_15["false_pass"] == 1 and at_15["censored_questions"] == 1
    assert judge["served_models"] == {"stub-judge": 1158}
    assert stub_judge.count("coherence") - before == 1158  # one per distinct answer
    assert Path(payload["plot"]).stat().st_size > 10_000
    written = json.loads(Path(payload["calibration_file"]).read_text("utf-8"))
    assert written["judge"]["threshold"] == judge["threshold"]
    assert written["reference_sha256"] == payload["reference_sha256"]


def test_a_rerun_asks_nothing(
    stub_judge: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None
) -> None:
    answers = one_question_reference(tmp_path / "small.json")
    small = ("--reference", str(tmp_path / "small.json"))
    first = calibrate(stub_judge, tmp_path, capsys, *small)
    before = stub_judge.count("coherence")
    again = calibrate(stub_judge, tmp_path, capsys, *small)
    assert stub_judge.count("coherence") == before
    assert again["judging"]["requests"] == 0
    assert again["judging"]["from_cache"] == len(set(answers))
    assert again["judge"] == first["judge"]


def test_text_report_names_the_threshold_and_the_file(
    stub_judge: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None
) -> None:
    answers = one_question_reference(tmp_path / "small.json")
    argv = ["calibrate", "--judge-model", "stub-judge", "--judge-base-url", stub_judge.base_url]
    argv += ["--reference", str(tmp_path / "small.json")]
    assert main([*argv, "--judge-api-key-env", KEY, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "decision agreement" in out and f"100.0% ({len(answers)}/{len(answers)})" in out
    distinct = len(set(answers))
    assert f"  {distinct} distinct answers judged: {len(answers) - distinct} repeat" in out
    assert f"--coherence-threshold {tmp_path / 'calibration-judge-stub-judge.json'}" in out
    assert "anthropic/claude-3.5-sonnet" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "name the model to calibrate"),
        (["--judge-model", "j", "--embedding-model", "e"], "one at a time"),
        (["--judge-model", "j", "--judge-api-key-env", "UNSET_VARIABLE_X"], "UNSET_VARIABLE_X"),
        (["--judge-model", "j", "--judge-samples", "0"], "invalid --judge-samples"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None
) -> None:
    assert main(["calibrate", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err


def test_unreadable_judgments_are_failures_retried_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None, chains: list[QuestionResult]
) -> None:
    """A reply that cannot be read (after --judge-attempts) is never a score: the answer
    is left out of the calibration and counted, every other judgment is kept, and a
    rerun asks only for it."""
    small = tmp_path / "small.json"
    answers = one_question_reference(small)
    judge = affine_judge(chains)
    with OpenAIStub(Unreadable(judge, answers[2])) as server:
        args = ["calibrate", "--judge-model", "j", "--judge-base-url", server.base_url]
        args += ["--judge-api-key-env", KEY, "--out", str(tmp_path), "--reference", str(small)]
        args += ["--judge-attempts", "2"]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "1 answer the judge gave no readable score in every try left undecided" in out
        assert "unreadable: 2 without a score (refused)" in out
        assert server.count("coherence") == len(set(answers)) + 1  # two attempts for it
        server.brain = judge
        server.clear()
        assert main(args) == 0
        assert server.count("coherence") == 1


# --- the pure parts ------------------------------------------------------------------


def test_rank_correlation_averages_ties() -> None:
    x = np.asarray([1.0, 2.0, 2.0, 3.0])
    y = np.asarray([10.0, 20.0, 30.0, 40.0])
    # ranks of x: 0, 1.5, 1.5, 3; Pearson with 0, 1, 2, 3
    rx, ry = np.asarray([0, 1.5, 1.5, 3]), np.arange(4.0)
    assert rank_correlation(x, y) == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]))
    assert rank_correlation(x, -y) == pytest.approx(-float(np.corrcoef(rx, ry)[0, 1]))
    assert rank_correlation(np.ones(3), y[:3]) is None
    assert least_squares(np.asarray([0.0, 10.0, 20.0]), np.asarray([5.0, 10.0, 15.0])) == (
        pytest.approx(5.0),
        pytest.approx(0.5),
    )


def _chain(model: str, question: str, scores: list[float], fails_last: bool) -> QuestionResult:
    rows = tuple(
        AnswerLine(
            index=i,
            answer=f"{question} answer {i}",
            coherence=score,
            novelty=0.05 if fails_last and i == len(scores) else 0.9,
            llm_novelty=None,
            valid=True,
        )
        for i, score in enumerate(scores, 1)
    )
    return QuestionResult(model, 0.7, question, rows, "novelty")


def test_the_threshold_is_the_image_of_15_inside_the_best_interval_else_its_middle() -> None:
    chains = [
        _chain("a", "q1", [80, 70, 10], fails_last=False),
        _chain("b", "q2", [60, 90, 50], fails_last=True),
    ]

    def judged(rule: Any) -> dict[tuple[str, str], tuple[int]]:
        return {(c.question, a.answer): (rule(a.coherence),) for c in chains for a in c.answers}

    image = calibrate_judge(chains, judged(lambda r: math.floor(0.5 * r + 40)), judge_model="j")
    low, high = image.interval
    assert (low, high) == (45.0, 65.0)
    assert image.threshold == pytest.approx(image.fit[0] + image.fit[1] * 15)  # type: ignore[index]
    assert low <= image.threshold < high
    assert image.at_reference.total_text("a") == "≥ 3", "at 15 its failing end (45) passes"
    assert image.calibrated.total_text("a") == "2"
    # a judge whose scale puts 15's image outside the interval that agrees best: midpoint
    bent = {
        (c.question, a.answer): (int(a.coherence) ** 2 // 100,) for c in chains for a in c.answers
    }
    outside = calibrate_judge(chains, bent, judge_model="j")
    assert outside.interval == (1.0, 25.0)
    assert outside.threshold == pytest.approx(13.0)
    assert outside.calibrated.decision_agreement == 1.0


def test_calibration_needs_an_answer_judged() -> None:
    chains = [_chain("a", "q1", [80, 70], fails_last=False)]
    with pytest.raises(ValueError, match="decided none"):
        calibrate_judge(chains, {}, judge_model="j")


def test_published_reference_has_one_coherence_failure() -> None:
    """What makes decision agreement weak evidence on this reference (README says so)."""
    chains = read_aidanbench_file(reference.published_run())
    scores = [a.coherence for c in chains for a in c.answers]
    assert len(scores) == 1161 and sum(1 for s in scores if s is not None and s <= 15) == 1


def test_a_judge_no_retry_can_fix_stops_at_once_without_echoing_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: None, chains: list[QuestionResult]
) -> None:
    """A 401 would meet every request: one line, exit 2, the provider's echo of the key
    redacted, and far fewer requests than answers."""
    with OpenAIStub(affine_judge(chains), faults=lambda info: echo_key(401)) as server:
        argv = ["calibrate", "--judge-model", "j", "--judge-base-url", server.base_url]
        assert main([*argv, "--judge-api-key-env", KEY, "--out", str(tmp_path)]) == 2
        asked = server.count("coherence")
    err = capsys.readouterr().err
    *progress, last = err.splitlines()
    assert all(line.startswith("judged ") for line in progress)
    assert last.startswith("aidanbench calibrate: error: the judge j cannot be used")
    assert "HTTP 401" in last and "[redacted]" in last and "sk-test-not-a-key" not in err
    assert asked < 1158
