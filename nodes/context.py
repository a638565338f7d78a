"""What a node's helpers need besides the state: settings, services and the stream writer.

Nodes are ``async def verb_noun(state, runtime, *, services) -> dict``, the services factory
bound by the graph builder. Keeping services out of ``runtime.context`` keeps the context a
plain, serialisable settings form that Studio can render.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from aidanbench.core.calls import add_dollars, known_sum, stats_dollars
from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, ErrorInfo, QuestionState, ScoreOutcome
from aidanbench.core.thresholds import panel_verdict
from aidanbench.services import Services, ServicesFactory, key_values
from aidanbench.services.errors import describe, is_recoverable
from aidanbench.services.lookahead import Turn
from aidanbench.services.pricing import Price, price_table
from aidanbench.services.usage import (
    PRICED,
    reply_text,
    reply_usage,
    served_model,
    usage_line,
)


def settings_of(runtime: Runtime[Settings] | None) -> Settings:
    """The run's settings, or the schema defaults when no context was passed."""
    context = None if runtime is None else runtime.context
    return context if isinstance(context, Settings) else Settings()


@dataclass
class NodeContext:
    """One node call's runtime and services factory, as its helpers use them."""

    runtime: Runtime[Settings]
    factory: ServicesFactory

    @cached_property
    def settings(self) -> Settings:
        return settings_of(self.runtime)

    @cached_property
    def services(self) -> Services:
        """Resolved on first use, inside the node's error handling, so a configuration error
        is recorded like any other."""
        return self.factory(self.settings)

    def price(self, role: str, served: str | None = None) -> Price | None:
        """The price of a call of ``role`` (``model``, ``judge``, ``embeddings``) served by
        ``served`` (``PriceTable.served_price``), or None when unknown."""
        model = self.settings.endpoint(role).model
        return price_table(self.settings.prices_path).served_price(model, served)

    def failure(self, role: str, exc: BaseException, seat: Settings | None = None) -> ErrorInfo:
        """The recorded form of a failed call by ``role``, with the run's keys redacted;
        ``seat`` is the panel judge whose call it was (``Settings.judges``): its host and
        model are named, never another judge's."""
        settings = seat or self.settings
        judge = settings.judge_model if seat is not None else None
        host = settings.endpoint(role).host
        return describe(role, host, exc, key_values(settings), judge=judge)


T = TypeVar("T")


def candidate_answer(state: QuestionState) -> tuple[str, int]:
    """The answer a scoring node scores and its index (``generate`` has put it there)."""
    candidate = state["candidate"]
    assert candidate is not None and "answer" in candidate
    return candidate["answer"], candidate["index"]


def scoring_turn(state: QuestionState) -> Turn:
    """The answer being scored, as its look-ahead knows it (``services.lookahead``)."""
    answer, index = candidate_answer(state)
    return state["question"], index, answer


async def scored(
    ctx: NodeContext,
    state: QuestionState,
    score: str,
    role: str,
    ask: Callable[[], Awaitable[T]],
    outcome: Callable[[T], ScoreOutcome],
) -> ScoreOutcome:
    """``outcome`` of what ``ask`` (the calls ``role`` makes) returns, or the failure when
    the calls fail in a way a node records (``is_recoverable``): an error is never a score.
    Any other exception is a bug and is raised. A ``score`` failing its threshold (a judge
    panel's: its decision) fails the answer whatever the others say, so the answer's
    look-ahead is told at once. ``outcome`` may return an error outcome itself (a panel
    left undecided)."""
    turn = scoring_turn(state)
    try:
        found = await ask()
    except Exception as exc:
        if not is_recoverable(exc):
            raise
        return ScoreOutcome(index=turn[1], error=ctx.failure(role, exc))
    result = outcome(found)
    if "error" in result:
        return result
    panel = result.get("panel")
    if not (
        panel_verdict([judge["passes"] for judge in panel])
        if panel
        else ctx.settings.thresholds.passes(score, result["value"])
    ):
        ctx.services.verdicts.fail(turn)
    return result


def no_calls() -> CallStats:
    """Cost of a role that made no request (cache hit or nothing to compare): nothing."""
    return CallStats(served_model=None, latency_s=0.0, input_tokens=0, output_tokens=0, calls=0)


def paid_aside(state: QuestionState, *drafts: str) -> CallStats:
    """``speculative`` (generations paid for and discarded) with the calls of ``drafts``
    (``candidate``, ``lookahead``) added, as when they are dropped."""
    spent = state.get("speculative") or no_calls()
    for key in drafts:
        dropped = state.get(key)
        if isinstance(dropped, dict) and "call" in dropped:
            spent = add_calls(spent, dropped["call"])
    return spent


def add_calls(total: CallStats, more: CallStats) -> CallStats:
    """Two costs of the same role summed (re-asks, pairs); a count or dollars unknown in
    either is unknown in the sum. Two records without usage details (older ones) sum to
    one without them."""
    for nothing, other in ((total, more), (more, total)):
        if nothing["calls"] == 0 and nothing["latency_s"] == 0 and not nothing["served_model"]:
            return CallStats(**other)
    summed = CallStats(
        served_model=more["served_model"] or total["served_model"],
        latency_s=total["latency_s"] + more["latency_s"],
        input_tokens=known_sum((total["input_tokens"], more["input_tokens"])),
        output_tokens=known_sum((total["output_tokens"], more["output_tokens"])),
        calls=total["calls"] + more["calls"],
    )
    if "cost_usd" not in total and "cost_usd" not in more:
        return summed
    for key in ("cached_input_tokens", "reasoning_tokens"):
        summed[key] = known_sum((total.get(key, 0), more.get(key, 0)))
    summed["cost_usd"] = add_dollars(total.get("cost_usd"), more.get("cost_usd"))
    summed["provider_cost_calls"] = total.get("provider_cost_calls", 0) + more.get(
        "provider_cost_calls", 0
    )
    missing = total.get("usage_missing", 0) + more.get("usage_missing", 0)
    if missing:
        summed["usage_missing"] = missing
        summed["estimated_cost_usd"] = add_dollars(
            stats_dollars(total, estimate=True), stats_dollars(more, estimate=True)
        )
    unreadable = dict(total.get("unreadable") or {})
    for why, count in (more.get("unreadable") or {}).items():
        unreadable[why] = unreadable.get(why, 0) + count
    if unreadable:
        summed["unreadable"] = unreadable
    return summed


def message_stats(
    message: AIMessage, latency_s: float, price: Price | None, prompt: str
) -> CallStats:
    """Cost of one chat call: the reply's ledger line (``services.usage.usage_line``), left
    on the message by the client when the run keeps a ledger (``PRICED``), else made here: a
    reply is priced once. Each count is the line's: one the reply did not report (no
    ``completion_tokens_details``, say) stays unknown, never 0. A reply without token counts
    also carries an estimate from ``prompt`` and the reply's text for the caps."""
    served = served_model(message)
    line = message.response_metadata.get(PRICED) or usage_line(
        "",
        "",
        reply_usage(message),
        price,
        {},
        served=served,
        prompt=prompt,
        reply=reply_text(message),
    )
    reported = line["input_tokens"] is not None and line["output_tokens"] is not None
    stats = CallStats(
        served_model=served,
        latency_s=latency_s,
        input_tokens=line["input_tokens"],
        output_tokens=line["output_tokens"],
        calls=1,
        cached_input_tokens=line["cached_input_tokens"],
        reasoning_tokens=line["reasoning_tokens"],
        cost_usd=line["cost_usd"],
        provider_cost_calls=int(line["provider_cost"] is not None),
    )
    if not reported:
        stats["usage_missing"] = 1
        stats["estimated_cost_usd"] = line.get("estimated_cost_usd")
    return stats


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """Yields the seconds elapsed since entry, as a function."""
    start = time.perf_counter()
    yield lambda: time.perf_counter() - start


def finish_reason(message: AIMessage) -> str | None:
    """Why the provider stopped the reply (``stop``, ``length``, ``content_filter``…), or
    None when it gave none."""
    found = message.response_metadata.get("finish_reason")
    return found if isinstance(found, str) and found else None


REASONING_BLOCKS = ("reasoning", "thinking")
"""Types of content blocks holding a model's reasoning rather than its answer."""


def reasoning_text(message: AIMessage) -> str:
    """Reasoning a reply carries apart from its answer: a reasoning field or content blocks."""
    found = message.additional_kwargs.get("reasoning")
    parts = [found] if isinstance(found, str) else []
    if not isinstance(message.content, str):
        for block in message.content:
            if isinstance(block, dict) and block.get("type") in REASONING_BLOCKS:
                parts.append(str(block.get("reasoning") or block.get("thinking") or "…"))
    return "".join(parts)
