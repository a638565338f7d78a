"""Summaries, the bootstrap scheme, paired comparisons and comparability warnings.

Also home of the synthetic run-directory builders the report, rescore and plot tests use:
question lines shaped like the graph's output (``QuestionOutput`` with ``AnswerRecord``s),
written with ``rundir.write_outputs`` next to a ``metadata.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from aidanbench.analysis.rundir import METADATA, read_results, write_outputs
from aidanbench.analysis.summary import (
    COUNTING,
    bootstrap_sum,
    paired_comparison,
    render_summary,
    summarise,
    warnings,
)

EMBEDDING = "text-embedding-3-large"
BENCHMARK = {"coherence": 15.0, "novelty": 0.15, "llm_novelty": None}

# Published per-question scores of the reference run, in file order (reference README).
REFERENCE_SCORES = {
    "anthropic/claude-3.5-sonnet": [52, 43, 28, 46, 63, 47, 26, 65, 50, 1],
    "google/gemini-flash-1.5-8b": [6, 4, 13, 1, 6, 1, 5, 7, 1, 1],
    "gpt-4-turbo": [4, 7, 1, 35, 29, 51, 60, 36, 1],
    "meta-llama/llama-3.1-70b-instruct": [3, 15, 17, 19, 9, 4, 15, 43, 21, 1],
    "openai/gpt-4o-mini-2024-07-18": [24, 13, 21, 2, 23, 58, 53, 22, 31, 28],
}
REFERENCE_TOTALS = {model: sum(scores) for model, scores in REFERENCE_SCORES.items()}


def calls(input_tokens: int = 100, output_tokens: int = 20) -> dict[str, Any]:
    """Per-role call statistics of one answer (generate, judge, embed)."""
    stats = {
        "served_model": "stub",
        "latency_s": 0.5,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "calls": 1,
    }
    return {"generate": dict(stats), "judge": dict(stats), "embed": {**stats, "output_tokens": 0}}


TOKENS_PER_ANSWER = 3 * 100 + 2 * 20
"""Tokens ``calls()`` records per answer."""


def question_line(
    model: str,
    question: str,
    scores: Sequence[tuple[float, float]],
    *,
    temperature: float = 0.7,
    repeat: int = 1,
    thresholds: dict[str, Any] | None = None,
    error: str | None = None,
    tags: Sequence[bool] | None = None,
    llm: Sequence[float] | None = None,
    embedding_model: str = EMBEDDING,
) -> dict[str, Any]:
    """A ``questions.jsonl`` line as the driver writes it, with its answer records.

    Validity follows the strict rule with the given thresholds: answers pass while
    coherence > T_c and novelty > T_n (and llm > T_llm); the first failing answer is
    recorded last and names the stop reason. Without a failure the line ends with
    ``error`` when given, else at the answer cap.
    """
    rule = {**BENCHMARK, **(thresholds or {})}
    answers = []
    stop: str | None = None
    for i, (coherence, novelty) in enumerate(scores, 1):
        llm_value = llm[i - 1] if llm is not None else None
        failed = None
        if not coherence > rule["coherence"]:
            failed = "coherence"
        elif not novelty > rule["novelty"]:
            failed = "novelty"
        elif rule["llm_novelty"] is not None and not (llm_value or 0.0) > rule["llm_novelty"]:
            failed = "llm_novelty"
        answers.append(
            {
                "index": i,
                "answer": f"{model} answer {i} to {question}",
                "raw_reply": f"<answer>{model} answer {i}</answer>",
                "used_answer_tag": tags[i - 1] if tags is not None else True,
                "coherence": coherence,
                "novelty": novelty,
                "llm_novelty": llm_value,
                "valid": failed is None,
                "stop_reason": failed,
                "elapsed_s": 5.0 * i,
                "calls": calls(),
                "flags": [],
            }
        )
        if failed:
            assert i == len(scores), "a chain ends at its first failing answer"
            stop = failed
    if stop is None:
        stop = "error" if error else "max_answers"
    valid = [a for a in answers if a["valid"]]
    return {
        "model": model,
        "temperature": temperature,
        "question": question,
        "repeat": repeat,
        "thread_id": f"{model}|{temperature}|{repeat}|{question}",
        "embedding_model": embedding_model,
        "thresholds": rule,
        "stop_reason": stop,
        "error": (
            {
                "kind": "error",
                "role": "model",
                "message": error,
                "status": 503,
                "retryable": True,
            }
            if error
            else None
        ),
        "score": len(valid),
        "novelty_sum": sum(a["novelty"] for a in valid),
        "mean_coherence": None,
        "mean_novelty": None,
        "mean_llm_novelty": None,
        "format_adherence": None,
        "speculative": None,
        "answers": answers,
    }


def chain(
    valid: int, fail: str | None = "novelty", coherence: float = 80.0
) -> list[tuple[float, float]]:
    """``valid`` passing (coherence, novelty) pairs, then one failing on ``fail``."""
    scores = [(coherence, round(0.2 + 0.3 / (1 + i), 4)) for i in range(valid)]
    if fail == "novelty":
        scores.append((coherence, 0.1))
    elif fail == "coherence":
        scores.append((10.0, 0.5))
    return scores


def write_run_dir(
    path: Path,
    lines: Sequence[dict[str, Any]],
    *,
    embedding_model: str = EMBEDDING,
    thresholds: dict[str, Any] | None = None,
) -> Path:
    """A run directory holding ``lines`` and a metadata.json with the run's settings."""
    path.mkdir(parents=True, exist_ok=True)
    write_outputs(path, list(lines))
    settings = {
        "embedding_model": embedding_model,
        "thresholds": {**BENCHMARK, **(thresholds or {})},
    }
    (path / METADATA).write_text(json.dumps({"settings": settings}), "utf-8")
    return path


QUESTIONS = ["Why is the sky blue?", "How might you use a brick?", "What is a cause of rain?"]


def two_model_lines() -> list[dict[str, Any]]:
    """Two models, three questions, two repeats; model B errors on Q3 in repeat 2."""
    lines = []
    for repeat, a_scores, b_scores in ((1, (5, 3, 8), (2, 2, 4)), (2, (7, 1, 6), (3, 0, 1))):
        for question, a, b in zip(QUESTIONS, a_scores, b_scores, strict=True):
            lines.append(question_line("model-a", question, chain(a), repeat=repeat))
            if repeat == 2 and question == QUESTIONS[2]:
                lines.append(
                    question_line(
                        "model-b",
                        question,
                        chain(b, fail=None),
                        repeat=repeat,
                        error="model: api.example.com returned 503",
                    )
                )
            else:
                lines.append(
                    question_line(
                        "model-b",
                        question,
                        chain(b, fail="coherence"),
                        repeat=repeat,
                        tags=[i % 2 == 0 for i in range(b + 1)],
                    )
                )
    return lines


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
    assert turbo.tokens == 0 and turbo.repeats == 1
    assert turbo.mean_repeat_score is None and turbo.score_interval is None


def test_reference_means_match_raw_file(reference_run: Path) -> None:
    data = json.loads(reference_run.read_text("utf-8"))
    rows = {row.model: row for row in summarise(read_results(reference_run))}
    for model, temps in data["models"].items():
        valid = [a for records in temps["0.7"].values() for a in records[:-1]]
        row = rows[model]
        assert row.mean_coherence == pytest.approx(np.mean([a["coherence_score"] for a in valid]))
        novelty = [a["embedding_dissimilarity_score"] for a in valid]
        assert row.mean_novelty == pytest.approx(np.mean(novelty))
        assert row.novelty_sum == pytest.approx(sum(novelty))
        assert row.mean_llm_novelty is None


def test_synthetic_run_dir_summary(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    rows = {row.model: row for row in summarise(read_results(run_dir))}
    a, b = rows["model-a"], rows["model-b"]
    assert (a.score, b.score) == (5 + 3 + 8 + 7 + 1 + 6, 2 + 2 + 4 + 3 + 0 + 1)
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
    assert a.tokens == TOKENS_PER_ANSWER * (a.score + 6)
    assert a.mean_coherence == 80.0
    assert a.mean_repeat_score == pytest.approx(a.score / 2)
    assert a.thresholds is not None and a.thresholds.novelty == 0.15
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
    assert "T_c = 15, T_n = 0.15" in text
    row = re.search(r"model-a\s.*", printed)
    assert row is not None
    assert row.group(0).split("│")[2].strip() == "30"
    assert "15.0 [" in row.group(0), "mean per repeat with its interval"
