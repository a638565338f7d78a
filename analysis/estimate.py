"""What a planned run would cost, before any call: tokens and dollars as a range.

A question's cost follows from how many answers its chain reaches (n, the failing one
included) and how long answers are: answer k's prompt lists the k − 1 earlier answers, so
input tokens grow with n². The benchmark's own prompts are rendered to measure their fixed part
and what each listed answer adds. Chain lengths and the mean answer length come from an earlier
run (by default the bundled published one). ``low`` gives every question the 10th percentile
chain, ``high`` the 90th, and ``expected`` averages over the whole distribution (so the long
chains' quadratic cost counts fully).

Hidden reasoning tokens (billed as output) per request of each role are measured when that
run recorded them, else given (``--reasoning-tokens``), else assumed from the request: up to its
own budget, or its effort's band (``EFFORT_BANDS``); none for a model not known to reason.
Every figure says which of these it is.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from aidanbench.core.calls import add_dollars
from aidanbench.core.settings import (
    OPENAI_REASONING_PREFIXES,
    TOKEN_LIMIT_FIELDS,
    Settings,
    token_limit_field,
)
from aidanbench.nodes.prompts import render_coherence, render_generate, render_similarity
from aidanbench.services.pricing import PriceTable

CHARS_PER_TOKEN = 4
"""Characters per token assumed, the usual rule of thumb for English (no tokenizer is loaded)."""

JUDGE_OUTPUT_TOKENS = 10
"""Visible tokens of a judge's reply (``<coherence_score>80</coherence_score>``)."""


EFFORT_BANDS: dict[str, tuple[int, int]] = {
    "none": (0, 0),
    "minimal": (0, 1_024),
    "low": (0, 1_024),
    "medium": (1_024, 8_192),
    "high": (8_192, 32_768),
    "xhigh": (16_384, 65_536),
}
"""Hidden reasoning tokens per request assumed at each effort when nothing better is known:
the bands gateways publish, not measurements (Requesty: up to 1,024 low, up to 8,192 medium;
OpenGateway: high about 16-32k, its top tier 32-64k). ``low``, ``expected`` and ``high`` take
each band's bottom, middle and top."""

DEFAULT_EFFORT = "medium"
"""The effort of an OpenAI reasoning model whose request names none (OpenAI's, before gpt-5.1)."""

NO_DEFAULT_REASONING = ("gpt-5.",)
"""Names whose default effort is ``none``: gpt-5.1 and later reason only when asked (OpenAI)."""


def default_effort(model: str) -> str | None:
    """The effort ``model`` reasons at when its request names none; None: not known to reason."""
    bare = model.rsplit("/", 1)[-1].lower()
    if bare.startswith(NO_DEFAULT_REASONING):
        return "none"
    return DEFAULT_EFFORT if bare.startswith(OPENAI_REASONING_PREFIXES) else None


REASONING_SOURCE = (
    "reasoning tokens per request: measured from --answers-from where it recorded them "
    "for the model (or judge), else --reasoning-tokens (--judge-reasoning-tokens), else "
    "assumed from the request: up to its reasoning budget, else its effort's band (low "
    "0-1,024, medium 1,024-8,192, high 8,192-32,768 tokens; an OpenAI reasoning model "
    "whose request names none at its default, medium (none from gpt-5.1); published "
    "gateway budget bands, not measurements; the low, "
    "expected and high columns take the band's bottom, middle and top), none for models "
    "not known to reason"
)
"""How the estimate counts reasoning tokens, printed with it."""


@dataclass(frozen=True)
class AnswerCounts:
    """The distribution a plan is priced with: chain lengths and answer length."""

    lengths: tuple[int, ...]
    """Answers per question line (the failing one included), one per line."""
    answer_chars: float
    """Mean characters of an answer."""
    source: str
    """Where they come from."""
    reasoning: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    """Per model under test: mean reasoning tokens per generation, and answers measured."""
    judge_reasoning: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    """Per judge model: mean reasoning tokens per judge call, over how many calls."""

    def quantile(self, q: float) -> int:
        """The chain length at quantile ``q`` (nearest rank)."""
        ordered = sorted(self.lengths)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def answer_counts(path: Path | None = None) -> AnswerCounts:
    """The distribution of a run directory or results file; the published run by default."""
    from aidanbench import reference
    from aidanbench.record.results import read_results

    source = path if path is not None else reference.published_run()
    results = read_results(Path(source))
    lengths = tuple(len(r.answers) for r in results if r.answers)
    texts = [a.answer for r in results for a in r.answers]
    if not lengths or not texts:
        raise ValueError(f"{source} has no answers to estimate from")
    name = "the published 2024 run" if path is None else str(path)
    model: dict[str, list[float]] = {}
    judge: dict[str, list[float]] = {}
    for result in results:
        for answer in result.answers:
            spent = answer.reasoning_tokens
            if isinstance(spent, int):
                model.setdefault(result.model, []).append(spent)
            stats: Mapping[str, Any] = (answer.calls or {}).get("judge") or {}
            calls = stats.get("calls")
            if result.judge_model and isinstance(stats.get("reasoning_tokens"), int) and calls:
                judge.setdefault(result.judge_model, []).extend(
                    [stats["reasoning_tokens"] / calls] * calls
                )
    return AnswerCounts(
        lengths,
        statistics.fmean(len(t) for t in texts),
        name,
        {m: (statistics.fmean(v), len(v)) for m, v in model.items()},
        # a judge's usage records 0 where the provider reported no reasoning: only a
        # judge that reported some was measured
        {m: (statistics.fmean(v), len(v)) for m, v in judge.items() if any(v)},
    )


def tokens(chars: float) -> float:
    """Tokens of ``chars`` characters."""
    return chars / CHARS_PER_TOKEN


@dataclass(frozen=True)
class PlannedRun:
    """What is asked of every question line."""

    models: Sequence[str]
    questions: Sequence[str]
    settings: Settings
    """The settings shared by every model: judge, embedding model, judgments, prompt, pipeline."""
    repeats: int = 1
    model_settings: Mapping[str, Settings] = field(default_factory=dict)
    """Each model's settings where it has more than a name (a variant's NAME, its fields)."""
    reasoning_tokens: float | None = None
    """Reasoning tokens per request of the models under test (``--reasoning-tokens``)."""
    judge_reasoning_tokens: float | None = None
    """The same per judge call (``--judge-reasoning-tokens``)."""

    def settings_of(self, model: str) -> Settings:
        """``model``'s settings (its name alone when the plan gives none)."""
        return self.model_settings.get(model) or Settings(model=model)


@dataclass(frozen=True)
class Reasoning:
    """Hidden reasoning tokens per request of one role per column, and what they rest on."""

    low: float
    expected: float
    high: float
    basis: str

    @classmethod
    def one(cls, tokens: float, basis: str) -> Reasoning:
        """The same figure in every column."""
        return cls(tokens, tokens, tokens, basis)

    def at(self, column: str) -> float:
        """The figure of the ``low``, ``expected`` or ``high`` column."""
        value: float = getattr(self, column)
        return value

    def as_dict(self) -> dict[str, Any]:
        """The figures and their basis, for JSON."""
        return {"low": self.low, "expected": self.expected, "high": self.high, "basis": self.basis}


def requested_budget(fields: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The reasoning budget and effort a request states, each None when it states none."""
    found = fields.get("reasoning"), fields.get("thinking")
    reasoning: Mapping[str, Any] = found[0] if isinstance(found[0], dict) else {}
    thinking: Mapping[str, Any] = found[1] if isinstance(found[1], dict) else {}
    budget = reasoning.get("max_tokens", thinking.get("budget_tokens"))
    effort = fields.get("reasoning_effort", reasoning.get("effort"))
    return (
        budget if isinstance(budget, int) and not isinstance(budget, bool) else None,
        effort if isinstance(effort, str) else None,
    )


def assumed_reasoning(model: str, fields: Mapping[str, Any], answer_tokens: float) -> Reasoning:
    """Reasoning tokens assumed from a request (module docstring), never above its token limit."""
    budget, effort = requested_budget(fields)
    if budget is not None:
        band, basis = (0, budget), "assumed: up to the request's reasoning budget"
    else:
        effort = effort or default_effort(model)
        if effort is None:
            return Reasoning.one(0.0, "none: not known to reason")
        band = EFFORT_BANDS.get(effort, EFFORT_BANDS[DEFAULT_EFFORT])
        basis = f"assumed: effort {effort}'s published budget band"
    figures = [float(band[0]), (band[0] + band[1]) / 2, float(band[1])]
    limit = next((fields[f] for f in TOKEN_LIMIT_FIELDS if isinstance(fields.get(f), int)), None)
    if limit is not None and figures[2] > limit - answer_tokens:
        figures = [min(f, max(0.0, limit - answer_tokens)) for f in figures]
        basis += f", capped by {token_limit_field(model, fields)} {limit:,}"
    return Reasoning(figures[0], figures[1], figures[2], basis)


def reasoning(model: str, plan: PlannedRun, counts: AnswerCounts, judge: bool = False) -> Reasoning:
    """Reasoning tokens per generation of ``model``, or per call of the judge ``model``
    (module docstring)."""
    measured = (counts.judge_reasoning if judge else counts.reasoning).get(model)
    if measured is not None:
        mean, n = measured
        calls = "judge calls" if judge else "answers"
        return Reasoning.one(mean, f"measured: mean of {n:,} {calls} in {counts.source}")
    given = plan.judge_reasoning_tokens if judge else plan.reasoning_tokens
    flag = "--judge-reasoning-tokens" if judge else "--reasoning-tokens"
    if given is not None:
        return Reasoning.one(given, f"given ({flag})")
    if judge:
        return assumed_reasoning(model, {}, JUDGE_OUTPUT_TOKENS)
    settings = plan.settings_of(model)
    return assumed_reasoning(
        settings.provider_model, settings.request_fields, tokens(counts.answer_chars)
    )


@dataclass
class RoleTokens:
    """Tokens of one role, as floats (an estimate)."""

    input: float = 0.0
    output: float = 0.0
    calls: float = 0.0
    reasoning: float = 0.0
    """Of ``output``, hidden reasoning tokens."""

    def add(self, other: RoleTokens, weight: float = 1.0) -> None:
        self.input += other.input * weight
        self.output += other.output * weight
        self.calls += other.calls * weight
        self.reasoning += other.reasoning * weight


def question_usage(
    question: str,
    n: int,
    answer_chars: float,
    plan: PlannedRun,
    reasoning: Mapping[str, float] | None = None,
) -> dict[str, RoleTokens]:
    """Tokens per role of one question whose chain reaches ``n`` answers; ``reasoning`` (per
    request of ``model`` and ``judge``) counts in ``output`` and apart in ``reasoning``."""
    hidden = reasoning or {}
    probe = "x" * max(1, round(answer_chars))
    first = len(render_generate(question, [], cot=plan.settings.cot))
    one = len(render_generate(question, [probe], cot=plan.settings.cot))
    each = len(render_generate(question, [probe, probe], cot=plan.settings.cot)) - one
    generations = n + (1 if plan.settings.pipeline else 0)  # the last look-ahead is discarded
    thought = hidden.get("model", 0.0)
    gen = RoleTokens(
        calls=generations,
        output=generations * (tokens(answer_chars) + thought),
        reasoning=generations * thought,
    )
    for k in range(generations):  # generation k + 1 lists k earlier answers
        gen.input += tokens(first if k == 0 else one + (k - 1) * each)
    judged = hidden.get("judge", 0.0)
    coherence = len(render_coherence(question, probe))
    asked = n * plan.settings.judge_samples
    judge = RoleTokens(
        calls=asked,
        input=asked * tokens(coherence),
        output=asked * (JUDGE_OUTPUT_TOKENS + judged),
        reasoning=asked * judged,
    )
    roles = {"model": gen, "judge": judge}
    if plan.settings.llm_novelty:
        pairs = n * (n - 1) / 2
        pair = len(render_similarity(question, probe, probe))
        roles["similarity"] = RoleTokens(
            calls=pairs,
            input=pairs * tokens(pair),
            output=pairs * (JUDGE_OUTPUT_TOKENS + judged),
            reasoning=pairs * judged,
        )
    roles["embeddings"] = RoleTokens(calls=n, input=n * tokens(answer_chars))
    return roles


def _dollars(
    roles: dict[str, RoleTokens], model: str, plan: PlannedRun, prices: PriceTable
) -> float | None:
    names = {"model": plan.settings_of(model).provider_model}
    names |= {"judge": plan.settings.judge_model, "similarity": plan.settings.judge_model}
    names["embeddings"] = plan.settings.embedding_model
    costs = []
    for role, usage in roles.items():
        price = prices.price(names[role])
        costs.append(
            None if price is None else price.dollars(int(usage.input), 0, int(usage.output))
        )
    return _sum_dollars(costs)


def estimate(plan: PlannedRun, counts: AnswerCounts, prices: PriceTable) -> dict[str, Any]:
    """The plan's tokens and dollars per model: ``low``, ``expected`` and ``high``."""
    low, high = counts.quantile(0.1), counts.quantile(0.9)
    weights = {n: counts.lengths.count(n) / len(counts.lengths) for n in set(counts.lengths)}
    models = []
    judged = reasoning(plan.settings.judge_model, plan, counts, judge=True)
    for model in plan.models:
        thought = reasoning(model, plan, counts)
        row: dict[str, Any] = {
            "model": model,
            "sent_as": plan.settings_of(model).provider_model,
            "reasoning_per_request": {"model": thought.as_dict(), "judge": judged.as_dict()},
        }
        for name, spread in (("low", {low: 1.0}), ("expected", weights), ("high", {high: 1.0})):
            hidden = {"model": thought.at(name), "judge": judged.at(name)}
            roles: dict[str, RoleTokens] = {}
            dollars: float | None = 0.0
            for question in plan.questions:
                for n, weight in spread.items():
                    one = question_usage(question, n, counts.answer_chars, plan, hidden)
                    for role, usage in one.items():
                        roles.setdefault(role, RoleTokens()).add(usage, weight * plan.repeats)
                    cost = _dollars(one, model, plan, prices)
                    dollars = add_dollars(
                        dollars, None if cost is None else cost * weight * plan.repeats
                    )
            row[name] = {
                "input_tokens": round(sum(u.input for u in roles.values())),
                "output_tokens": round(sum(u.output for u in roles.values())),
                "reasoning_tokens": round(sum(u.reasoning for u in roles.values())),
                "calls": round(sum(u.calls for u in roles.values())),
                "dollars": dollars,
            }
        models.append(row)
    priced = [plan.settings_of(m).provider_model for m in plan.models]
    priced += [plan.settings.judge_model, plan.settings.embedding_model]
    unpriced = sorted({m for m in priced if prices.price(m) is None})
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
            f"visible tokens; {REASONING_SOURCE}; no prompt-cache discount"
        ),
    }


def _sum_dollars(values: Sequence[float | None]) -> float | None:
    start: float | None = 0.0
    return reduce(add_dollars, values, start)
