"""What an answer's calls add up to: requests, tokens and dollars.

An answer record keeps one ``CallStats`` per role (``core.state``); these sum them for the
caps, a question line and every total built from lines. An unknown part (a reply without
usage, a model without a price) makes the sum unknown (None), never a smaller number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PER_ANSWER_ROLES = ("generate", "judge", "similarity")
"""Roles whose tokens and dollars an answer's record carries. Embedding requests are
batched across questions, so their tokens and dollars are counted for the run (the usage
ledger), not per answer."""


def known_sum(values: Iterable[Any]) -> Any:
    """A sum that is unknown (None) once any part is."""
    total: Any = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def add_dollars(a: float | None, b: float | None) -> float | None:
    """Sum of two costs; unknown when either is."""
    return None if a is None or b is None else a + b


def stats_dollars(stats: Mapping[str, Any] | None, *, estimate: bool = False) -> float | None:
    """Dollars of one role's ``CallStats``: 0 without calls, None when unknown; with
    ``estimate``, calls that reported no usage count at their estimate (the caps)."""
    if not stats or not stats.get("calls"):
        return 0.0
    cost = stats.get("cost_usd")
    if estimate and stats.get("usage_missing"):
        cost = stats.get("estimated_cost_usd")
    return float(cost) if isinstance(cost, int | float) else None


def answer_dollars(
    calls: Mapping[str, Mapping[str, Any]], *, estimate: bool = False
) -> float | None:
    """Dollars of one answer's generation and scoring (``PER_ANSWER_ROLES``)."""
    total: float | None = 0.0
    for role in PER_ANSWER_ROLES:
        total = add_dollars(total, stats_dollars(calls.get(role), estimate=estimate))
    return total


def question_dollars(
    answers: Sequence[Mapping[str, Any]],
    speculative: Mapping[str, Any] | None,
    *,
    estimate: bool = False,
) -> float | None:
    """Dollars of a question's recorded answers and its discarded look-aheads."""
    total = stats_dollars(speculative, estimate=estimate)
    for answer in answers:
        total = add_dollars(total, answer_dollars(answer.get("calls") or {}, estimate=estimate))
    return total


COST_PARTS: dict[str, tuple[str, ...]] = {
    "generations": ("generate", "speculative"),
    "judging": ("judge", "similarity"),
}
"""A question's dollars in the parts a reader asks about apart: the model's own generations
(its recorded answers and discarded look-aheads) and the judge's work on its answers, each
known or unknown on its own, so an unpriced judge never hides a priced model's dollars.
Their sum is ``question_dollars``; the embeddings are the run's (``PER_ANSWER_ROLES``)."""


def question_parts(
    answers: Sequence[Mapping[str, Any]], speculative: Mapping[str, Any] | None
) -> dict[str, float | None]:
    """A question's dollars by ``COST_PARTS`` (each None when unknown)."""
    calls = [answer.get("calls") or {} for answer in answers]
    calls.append({"speculative": speculative} if speculative else {})
    return {
        part: known_sum(stats_dollars(c.get(role)) for c in calls for role in roles)
        for part, roles in COST_PARTS.items()
    }


def _roles(calls: Mapping[str, Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The per-answer roles' stats that made a request (``speculative`` counts as one)."""
    return [
        stats
        for role, stats in (calls or {}).items()
        if role in (*PER_ANSWER_ROLES, "speculative") and stats and stats.get("calls")
    ]


def call_tokens(calls: Mapping[str, Mapping[str, Any]] | None) -> int | None:
    """Input plus output tokens over a ``{role: CallStats}`` mapping (embeddings apart, see
    ``PER_ANSWER_ROLES``); None when a request reported none."""
    total = 0
    for stats in _roles(calls):
        inputs, outputs = stats.get("input_tokens", 0), stats.get("output_tokens", 0)
        if inputs is None or outputs is None:
            return None
        total += int(inputs) + int(outputs)
    return total


def usage_missing(calls: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Requests over a ``{role: CallStats}`` mapping that reported no usage."""
    return sum(int(stats.get("usage_missing", 0)) for stats in _roles(calls))


def call_count(calls: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Chat requests over a ``{role: CallStats}`` mapping: those whose tokens ``call_tokens``
    counts (embeddings apart, see ``PER_ANSWER_ROLES``)."""
    return sum(int(stats.get("calls", 0)) for stats in _roles(calls))
