"""What a planned run would cost, before any call: tokens and dollars as a range.

A question's cost follows from how many answers its chain reaches (n, the failing one
included) and how long answers are: answer k's prompt lists the k − 1 earlier answers,
so input tokens grow with n². The prompts are the benchmark's own, rendered here to
measure their fixed part and what each listed answer adds. Counts come from an earlier
run (by default the bundled published 2024 run, ``aidanbench.reference``): the chain
lengths of its (model, question) lines, and its mean answer length.

The range: ``low`` gives every question the 10th percentile chain, ``high`` the 90th,
and ``expected`` averages each question's cost over the whole distribution (so the long
chains' quadratic cost counts fully). Tokens are characters / 4, the usual rule of
thumb for English; judge replies count ``JUDGE_OUTPUT_TOKENS`` visible tokens, and the
hidden reasoning tokens of reasoning models are not known ahead, so for them the figures
are a floor.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aidanbench.nodes.prompts import render_coherence, render_generate, render_similarity
from aidanbench.services.pricing import PriceTable, add_dollars

CHARS_PER_TOKEN = 4
"""Characters per token assumed (no tokenizer is loaded)."""

JUDGE_OUTPUT_TOKENS = 10
"""Visible tokens of a judge's reply (``<coherence_score>80</coherence_score>``)."""


@dataclass(frozen=True)
class AnswerCounts:
    """The distribution a plan is priced with: chain lengths and answer length."""

    lengths: tuple[int, ...]
    """Answers per question line (the failing one included), one per line."""
    answer_chars: float
    """Mean characters of an answer."""
    source: str
    """Where they come from."""

    def quantile(self, q: float) -> int:
        """The chain length at quantile ``q`` (nearest rank)."""
        ordered = sorted(self.lengths)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def answer_counts(path: Path | None = None) -> AnswerCounts:
    """The distribution of a run directory or results file; the published run by default."""
    from aidanbench import reference
    from aidanbench.analysis.rundir import read_results

    source = path if path is not None else reference.published_run()
    results = read_results(Path(source))
    lengths = tuple(len(r.answers) for r in results if r.answers)
    texts = [a.answer for r in results for a in r.answers]
    if not lengths or not texts:
        raise ValueError(f"{source} has no answers to estimate from")
    name = "the published 2024 run" if path is None else str(path)
    return AnswerCounts(lengths, statistics.fmean(len(t) for t in texts), name)


def tokens(chars: float) -> float:
    """Tokens of ``chars`` characters."""
    return chars / CHARS_PER_TOKEN


@dataclass(frozen=True)
class Plan:
    """What is asked of every question line."""

    models: Sequence[str]
    questions: Sequence[str]
    judge_model: str
    embedding_model: str
    repeats: int = 1
    llm_novelty: bool = False
    pipeline: bool = True
    cot: bool = False
    judge_samples: int = 1
    """Coherence judgments per answer (``--judge-samples``)."""


@dataclass
class Usage:
    """Tokens of one role, as floats (an estimate)."""

    input: float = 0.0
    output: float = 0.0
    calls: float = 0.0

    def add(self, other: Usage, weight: float = 1.0) -> None:
        self.input += other.input * weight
        self.output += other.output * weight
        self.calls += other.calls * weight


def question_usage(question: str, n: int, answer_chars: float, plan: Plan) -> dict[str, Usage]:
    """Tokens per role of one question whose chain reaches ``n`` answers."""
    probe = "x" * max(1, round(answer_chars))
    first = len(render_generate(question, [], cot=plan.cot))
    one = len(render_generate(question, [probe], cot=plan.cot))
    each = len(render_generate(question, [probe, probe], cot=plan.cot)) - one
    generations = n + (1 if plan.pipeline else 0)  # the last look-ahead is discarded
    gen = Usage(calls=generations, output=generations * tokens(answer_chars))
    for k in range(generations):  # generation k + 1 lists k earlier answers
        gen.input += tokens(first if k == 0 else one + (k - 1) * each)
    coherence = len(render_coherence(question, probe))
    judged = n * plan.judge_samples
    judge = Usage(
        calls=judged, input=judged * tokens(coherence), output=judged * JUDGE_OUTPUT_TOKENS
    )
    roles = {"model": gen, "judge": judge}
    if plan.llm_novelty:
        pairs = n * (n - 1) / 2
        pair = len(render_similarity(question, probe, probe))
        roles["similarity"] = Usage(
            calls=pairs, input=pairs * tokens(pair), output=pairs * JUDGE_OUTPUT_TOKENS
        )
    roles["embeddings"] = Usage(calls=n, input=n * tokens(answer_chars))
    return roles


def _dollars(roles: dict[str, Usage], model: str, plan: Plan, prices: PriceTable) -> float | None:
    total: float | None = 0.0
    names = {"model": model, "judge": plan.judge_model, "similarity": plan.judge_model}
    names["embeddings"] = plan.embedding_model
    for role, usage in roles.items():
        price = prices.price(names[role])
        cost = None if price is None else price.dollars(int(usage.input), 0, int(usage.output))
        total = add_dollars(total, cost)
    return total


def estimate(plan: Plan, counts: AnswerCounts, prices: PriceTable) -> dict[str, Any]:
    """The plan's tokens and dollars per model: ``low``, ``expected`` and ``high``."""
    low, high = counts.quantile(0.1), counts.quantile(0.9)
    weights = {n: counts.lengths.count(n) / len(counts.lengths) for n in set(counts.lengths)}
    models = []
    for model in plan.models:
        row: dict[str, Any] = {"model": model}
        for name, spread in (("low", {low: 1.0}), ("expected", weights), ("high", {high: 1.0})):
            roles: dict[str, Usage] = {}
            dollars: float | None = 0.0
            for question in plan.questions:
                for n, weight in spread.items():
                    one = question_usage(question, n, counts.answer_chars, plan)
                    for role, usage in one.items():
                        roles.setdefault(role, Usage()).add(usage, weight * plan.repeats)
                    cost = _dollars(one, model, plan, prices)
                    dollars = add_dollars(
                        dollars, None if cost is None else cost * weight * plan.repeats
                    )
            row[name] = {
                "input_tokens": round(sum(u.input for u in roles.values())),
                "output_tokens": round(sum(u.output for u in roles.values())),
                "calls": round(sum(u.calls for u in roles.values())),
                "dollars": dollars,
            }
        models.append(row)
    unpriced = sorted(
        {
            m
            for m in [*plan.models, plan.judge_model, plan.embedding_model]
            if prices.price(m) is None
        }
    )
    total = {
        name: _sum_dollars([row[name]["dollars"] for row in models])
        for name in ("low", "expected", "high")
    }
    return {
        "questions": len(plan.questions) * plan.repeats,
        "answers_per_question": {
            "low": low,
            "mean": statistics.fmean(counts.lengths),
            "high": high,
        },
        "answer_tokens": tokens(counts.answer_chars),
        "distribution": counts.source,
        "prices": prices.describe(),
        "models": models,
        "dollars": total,
        "unpriced_models": unpriced,
        "assumptions": (
            f"{CHARS_PER_TOKEN} characters per token; judge replies {JUDGE_OUTPUT_TOKENS} "
            "tokens; hidden reasoning tokens not included (a floor for reasoning models); "
            "no prompt-cache discount"
        ),
    }


def _sum_dollars(values: Sequence[float | None]) -> float | None:
    total: float | None = 0.0
    for value in values:
        total = add_dollars(total, value)
    return total
