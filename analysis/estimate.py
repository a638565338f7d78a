"""What a planned run would cost, before any call: tokens and dollars as a range.

A question's cost follows from how many answers its chain reaches (n, the failing one
included) and how long answers are: answer k's prompt lists the k − 1 earlier answers, so
input tokens grow with n². The benchmark's own prompts are rendered to measure their fixed part
and what each listed answer adds. Chain lengths and the mean answer length come from an earlier
run (by default the bundled published one): each model's own question lines where that run has
some, else all of its lines. ``low`` gives every question the 10th percentile chain, ``high`` the
90th, and ``expected`` averages over the whole distribution (so the long chains' quadratic cost
counts fully).

A figure per request is the earlier run's wherever it recorded one (``Recorded``): the output
tokens of each role's replies from each model, hidden reasoning included whether or not the
provider reported it apart (a reasoning count it did not report stays unknown), and the input
tokens each model's provider counted per byte of prompt (the usage ledger). What it did not
record is assumed, and every row says which: 4 bytes per token; a reply's visible tokens (the
answers' length, a judge's ``JUDGE_OUTPUT_TOKENS``) plus hidden reasoning given
(``--reasoning-tokens``) or assumed from the request: up to its own budget, or its effort's band
(``EFFORT_BANDS``); none for a model not known to reason.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
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
from aidanbench.record import files
from aidanbench.record.results import QuestionResult
from aidanbench.record.usage import read_ledger
from aidanbench.services.pricing import PriceTable
from aidanbench.services.usage import prompt_tokens, text_tokens

BYTES_PER_TOKEN = 4
"""Bytes of prompt or reply per token assumed where the earlier run measured none (no tokenizer
is loaded; English text runs about 4 characters a token in OpenAI's and Llama's)."""

JUDGE_OUTPUT_TOKENS = 10
"""Visible tokens of a judge's reply (``<coherence_score>80</coherence_score>``)."""

COLUMNS = ("low", "expected", "high")

ROLES = ("model", "judge", "similarity", "embeddings")
"""The estimate's roles: generations, coherence judgments, LLM-novelty pairs, embeddings."""

LEDGER_ROLE = {
    "model": "model",
    "judge": "judge",
    "similarity": "judge",
    "embeddings": "embeddings",
}
"""The ledger's role of each (the similarity judge's requests are the judge's)."""

CALLS_ROLE = {
    "generate": "model",
    "speculative": "model",
    "judge": "judge",
    "similarity": "similarity",
}
"""The estimate's role of each role of an answer's ``calls`` (and a line's look-aheads)."""


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


ASSUMPTIONS = (
    "each question's chain as long as its model's chains in the earlier run (all of that "
    "run's chains for a model it did not run), the answers as long as that model's; "
    "one discarded look-ahead generation per question with the pipeline; --judge-samples "
    "judge calls per answer, none asked again; one embedding request per answer (batching "
    "sends fewer, with the same tokens); no request retried or failed; no prompt-cache "
    f"discount. Where the earlier run recorded no tokens: {BYTES_PER_TOKEN} bytes per token, "
    "and reasoning tokens per request given (--reasoning-tokens, --judge-reasoning-tokens), "
    "else assumed from the request: up to its reasoning budget, else its effort's band (low "
    "0-1,024, medium 1,024-8,192, high 8,192-32,768 tokens; an OpenAI reasoning model whose "
    "request names none at its default, medium (none from gpt-5.1); published gateway "
    "budget bands, not measurements; the low, expected and high columns take the band's "
    "bottom, middle and top), none for models not known to reason"
)
"""What the estimate assumes besides each row's stated figures, printed with it."""


@dataclass(frozen=True)
class Chains:
    """Chain lengths and answer length of some question lines."""

    lengths: tuple[int, ...]
    """Answers per question line (the failing one included), one per line."""
    answer_bytes: float
    """Mean UTF-8 bytes of an answer."""
    source: str
    """Which lines of the earlier run."""

    @classmethod
    def of(cls, results: Sequence[QuestionResult], whose: str) -> Chains | None:
        """The chains of ``results`` that have answers (None: none has)."""
        lines = [r for r in results if r.answers]
        if not lines:
            return None
        return cls(
            tuple(len(r.answers) for r in lines),
            statistics.fmean(text_tokens(a.answer) for r in lines for a in r.answers),
            f"{len(lines):,} question lines of {whose}",
        )

    def quantile(self, q: float) -> int:
        """The chain length at quantile ``q`` (nearest rank)."""
        ordered = sorted(self.lengths)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    def spread(self, column: str) -> dict[int, float]:
        """Chain lengths and their weights in ``column``: one percentile, or every length."""
        if column == "low":
            return {self.quantile(0.1): 1.0}
        if column == "high":
            return {self.quantile(0.9): 1.0}
        return {n: self.lengths.count(n) / len(self.lengths) for n in set(self.lengths)}

    def as_dict(self) -> dict[str, Any]:
        """The lengths a row is priced with, for JSON."""
        return {
            "low": self.quantile(0.1),
            "mean": statistics.fmean(self.lengths),
            "high": self.quantile(0.9),
            "answer_bytes": self.answer_bytes,
            "source": self.source,
        }


@dataclass
class Tally:
    """Requests of one role to one model, and the tokens their replies reported: output
    tokens (``Recorded.replies``), or input tokens and their prompts' bytes
    (``Recorded.prompts``)."""

    requests: int = 0
    tokens: int = 0
    reasoning: int | None = 0
    """Of output ``tokens``, hidden reasoning; None once a reply did not report it."""
    prompt_bytes: int = 0
    """Of input ``tokens``, their prompts' bytes as the ledger bounds them."""

    def add(
        self, requests: int, tokens: int, *, reasoning: int | None = 0, prompt_bytes: int = 0
    ) -> None:
        self.requests += requests
        self.tokens += tokens
        self.prompt_bytes += prompt_bytes
        self.reasoning = (
            None if reasoning is None or self.reasoning is None else self.reasoning + reasoning
        )


@dataclass(frozen=True)
class Recorded:
    """What an earlier run recorded that an estimate uses (module docstring)."""

    name: str
    """The run, as the estimate names it."""
    everyone: Chains
    """All its question lines with answers."""
    chains_of: Mapping[str, Chains] = field(default_factory=dict)
    """Each model's own question lines."""
    replies: Mapping[tuple[str, str], Tally] = field(default_factory=dict)
    """Per (role, model), ``ROLES`` but embeddings: the requests whose replies reported their
    output tokens (the answers' ``calls`` and the lines' look-aheads)."""
    prompts: Mapping[tuple[str, str], Tally] = field(default_factory=dict)
    """Per (ledger role, model): the input tokens replies reported and their prompts' bytes
    (the usage ledger), the preflight's checks left out."""

    def chains(self, model: str) -> Chains:
        """``model``'s own chains, or every model's when the run has none of it."""
        return self.chains_of.get(model) or self.everyone


def recorded(path: Path | None = None) -> Recorded:
    """What a run directory or results file recorded; the published run by default."""
    from aidanbench import reference
    from aidanbench.record.results import read_results

    source = Path(path) if path is not None else reference.published_run()
    results = read_results(source)
    name = "the published 2024 run" if path is None else str(path)
    everyone = Chains.of(results, "every model")
    if everyone is None:
        raise ValueError(f"{source} has no answers to estimate from")
    chains_of: dict[str, Chains] = {}
    for model in dict.fromkeys(r.model for r in results):
        found = Chains.of([r for r in results if r.model == model], model)
        if found is not None:
            chains_of[model] = found
    ledger = source / files.LEDGER
    return Recorded(
        name,
        everyone,
        chains_of,
        reply_tallies(results),
        prompt_tallies(ledger) if source.is_dir() else {},
    )


def reply_tallies(results: Iterable[QuestionResult]) -> dict[tuple[str, str], Tally]:
    """Per (role, model): the requests whose replies reported their output tokens."""
    tallies: dict[tuple[str, str], Tally] = {}
    for result in results:
        stats: list[tuple[str, Mapping[str, Any]]] = [*result.look_aheads.items()]
        stats += [(role, s) for a in result.answers for role, s in (a.calls or {}).items()]
        for role, figures in stats:
            kind = CALLS_ROLE.get(role)
            model = result.model if kind == "model" else result.judge_model
            made, output = figures.get("calls"), figures.get("output_tokens")
            if kind is None or model is None or not made or output is None:
                continue
            reasoning = figures.get("reasoning_tokens")
            tallies.setdefault((kind, model), Tally()).add(made, output, reasoning=reasoning)
    return tallies


def prompt_tallies(ledger: Path) -> dict[tuple[str, str], Tally]:
    """Per (role, model) of the ledger: the input tokens replies reported, against their
    prompts' bytes as the ``sent`` line bounded them (``services.usage.prompt_tokens``)."""
    bounds: dict[str, int] = {}
    tallies: dict[tuple[str, str], Tally] = {}
    for line in read_ledger(ledger):
        if line.node == "preflight" or line.id is None:
            continue
        if line.event == "sent" and line.bound_input_tokens:
            bounds[line.id] = line.bound_input_tokens
        elif line.event == "usage" and line.input_tokens is not None and line.id in bounds:
            key = (str(line.role), str(line.model))
            tallies.setdefault(key, Tally()).add(1, line.input_tokens, prompt_bytes=bounds[line.id])
    return tallies


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

    def asked(self, model: str, role: str) -> str:
        """The model ``role`` asks in ``model``'s row, as the price table names it."""
        if role == "model":
            return self.settings_of(model).provider_model
        return self.settings.embedding_model if role == "embeddings" else self.settings.judge_model


@dataclass(frozen=True)
class Figures:
    """One figure per column (``low``, ``expected``, ``high``)."""

    low: float
    expected: float
    high: float

    @classmethod
    def one(cls, value: float) -> Figures:
        """The same figure in every column."""
        return cls(value, value, value)

    def at(self, column: str) -> float:
        """The figure of ``column``."""
        value: float = getattr(self, column)
        return value

    def plus(self, value: float) -> Figures:
        return Figures(self.low + value, self.expected + value, self.high + value)

    def as_dict(self) -> dict[str, float]:
        return {"low": self.low, "expected": self.expected, "high": self.high}


@dataclass(frozen=True)
class Reasoning:
    """Hidden reasoning tokens per request of one role, and what they rest on."""

    figures: Figures
    basis: str


@dataclass(frozen=True)
class PerRequest:
    """One role's tokens per request in one row, and what each rests on."""

    output: Figures
    """Output tokens, hidden reasoning included."""
    reasoning: Figures | None
    """Of ``output``, hidden reasoning; None: unknown (a measured output the provider did not
    split)."""
    output_basis: str
    input_per_byte: float
    """Input tokens per byte of prompt (``services.usage.prompt_tokens``)."""
    input_basis: str

    def as_dict(self) -> dict[str, Any]:
        """The figures and their bases, for JSON."""
        return {
            "output_tokens": self.output.as_dict(),
            "reasoning_tokens": None if self.reasoning is None else self.reasoning.as_dict(),
            "output_basis": self.output_basis,
            "input_tokens_per_byte": self.input_per_byte,
            "input_basis": self.input_basis,
        }


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
            return Reasoning(Figures.one(0.0), "none: not known to reason")
        band = EFFORT_BANDS.get(effort, EFFORT_BANDS[DEFAULT_EFFORT])
        basis = f"assumed: effort {effort}'s published budget band"
    figures = [float(band[0]), (band[0] + band[1]) / 2, float(band[1])]
    limit = next((fields[f] for f in TOKEN_LIMIT_FIELDS if isinstance(fields.get(f), int)), None)
    if limit is not None and figures[2] > limit - answer_tokens:
        figures = [min(f, max(0.0, limit - answer_tokens)) for f in figures]
        basis += f", capped by {token_limit_field(model, fields)} {limit:,}"
    return Reasoning(Figures(*figures), basis)


def unrecorded_reasoning(model: str, role: str, plan: PlannedRun, visible: float) -> Reasoning:
    """Reasoning tokens per request of ``role`` where the earlier run recorded no output:
    given, else assumed (module docstring)."""
    judging = role != "model"
    given = plan.judge_reasoning_tokens if judging else plan.reasoning_tokens
    if given is not None:
        flag = "--judge-reasoning-tokens" if judging else "--reasoning-tokens"
        return Reasoning(Figures.one(given), f"given ({flag})")
    if judging:
        return assumed_reasoning(plan.settings.judge_model, {}, visible)
    settings = plan.settings_of(model)
    return assumed_reasoning(settings.provider_model, settings.request_fields, visible)


def per_request(model: str, role: str, plan: PlannedRun, runs: Recorded) -> PerRequest:
    """``role``'s tokens per request in ``model``'s row: the earlier run's where it recorded
    them for the model that role asks, else assumed (module docstring)."""
    asked = model if role == "model" else plan.asked(model, role)
    prompts = runs.prompts.get((LEDGER_ROLE[role], asked))
    if prompts is not None and prompts.prompt_bytes:
        rate = prompts.tokens / prompts.prompt_bytes
        input_basis = f"measured: {prompts.requests:,} requests"
    else:
        rate, input_basis = 1 / BYTES_PER_TOKEN, f"assumed: {BYTES_PER_TOKEN} bytes per token"
    if role == "embeddings":
        return PerRequest(Figures.one(0.0), Figures.one(0.0), "none", rate, input_basis)
    replies = runs.replies.get((role, asked))
    if replies is not None and replies.requests:
        output = Figures.one(replies.tokens / replies.requests)
        basis = f"measured: {replies.requests:,} replies"
        if replies.reasoning is None:
            basis += ", their reasoning included but not reported apart"
            return PerRequest(output, None, basis, rate, input_basis)
        reasoning = Figures.one(replies.reasoning / replies.requests)
        return PerRequest(output, reasoning, basis, rate, input_basis)
    if role == "model":
        visible = runs.chains(model).answer_bytes / BYTES_PER_TOKEN
        shown = f"the answers' {visible:,.0f} tokens"
    else:
        visible, shown = float(JUDGE_OUTPUT_TOKENS), f"{JUDGE_OUTPUT_TOKENS} visible tokens"
    hidden = unrecorded_reasoning(model, role, plan, visible)
    basis = f"assumed: {shown}; reasoning {hidden.basis}"
    return PerRequest(hidden.figures.plus(visible), hidden.figures, basis, rate, input_basis)


@dataclass
class RoleTokens:
    """Tokens of one role, as floats (an estimate)."""

    input: float = 0.0
    output: float = 0.0
    calls: float = 0.0
    reasoning: float | None = 0.0
    """Of ``output``, hidden reasoning tokens; None: unknown."""

    def add(self, other: RoleTokens, weight: float = 1.0) -> None:
        self.input += other.input * weight
        self.output += other.output * weight
        self.calls += other.calls * weight
        self.reasoning = (
            None
            if self.reasoning is None or other.reasoning is None
            else self.reasoning + other.reasoning * weight
        )


def question_usage(
    question: str,
    n: int,
    answer_bytes: float,
    plan: PlannedRun,
    rates: Mapping[str, PerRequest],
    column: str,
) -> dict[str, RoleTokens]:
    """Tokens per role of one question whose chain reaches ``n`` answers of ``answer_bytes``,
    at ``rates`` (``PerRequest`` per role) in ``column``."""
    probe = "x" * max(1, round(answer_bytes))
    cot = plan.settings.cot

    def role(name: str, calls: float, prompt_bytes: float) -> RoleTokens:
        rate = rates[name]
        hidden = rate.reasoning
        return RoleTokens(
            calls=calls,
            input=prompt_bytes * rate.input_per_byte,
            output=calls * rate.output.at(column),
            reasoning=None if hidden is None else calls * hidden.at(column),
        )

    first = prompt_tokens(render_generate(question, [], cot=cot))
    one = prompt_tokens(render_generate(question, [probe], cot=cot))
    each = prompt_tokens(render_generate(question, [probe, probe], cot=cot)) - one
    generations = n + (1 if plan.settings.pipeline else 0)  # the last look-ahead is discarded
    # generation k + 1 lists k earlier answers
    listed = sum(first if k == 0 else one + (k - 1) * each for k in range(generations))
    asked = n * plan.settings.judge_samples
    roles = {
        "model": role("model", generations, listed),
        "judge": role("judge", asked, asked * prompt_tokens(render_coherence(question, probe))),
    }
    if plan.settings.llm_novelty:
        pairs = n * (n - 1) / 2
        pair = prompt_tokens(render_similarity(question, probe, probe))
        roles["similarity"] = role("similarity", pairs, pairs * pair)
    roles["embeddings"] = role("embeddings", n, n * answer_bytes)
    return roles


def _dollars(
    roles: Mapping[str, RoleTokens], model: str, plan: PlannedRun, prices: PriceTable
) -> float | None:
    costs = []
    for role, usage in roles.items():
        price = prices.price(plan.asked(model, role))
        costs.append(
            None if price is None else price.dollars(int(usage.input), 0, int(usage.output))
        )
    return _sum_dollars(costs)


def estimate_row(
    model: str, plan: PlannedRun, runs: Recorded, prices: PriceTable
) -> dict[str, Any]:
    """One model's tokens and dollars, ``low``, ``expected`` and ``high``, and what they rest
    on."""
    chains = runs.chains(model)
    roles = [r for r in ROLES if r != "similarity" or plan.settings.llm_novelty]
    rates = {role: per_request(model, role, plan, runs) for role in roles}
    row: dict[str, Any] = {
        "model": model,
        "sent_as": plan.settings_of(model).provider_model,
        "chains": chains.as_dict(),
        "per_request": {
            role: {"model": plan.asked(model, role), **rates[role].as_dict()} for role in roles
        },
    }
    for column in COLUMNS:
        totals: dict[str, RoleTokens] = {}
        dollars: float | None = 0.0
        for question in plan.questions:
            for n, weight in chains.spread(column).items():
                one = question_usage(question, n, chains.answer_bytes, plan, rates, column)
                for role, usage in one.items():
                    totals.setdefault(role, RoleTokens()).add(usage, weight * plan.repeats)
                cost = _dollars(one, model, plan, prices)
                dollars = add_dollars(
                    dollars, None if cost is None else cost * weight * plan.repeats
                )
        hidden = [u.reasoning for u in totals.values()]
        row[column] = {
            "input_tokens": round(sum(u.input for u in totals.values())),
            "output_tokens": round(sum(u.output for u in totals.values())),
            "reasoning_tokens": None if None in hidden else round(sum(h or 0.0 for h in hidden)),
            "calls": round(sum(u.calls for u in totals.values())),
            "dollars": dollars,
        }
    return row


def estimate(plan: PlannedRun, runs: Recorded, prices: PriceTable) -> dict[str, Any]:
    """The plan's tokens and dollars per model: ``low``, ``expected`` and ``high``."""
    models = [estimate_row(model, plan, runs, prices) for model in plan.models]
    priced = {plan.asked(model, role) for model in plan.models for role in ROLES}
    total = {column: _sum_dollars([row[column]["dollars"] for row in models]) for column in COLUMNS}
    return {
        "questions": len(plan.questions) * plan.repeats,
        "distribution": runs.name,
        "prices": prices.describe(),
        "models": models,
        "dollars": total,
        "unpriced_models": sorted(m for m in priced if prices.price(m) is None),
        "assumptions": ASSUMPTIONS,
    }


def _sum_dollars(values: Sequence[float | None]) -> float | None:
    start: float | None = 0.0
    return reduce(add_dollars, values, start)
