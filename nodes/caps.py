"""The per-question caps and the run's budget: when a question stops short of its end.

A cap (``max_question_cost``, ``max_question_seconds``, or the run's ``Budget``) stops a
question after a recorded answer, with the cap's name as its stop reason. Such a question
is *censored*: the model had not yet failed, so its score is a lower bound. It is not
final: invoked again under a cap it no longer reaches, it continues from its last answer
(the discarded look-ahead is asked again).

Seconds are the recorded ``elapsed_s`` of the answers; a continued question's clock resumes
where it stopped, so time between runs is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aidanbench.core.calls import question_dollars
from aidanbench.core.settings import Settings
from aidanbench.core.state import ErrorInfo


class Budget(Protocol):
    """The run's budget (``record.usage.UsageLedger``): whether spending hit ``--max-cost``."""

    @property
    def exhausted(self) -> bool: ...


def spent(budget: Budget | None) -> bool:
    """Whether ``budget`` (None: a graph run without one) is spent."""
    return budget is not None and budget.exhausted


def cap_reached(
    answers: Sequence[Mapping[str, Any]],
    speculative: Mapping[str, Any] | None,
    settings: Settings,
    *,
    budget_spent: bool,
) -> str | None:
    """The cap that stops a question with these answers, or None; ``unpriced`` when a cost
    cap cannot be applied (no price known)."""
    if budget_spent:
        return "budget"
    cost_cap = settings.max_question_cost
    if cost_cap is not None:
        spent = question_dollars(answers, speculative, estimate=True)
        if spent is None:
            return "unpriced"
        if spent >= cost_cap:
            return "max_question_cost"
    seconds_cap = settings.max_question_seconds
    if seconds_cap is not None and answers and answers[-1]["elapsed_s"] >= seconds_cap:
        return "max_question_seconds"
    return None


def unpriced_error(settings: Settings) -> ErrorInfo:
    """The error of a question whose cost cap cannot be applied: a model has no price."""
    return ErrorInfo(
        kind="error",
        role="model",
        message=(
            f"max_question_cost is set but the cost of {settings.provider_model} or "
            f"{settings.judge_model} is unknown (no price); give one with a prices file"
        ),
        status=None,
        retryable=False,
    )


def continuation(
    state: Mapping[str, Any], settings: Settings, *, budget_spent: bool, now: float
) -> dict[str, Any]:
    """What ``prepare`` changes on a capped question: nothing while a cap still holds;
    otherwise the stop is cleared and the question's clock resumes where it stopped."""
    answers = state.get("answers") or []
    if cap_reached(answers, state.get("speculative"), settings, budget_spent=budget_spent):
        return {}
    elapsed = answers[-1]["elapsed_s"] if answers else 0.0
    return {"stop_reason": None, "error": None, "started_at": now - elapsed}
