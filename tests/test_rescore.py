"""``aidanbench rescore``: exact under the run's own or stricter thresholds, flagged as
truncated (a lower bound) where looser thresholds would have let the run go on.

Expected values are recounted here from the raw file with a plain loop, independent of
``chain_validity``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.rescore import TRUNCATED, rescore
from aidanbench.cli.main import main
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.results import read_results
from tests.builders import (
    QUESTIONS,
    REFERENCE_SCORES,
    REFERENCE_TOTALS,
    chain,
    question_line,
    two_model_lines,
    write_run_dir,
)


def rescore_json(
    capsys: pytest.CaptureFixture[str], path: Path, *thresholds: str
) -> dict[str, Any]:
    argv = ["rescore", str(path), "--json", *thresholds]
    assert main(argv) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def per_question(data: dict[str, Any], field: str = "score") -> dict[str, list[Any]]:
    return {run["model"]: [q[field] for q in run["questions"]] for run in data["runs"]}


def recount(path: Path, coherence: float, novelty: float) -> dict[str, list[tuple[int, bool]]]:
    """(score, terminal answer passes) per question, straight from the raw file."""
    data = json.loads(path.read_text("utf-8"))
    counts: dict[str, list[tuple[int, bool]]] = {}
    for model, temps in data["models"].items():
        for records in temps["0.7"].values():
            score = 0
            for record in sorted(records, key=lambda r: r["answer_num"]):
                if (
                    record["coherence_score"] > coherence
                    and record["embedding_dissimilarity_score"] > novelty
                ):
                    score += 1
                else:
                    break
            counts.setdefault(model, []).append((score, score == len(records)))
    return counts


def test_own_thresholds_reproduce_reference(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = rescore_json(
        capsys, reference_run, "--coherence-threshold", "15", "--novelty-threshold", "0.15"
    )
    assert {run["model"]: run["score"] for run in data["runs"]} == REFERENCE_TOTALS
    assert {run["model"]: run["original_score"] for run in data["runs"]} == REFERENCE_TOTALS
    assert per_question(data) == REFERENCE_SCORES
    assert data["truncated"] == 0
    assert all(run["truncated"] == 0 for run in data["runs"])
    assert data["runs"][0]["original_thresholds"] == [
        {"coherence": 15.0, "novelty": 0.15, "llm_novelty": None}
    ]
    assert data["thresholds"] == {"coherence": 15.0, "novelty": 0.15, "llm_novelty": None}


@pytest.mark.parametrize(("coherence", "novelty"), [(90, 0.15), (50, 0.25), (15, 0.3)])
def test_stricter_thresholds_match_independent_recount(
    reference_run: Path, capsys: pytest.CaptureFixture[str], coherence: float, novelty: float
) -> None:
    """Coherence 90 is a score the judge gives often: strictly greater must fail it."""
    data = rescore_json(
        capsys,
        reference_run,
        "--coherence-threshold",
        str(coherence),
        "--novelty-threshold",
        str(novelty),
    )
    expected = recount(reference_run, coherence, novelty)
    assert per_question(data) == {m: [s for s, _ in v] for m, v in expected.items()}
    totals = {run["model"]: run["score"] for run in data["runs"]}
    assert all(totals[m] < REFERENCE_TOTALS[m] for m in totals)
    assert data["truncated"] == 0


def test_looser_thresholds_flag_truncation(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--coherence-threshold", "10", "--novelty-threshold", "0.1"]
    data = rescore_json(capsys, reference_run, *argv)
    expected = recount(reference_run, 10, 0.1)
    assert per_question(data) == {m: [s for s, _ in v] for m, v in expected.items()}
    assert per_question(data, "truncated") == {m: [t for _, t in v] for m, v in expected.items()}
    truncated = sum(t for v in expected.values() for _, t in v)
    assert truncated > 0 and data["truncated"] == truncated
    for run in data["runs"]:
        for q in run["questions"]:
            if q["truncated"]:
                assert q["score"] == q["answers"] and q["stop_reason"] == TRUNCATED

    assert main(["rescore", str(reference_run), *argv]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"{truncated} of 49 question lines are truncated" in text
    assert "scored up to where the run stopped" in text and "lower bounds" in text
    assert "≥ 429" in text, "claude's rescored total is shown as a lower bound"
    assert "≥53" in text, "truncated cells are marked"


def test_run_dir_own_thresholds_reproduce_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    report = json.loads(_stdout(capsys, ["report", str(run_dir), "--json"]))
    data = rescore_json(
        capsys, run_dir, "--coherence-threshold", "15", "--novelty-threshold", "0.15"
    )
    assert per_question(data) == per_question(report)
    assert per_question(data, "stop_reason") == per_question(report, "stop_reason")
    assert per_question(data, "error") == per_question(report, "error")
    assert data["truncated"] == 0


def test_run_dir_with_other_thresholds(tmp_path: Path) -> None:
    """A run made with (30, 0.3) rescored with the benchmark's: every rule stop is truncated;
    rescored with its own: unchanged."""
    rule = {"coherence": 30.0, "novelty": 0.3}
    lines = [
        question_line("m", QUESTIONS[0], [(80, 1.0), (80, 0.4), (80, 0.2)], thresholds=rule),
        question_line("m", QUESTIONS[1], [(80, 1.0), (20, 0.5)], thresholds=rule),
        question_line("m", QUESTIONS[2], [(80, 1.0), (10, 0.5)], thresholds=rule),
    ]
    results = read_results(write_run_dir(tmp_path / "run", lines, thresholds=rule))
    own = rescore(results, Thresholds(coherence=30, novelty=0.3))
    assert [r.result.score for r in own] == [2, 1, 1]
    assert not any(r.truncated for r in own)
    benchmark = rescore(results, Thresholds())
    assert [r.result.score for r in benchmark] == [3, 2, 1]
    assert [r.truncated for r in benchmark] == [True, True, False]
    assert [r.original_thresholds for r in benchmark] == [Thresholds(coherence=30, novelty=0.3)] * 3


def test_stricter_rule_ends_an_errored_line_before_its_error(tmp_path: Path) -> None:
    line = question_line("m", QUESTIONS[0], chain(4, fail=None), error="judge: 503")
    (rescored,) = rescore(
        read_results(write_run_dir(tmp_path / "run", [line])), Thresholds(coherence=15, novelty=0.4)
    )
    assert rescored.original.stop_reason == "error" and rescored.original_score == 4
    assert rescored.result.stop_reason == "novelty" and rescored.result.error is None
    assert rescored.result.score == 1 and not rescored.truncated


def test_llm_novelty_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        question_line(
            "m",
            QUESTIONS[0],
            chain(3),
            thresholds={"llm_novelty": 0.15},
            llm=[1.0, 0.5, 0.3, 0.6],
        )
    ]
    run_dir = write_run_dir(tmp_path / "run", lines, thresholds={"llm_novelty": 0.15})
    base = ["--coherence-threshold", "15", "--novelty-threshold", "0.15"]
    same = rescore_json(capsys, run_dir, *base, "--llm-novelty-threshold", "0.15")
    assert per_question(same) == {"m": [3]}
    stricter = rescore_json(capsys, run_dir, *base, "--llm-novelty-threshold", "0.4")
    assert per_question(stricter) == {"m": [2]}
    assert per_question(stricter, "stop_reason") == {"m": ["llm_novelty"]}
    without = rescore_json(capsys, run_dir, *base)
    assert per_question(without) == {"m": [3]} and without["truncated"] == 0


@pytest.mark.parametrize(
    ("coherence", "novelty", "llm", "message"),
    [
        (
            "abc",
            "0.15",
            None,
            "--coherence-threshold must be a number or a judge calibration file, got 'abc'",
        ),
        ("-1", "0.15", None, "--coherence-threshold must be between 0 and 100"),
        ("100.5", "0.15", None, "--coherence-threshold must be between 0 and 100"),
        ("nan", "0.15", None, "--coherence-threshold must be between 0 and 100"),
        ("15", "inf", None, "--novelty-threshold must be between 0 and 2"),
        ("15", "2.5", None, "--novelty-threshold must be between 0 and 2"),
        ("15", "0.15", "x", "--llm-novelty-threshold must be a number"),
        ("15", "0.15", "0.2", "needs LLM novelty scores"),
    ],
)
def test_invalid_thresholds_are_one_line_errors(
    reference_run: Path,
    capsys: pytest.CaptureFixture[str],
    coherence: str,
    novelty: str,
    llm: str | None,
    message: str,
) -> None:
    argv = ["rescore", str(reference_run), "--coherence-threshold", coherence]
    argv += ["--novelty-threshold", novelty]
    if llm is not None:
        argv += ["--llm-novelty-threshold", llm]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and message in captured.err


def test_novelty_above_one_is_allowed(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = rescore_json(
        capsys, reference_run, "--coherence-threshold", "0", "--novelty-threshold", "1.5"
    )
    assert all(run["score"] == 0 for run in data["runs"])


def test_missing_path_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["rescore", str(tmp_path / "nope"), "--coherence-threshold", "15"]
    assert main([*argv, "--novelty-threshold", "0.15"]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def _stdout(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out
