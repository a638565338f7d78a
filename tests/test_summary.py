"""Summaries, the bootstrap scheme, paired comparisons and comparability warnings.

Also home of the synthetic run-directory builders the report, rescore and plot tests use:
question lines shaped like the graph's output (``QuestionOutput`` with ``AnswerRecord``s),
written with the package's writer (``record.lines.write_lines``) next to a ``metadata.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from aidanbench.analysis.summary import (
    COUNTING,
    bootstrap_sum,
    paired_comparison,
    summarise,
    warnings,
)
from aidanbench.analysis.summary_table import render_summary
from aidanbench.record.results import read_results
from tests.builders import (
    EMBEDDING,
    QUESTIONS,
    REFERENCE_SCORES,
    REFERENCE_TOTALS,
    TOKENS_PER_ANSWER,
    chain,
    question_line,
    two_model_lines,
    write_run_dir,
)


def test_reference_totals_and_counts(reference_run: Path) -> None:
    rows = {row.model: row for row in summarise(read_results(reference_run))}
    assert {m: r.score for m, r in rows.items()} == REFERENCE_TOTALS
    assert {m: r.question_count for m, r in rows.items()} == {
        m: len(s) for m, s in REFERENCE_SCORES.items()
    }
    turbo = rows["gpt-4-turbo"]
    assert turbo.stop_reasons == {"novelty": 8, "coherence": 1}
    assert turbo.finished == 9 and turbo.errored == 0
    assert turbo.format_adherence is None, "original files do not record the answer tag"
    assert turbo.tokens is None and turbo.repeats == 1, "results files record no tokens"
    assert turbo.mean_repeat_score is None and turbo.score_interval is None


def test_reference_means_match_raw_file(reference_run: Path) -> None:
    data = json.loads(reference_run.read_text("utf-8"))
    rows = {row.model: row for row in summarise(read_results(reference_run))}
    for model, temps in data["models"].items():
        valid = [a for records in temps["0.7"].values() for a in records[:-1]]
        row = rows[model]
        assert row.means["coherence"] == pytest.approx(
            np.mean([a["coherence_score"] for a in valid])
        )
        novelty = [a["embedding_dissimilarity_score"] for a in valid]
        assert row.means["novelty"] == pytest.approx(np.mean(novelty))
        assert row.novelty_sum == pytest.approx(sum(novelty))
        assert row.means["llm_novelty"] is None


def test_synthetic_run_dir_summary(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    rows = {row.model: row for row in summarise(read_results(run_dir))}
    a, b = rows["model-a"], rows["model-b"]
    assert (a.score, b.score) == ((5 + 3 + 8 + 7 + 1 + 6) / 2, (2 + 2 + 4 + 3 + 0 + 1) / 2)
    assert (a.repeat_scores, b.repeat_scores) == ((16, 14), (8, 4))
    assert (a.question_count, a.lines, a.repeats) == (3, 6, 2)
    assert a.stop_reasons == {"novelty": 6}
    assert b.stop_reasons == {"coherence": 5, "error": 1}
    assert (b.finished, b.errored) == (5, 1)
    assert a.format_adherence == 1.0
    answers_b = [n + 1 for n in (2, 2, 4, 3, 0)]
    tagged_b = sum((n + 2) // 2 for n in (2, 2, 4, 3, 0))
    errored_answers = 1  # model-b's errored line: one valid answer, tagged
    assert b.format_adherence == pytest.approx(
        (tagged_b + errored_answers) / (sum(answers_b) + errored_answers)
    )
    assert a.tokens == TOKENS_PER_ANSWER * (sum(a.repeat_scores) + 6)
    assert a.means["coherence"] == 80.0
    assert a.mean_repeat_score == a.score
    assert a.thresholds is not None and a.thresholds["novelty"] == 0.15
    assert a.embedding_model == EMBEDDING


def test_interval_resamples_questions_with_their_repeats(tmp_path: Path) -> None:
    """Two identical repeats must give the single repeat's interval.

    Resampling each repeat's questions independently would shrink it by about sqrt(2).
    """
    per_question = [1, 40, 3, 25, 9, 60, 2]
    lines = [
        question_line("m", f"question {i}", chain(score), repeat=repeat)
        for repeat in (1, 2)
        for i, score in enumerate(per_question)
    ]
    (row,) = summarise(read_results(write_run_dir(tmp_path / "run", lines)))
    assert row.mean_repeat_score == sum(per_question)
    expected = bootstrap_sum([float(s) for s in per_question])
    assert row.score_interval == expected
    assert expected is not None
    low, high = expected
    assert low < sum(per_question) < high
    assert high - low > 40, "the interval reflects question-to-question spread"


def test_interval_is_reproducible(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    first = [row.score_interval for row in summarise(read_results(run_dir))]
    second = [row.score_interval for row in summarise(read_results(run_dir))]
    assert first == second and all(first)


def test_paired_comparison_reference(reference_run: Path) -> None:
    results = read_results(reference_run)
    comparison = paired_comparison(results, "gpt-4-turbo", "anthropic/claude-3.5-sonnet")
    sonnet_without_q3 = REFERENCE_TOTALS["anthropic/claude-3.5-sonnet"] - 28
    assert (comparison.pairs, comparison.questions) == (9, 9)
    assert (comparison.score_a, comparison.score_b) == (224, sonnet_without_q3)
    assert comparison.difference == 224 - sonnet_without_q3
    assert (comparison.only_a, comparison.only_b, comparison.unfinished_pairs) == (0, 1, 0)
    assert comparison.interval is not None
    low, high = comparison.interval
    assert low < comparison.difference < high


def test_paired_comparison_leaves_out_errored_lines(tmp_path: Path) -> None:
    results = read_results(write_run_dir(tmp_path / "run", two_model_lines()))
    comparison = paired_comparison(results, "model-a", "model-b")
    assert comparison.pairs == 5 and comparison.unfinished_pairs == 1
    assert comparison.score_a == 5 + 3 + 8 + 7 + 1
    assert comparison.score_b == 2 + 2 + 4 + 3 + 0
    assert comparison.questions == 3


def test_paired_comparison_rejects_unknown_or_same_model(reference_run: Path) -> None:
    results = read_results(reference_run)
    with pytest.raises(ValueError, match="not in results"):
        paired_comparison(results, "gpt-4-turbo", "nope")
    with pytest.raises(ValueError, match="different"):
        paired_comparison(results, "gpt-4-turbo", "gpt-4-turbo")


def test_no_warnings_for_one_consistent_run(tmp_path: Path) -> None:
    results = read_results(write_run_dir(tmp_path / "run", two_model_lines()))
    assert warnings(results) == []


def test_warns_about_mixed_embedding_models_and_thresholds(tmp_path: Path) -> None:
    lines = [
        question_line("m1", QUESTIONS[0], chain(3)),
        question_line("m2", QUESTIONS[0], chain(3), embedding_model="all-minilm-l6-v2"),
        question_line("m3", QUESTIONS[0], chain(3), thresholds={"novelty": 0.25}),
    ]
    found = warnings(read_results(write_run_dir(tmp_path / "run", lines)))
    assert len(found) == 2
    embedding, thresholds = found
    assert "different embedding models" in embedding and "not comparable" in embedding
    assert "all-minilm-l6-v2: m2 @ 0.7" in embedding
    assert "different thresholds" in thresholds and "novelty > 0.25: m3 @ 0.7" in thresholds


def test_warns_about_different_question_sets(reference_run: Path) -> None:
    found = warnings(read_results(reference_run))
    assert found == [
        "models answered different question sets, so totals are not directly comparable "
        "(gpt-4-turbo @ 0.7: 9 of 10); --compare A B gives a paired difference"
    ]


def test_render_summary_states_counting_convention(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    render_summary(
        summarise(read_results(write_run_dir(tmp_path / "r", two_model_lines()))), console
    )
    printed = console.export_text()
    text = " ".join(printed.split())
    assert COUNTING in text
    assert "Here coherence > 15, novelty > 0.15" in text
    row = re.search(r"model-a\s.*", printed)
    assert row is not None
    cells = [cell.strip() for cell in row.group(0).split("│")]
    assert cells[2:5] == ["15.0", "2", "16/14"], "the mean per repeat, then each repeat"
    low, high = summarise(read_results(write_run_dir(tmp_path / "r2", two_model_lines())))[
        0
    ].score_interval or (0, 0)
    assert cells[5] == f"[{low:.1f}, {high:.1f}]"
    assert "10,000 resamples" in text and "percentile bootstrap resampling questions" in text
