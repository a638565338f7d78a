"""Inputs for the HTML report's tests: the published run and a small run directory.

``PUBLISHED_RUN`` is the published 2024 run as the package bundles it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from aidanbench import reference
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.files import METADATA

from .builders import write_outputs

PUBLISHED_RUN = reference.published_run()
"""The published run (5 models, 49 question lines, 1,161 answers), original schema."""

THRESHOLDS = Thresholds(coherence=15.0, novelty=0.15, llm_novelty=0.15)
"""The small run's thresholds: LLM novelty on, so every criterion can end a chain."""

QUESTIONS = (
    "What could a city do with empty parking garages?",
    "How might a library <stay> relevant & useful?",
    "What is a good name for a lighthouse keeper's cat?",
)
"""Three questions; one has markup characters, which the page must show as text."""

PLANS: dict[str, list[tuple[int, str]]] = {
    "acme/alpha": [(6, "novelty"), (3, "coherence"), (4, "llm_novelty")],
    "acme/beta": [(2, "novelty"), (5, "error"), (1, "coherence")],
}
"""Per model, per question: valid answers before the chain ends, and how it ends."""


def _answer(index: int, text: str, c: float, n: float, llm: float, valid: bool) -> dict[str, Any]:
    raw = f"<answer>{text}</answer>" if index != 2 else f"Thinking first.\n<answer>{text}</answer>"
    return {
        "index": index,
        "answer": text,
        "coherence": c,
        "novelty": n,
        "llm_novelty": llm,
        "valid": valid,
        "elapsed_s": 0.5,
        "used_answer_tag": True,
        "raw_reply": raw,
        "calls": {"generate": {"input_tokens": 100, "output_tokens": 20, "calls": 1}},
    }


def chain(model: str, question: str, length: int, ending: str, repeat: int) -> dict[str, Any]:
    """One question line: ``length`` valid answers, then the ending (an error adds none).

    Scores come from a generator seeded by the line, so every build is the same. The
    failing answer sits at an exact distance from its threshold.
    """
    rng = random.Random(f"{model}|{question}|{repeat}")
    length += repeat - 1
    answers = [
        _answer(
            i,
            f"{model.split('/')[1]} idea {i} for {question[:20]} (repeat {repeat})",
            float(rng.randint(40, 95)),
            round(rng.uniform(0.2, 0.9), 3),
            round(rng.uniform(0.3, 0.9), 3),
            True,
        )
        for i in range(1, length + 1)
    ]
    last = length + 1
    fail = {
        "novelty": (70.0, 0.125, 0.5),
        "coherence": (10.0, 0.5, 0.5),
        "llm_novelty": (70.0, 0.5, 0.15),
    }
    error = None
    if ending == "error":
        error = {"kind": "error", "role": "model", "message": "model host answered HTTP 500"}
    else:
        c, n, llm = fail[ending]
        answers.append(_answer(last, f"failing answer {last} to {question[:20]}", c, n, llm, False))
    return {
        "model": model,
        "temperature": 0.7,
        "question": question,
        "repeat": repeat,
        "answers": answers,
        "stop_reason": ending,
        "error": error,
        "score": length,
    }


def make_run_dir(run_dir: Path, repeats: int = 2, model_cost_usd: float | None = None) -> Path:
    """A run directory of two models x three questions x ``repeats``, as ``run`` writes it.

    ``model_cost_usd``: each answer's generate call (its only call) records that cost.
    """
    lines = [
        chain(model, question, length, ending, repeat)
        for model, plan in PLANS.items()
        for repeat in range(1, repeats + 1)
        for question, (length, ending) in zip(QUESTIONS, plan, strict=True)
    ]
    if model_cost_usd is not None:
        for line in lines:
            for answer in line["answers"]:
                answer["calls"]["generate"]["cost_usd"] = model_cost_usd
    write_outputs(run_dir, lines)
    metadata = {
        "prompts_sha256": "ab" * 32,
        "settings": {
            "embedding_model": "text-embedding-3-large",
            "judge_model": "o1-mini",
            "thresholds": THRESHOLDS.record(),
        },
    }
    (run_dir / METADATA).write_text(json.dumps(metadata), "utf-8")
    return run_dir
