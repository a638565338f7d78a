"""The words a run is described in, defined once: stop reasons, error kinds, roles.

Every package reads these names from here, so a new stop reason is added in one place and
every reader learns of it (a score's stop reason is its name, declared in ``core.scores``).
"""

from __future__ import annotations

from typing import Literal, get_args

from aidanbench.core.scores import declared

ThresholdStop = Literal["coherence", "novelty", "llm_novelty"]
"""The recorded answer failed a threshold. For typing only: any declared score's name is a
threshold stop (``is_threshold_stop``), so a score added to ``core.scores`` is one too."""

CapStop = Literal["max_answers"]
"""The answer cap (a scoring setting, part of what is measured) ended the question: final."""

BudgetStop = Literal["budget", "max_question_cost", "max_question_seconds"]
"""A spending cap (operational) ended the question: its score is a lower bound, and a rerun
with a higher cap continues it from where it stopped."""

ErrorKind = Literal["error", "judge_error"]
"""A failure ended the question: ``error`` (API or configuration) or ``judge_error`` (a
judge reply unreadable after every attempt). Never a score: invoking the thread retries."""

StopReason = Literal[ThresholdStop, CapStop, BudgetStop, ErrorKind]
"""Why a question's chain ended."""

CAP_STOPS: frozenset[str] = frozenset(get_args(CapStop))
BUDGET_STOPS: frozenset[str] = frozenset(get_args(BudgetStop))
ERROR_KINDS: frozenset[str] = frozenset(get_args(ErrorKind))
STOP_REASONS: tuple[str, ...] = tuple(get_args(StopReason))


def is_threshold_stop(stop_reason: str | None) -> bool:
    """Whether a threshold ended the question: the stop names a declared score."""
    return any(score.name == stop_reason for score in declared())


def is_final(stop_reason: str | None) -> bool:
    """Whether a threshold or the answer cap ended the question: a rerun with the same settings
    changes nothing."""
    return is_threshold_stop(stop_reason) or stop_reason in CAP_STOPS


def is_error_stop(stop_reason: str | None) -> bool:
    """Whether the question ended on a failure (to be retried), not on a score."""
    return stop_reason in ERROR_KINDS


def is_censored(stop_reason: str | None) -> bool:
    """Whether a spending cap, not the rule, ended the question: its score is a lower bound."""
    return stop_reason in BUDGET_STOPS


LENGTH = "length"
"""``finish_reason`` of a reply stopped by the token limit (``max_tokens``,
``max_completion_tokens``): its text is cut, or empty when reasoning used the budget."""

CONTENT_FILTER = "content_filter"
"""``finish_reason`` of a reply stopped by the provider's content filter."""


def is_truncated(finish_reason: str | None) -> bool | None:
    """Whether a reply was cut by the token limit; None when its finish reason is unknown."""
    return None if finish_reason is None else finish_reason == LENGTH


Role = Literal["model", "judge", "embeddings"]
"""Who an API call went to; error records and messages name it."""
