"""Synthetic results for analysis tests: question lines shaped like the graph's output,
run directories written with the package's own writer, and the reference run's scores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.record.files import METADATA
from aidanbench.record.lines import QuestionLine, write_lines

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


TOKENS_PER_ANSWER = 2 * 100 + 2 * 20
"""Tokens ``calls()`` records per answer, generation and judge (an embedding's tokens are
the run's, counted in the ledger: an embedding request serves many answers)."""


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
    write_outputs(path, lines)
    settings = {
        "embedding_model": embedding_model,
        "thresholds": {**BENCHMARK, **(thresholds or {})},
    }
    (path / METADATA).write_text(json.dumps({"settings": settings}), "utf-8")
    return path


def write_outputs(run_dir: Path, lines: Sequence[dict[str, Any]]) -> None:
    """The results files of question lines given as the JSON a run writes, through the
    package's own writer."""
    write_lines(run_dir, [QuestionLine.model_validate(line) for line in lines])


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
