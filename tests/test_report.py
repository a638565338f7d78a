"""``aidanbench report``: text and JSON output, the paired comparison, bad paths."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.summary import COUNTING
from aidanbench.cli.main import main
from tests.builders import (
    QUESTIONS,
    REFERENCE_SCORES,
    REFERENCE_TOTALS,
    chain,
    question_line,
    two_model_lines,
    write_run_dir,
)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(list(argv)) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def table_rows(text: str, first: str) -> list[list[str]]:
    """Cells of the table rows whose first cell matches ``first`` (a regex)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and re.fullmatch(first, cells[0]):
            rows.append(cells)
    return rows


def test_text_report_reproduces_reference_scores(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(reference_run)]) == 0
    out = capsys.readouterr().out
    summary = {
        cells[0]: int(cells[2]) for cells in table_rows(out, r"[\w./-]+/[\w.-]+|gpt-4-turbo")
    }
    assert summary == REFERENCE_TOTALS
    matrix = table_rows(out, r"Q\d+")
    assert [cells[0] for cells in matrix] == [f"Q{i}" for i in range(1, 11)]
    for column, model in enumerate(REFERENCE_SCORES, start=2):
        printed = [cells[column] for cells in matrix]
        assert [int(c) for c in printed if c != "–"] == REFERENCE_SCORES[model], model
    assert [cells[4] for cells in matrix][2] == "–", "gpt-4-turbo did not run Q3"
    assert COUNTING in " ".join(out.split())
    assert "warning: models answered different question sets" in out
    assert "Errored questions" not in out


def test_json_report_reproduces_reference_scores(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "report", str(reference_run), "--json")
    assert data["counting"] == COUNTING
    runs = {run["model"]: run for run in data["runs"]}
    assert {m: r["score"] for m, r in runs.items()} == REFERENCE_TOTALS
    for model, scores in REFERENCE_SCORES.items():
        questions = runs[model]["questions"]
        assert [q["score"] for q in questions] == scores
        assert [q["answers"] for q in questions] == [s + 1 for s in scores], (
            "the original records the failing answer after the valid ones"
        )
        assert {q["repeat"] for q in questions} == {1}
        assert all(q["error"] is None for q in questions)
    assert runs["gpt-4-turbo"]["question_count"] == 9
    assert runs["gpt-4-turbo"]["stop_reasons"] == {"novelty": 8, "coherence": 1}
    assert len(data["warnings"]) == 1
    assert "comparison" not in data


def test_compare_reference(reference_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["report", str(reference_run), "--compare", "gpt-4-turbo", "anthropic/claude-3.5-sonnet"]
    data = run_json(capsys, *argv, "--json")
    comparison = data["comparison"]
    assert comparison["difference"] == 224 - (421 - 28)
    assert comparison["pairs"] == 9 and comparison["only_b"] == 1
    low, high = comparison["interval"]
    assert low < comparison["difference"] < high
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Paired comparison gpt-4-turbo − anthropic/claude-3.5-sonnet: -169 over 9" in text
    assert f"[{low:+.1f}, {high:+.1f}]" in text


def test_run_dir_report_lists_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "Errored questions (1)" in out
    assert "model-b @ 0.7, repeat 2, Q3" in out
    assert "error: model: api.example.com returned 503" in out
    matrix = table_rows(out, r"Q\d+")
    assert [cells[2:] for cells in matrix] == [["5/7", "2/3"], ["3/1", "2/0"], ["8/6", "4/1!"]]
    assert "warning" not in out

    data = run_json(capsys, "report", str(run_dir), "--json")
    runs = {run["model"]: run for run in data["runs"]}
    assert runs["model-b"]["errored"] == 1
    entry_keys = ("index", "question", "score", "answers", "stop_reason", "repeat", "error")
    failed = [{k: q[k] for k in entry_keys} for q in runs["model-b"]["questions"] if q["error"]]
    assert failed == [
        {
            "index": 3,
            "question": QUESTIONS[2],
            "score": 1,
            "answers": 1,
            "stop_reason": "error",
            "repeat": 2,
            "error": "model: api.example.com returned 503",
        }
    ]
    assert runs["model-a"]["score_interval"] is not None
    assert runs["model-a"]["mean_repeat_score"] == 15.0


def test_report_warns_about_mixed_embeddings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        question_line("m1", QUESTIONS[0], chain(2)),
        question_line("m2", QUESTIONS[0], chain(4), embedding_model="all-minilm-l6-v2"),
    ]
    run_dir = write_run_dir(tmp_path / "run", lines)
    assert main(["report", str(run_dir)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: results used different embedding models" in out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "missing.json", "no such file or directory"),
        (lambda tmp: _write(tmp / "bad.json", "{not json"), "cannot read results file"),
        (lambda tmp: _write(tmp / "other.json", '{"x": 1}'), "no 'models' object"),
        (lambda tmp: tmp, "is not a run directory"),
        (lambda tmp: _write(tmp / "questions.jsonl", "{oops\n").parent, "not JSON"),
    ],
)
def test_bad_path_is_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    path = make(tmp_path)
    assert main(["report", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aidanbench report: error: ")
    assert message in lines[0]


def test_compare_unknown_model_is_usage_error(
    reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(reference_run), "--compare", "gpt-4-turbo", "nope"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "model 'nope' not in results" in err


def _write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path


def test_repeats_show_the_per_rollout_mean_beside_the_headline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``vf-eval`` prints the mean reward per rollout (question line); ``report`` prints
    AidanBench's per-repeat sum. With repeats both are shown, and which is which."""
    from tests.viewdata import make_run_dir

    run_dir = make_run_dir(tmp_path / "run", repeats=2)
    payload = run_json(capsys, "report", str(run_dir), "--json")
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    for run in payload["runs"]:
        mean = run["rollout_means"]["reward"]
        line = next(
            x for x in text.splitlines() if x.startswith(f"headline (count): {run['model']}")
        )
        assert f"{run['score']:.4g}" in line
        assert f"per rollout (vf-eval's reward): {mean:.2f} over {len(run['questions'])}" in line
    alpha = payload["runs"][0]
    assert alpha["score"] == pytest.approx(alpha["rollout_means"]["reward"] * 3), "3 questions"
    assert "vf-eval prints the mean reward of one rollout" in text
