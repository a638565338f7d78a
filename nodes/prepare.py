"""``prepare``: the first step of every invocation of a question thread.

A new thread records what it measures with (``measured``) and fills every output key, so
callers always get the whole output schema. A thread invoked again under settings that
disagree with its record is refused: it would mix two measurements in one chain. After an
error only the failed outcomes are cleared, so a finished judge or embedding result is not
recomputed; a cap (``nodes.caps``) is lifted when it no longer holds. A thread the
benchmark's rule finished is left as it is, and routing ends at once.

A candidate the embeddings endpoint refused for its content (400, 413 or 422: too long,
filtered) would fail on every rerun, so it is dropped with its look-ahead (whose prompt
listed it) and scores, their cost kept as ``speculative``, and the model is asked again: it
was never scored, so it is as if its generation had failed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from langgraph.runtime import Runtime

from aidanbench.core.scores import declared
from aidanbench.core.setting_kinds import panel_record
from aidanbench.core.settings import Settings
from aidanbench.core.state import Measured, QuestionState
from aidanbench.core.vocabulary import BUDGET_STOPS, ERROR_KINDS
from aidanbench.nodes.caps import Budget, continuation, spent
from aidanbench.nodes.context import paid_aside, settings_of
from aidanbench.nodes.metrics import chain_metrics
from aidanbench.nodes.prompts import prompts_sha256


def outcome_keys() -> tuple[str, ...]:
    """Work-in-flight keys: the candidates and each declared score's outcome."""
    return ("candidate", "lookahead", *(score.outcome_key for score in declared()))


CONTENT_REFUSALS = frozenset({400, 413, 422})
"""Statuses with which an embeddings endpoint refuses one text for what it contains."""


def refused_for_content(state: QuestionState) -> bool:
    """Whether the candidate's text was refused by the embeddings endpoint."""
    outcome = state.get("novelty_result")
    candidate = state.get("candidate")
    if not isinstance(outcome, dict) or "error" not in outcome:
        return False
    if not isinstance(candidate, dict) or "answer" not in candidate:
        return False
    error = outcome["error"]
    return error["role"] == "embeddings" and error["status"] in CONTENT_REFUSALS


async def prepare(
    state: QuestionState, runtime: Runtime[Settings], *, budget: Budget | None = None
) -> dict[str, Any]:
    """Start a new question, clear a recorded error so the thread can go on, or lift a
    cap the settings (and the run's ``budget``) no longer reach."""
    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty string, got {question!r}")
    settings = settings_of(runtime)
    update: dict[str, Any] = {}
    if state.get("started_at") is None:
        update |= {"started_at": time.time(), "stop_reason": None, "error": None}
        update |= {"speculative": None, "measured": measured_by(settings)}
        update |= chain_metrics([], settings.reward_mode)
    else:
        differences = measurement_differences(state.get("measured"), settings)
        if differences:
            raise ValueError(
                "this thread was measured with other settings (differs in: "
                f"{', '.join(differences)}); run it with the settings it recorded"
            )
    if state.get("stop_reason") in BUDGET_STOPS:
        update |= continuation(state, settings, budget_spent=spent(budget), now=time.time())
    if state.get("stop_reason") in ERROR_KINDS:
        update |= {"stop_reason": None, "error": None}
        if refused_for_content(state):
            update |= {"speculative": paid_aside(state, "candidate", "lookahead")}
            return update | {key: None for key in outcome_keys()}
        for key in outcome_keys():
            outcome = state.get(key)
            if isinstance(outcome, dict) and "error" in outcome:
                update[key] = None
    return update


def measured_by(settings: Settings) -> Measured:
    """What a thread started under ``settings`` measures with."""
    measured: dict[str, Any] = {
        "model": settings.model,
        "temperature": settings.temperature,
        "judge_model": settings.judge_model,
        "embedding_model": settings.embedding_model,
        **{
            score.measured_key: settings.thresholds[score.name]
            for score in declared()
            if score.always_recorded or score.on(settings)
        },
        "cot": settings.cot,
        "prompts_sha256": prompts_sha256(),
        "judge_panel": panel_record(settings) or None,
    }
    return cast(Measured, measured)


def measurement_differences(recorded: Mapping[str, Any] | None, settings: Settings) -> list[str]:
    """Names of what ``settings`` would measure differently from a thread's record (none
    when the thread has no record: nothing to compare with). A score's threshold is compared
    whether or not either side recorded it: a score switched on or off is another measure."""
    if not recorded:
        return []
    current: Mapping[str, Any] = measured_by(settings)
    keys = dict.fromkeys([*current, *(score.measured_key for score in declared())])
    return [key for key in keys if recorded.get(key) != current.get(key)]
