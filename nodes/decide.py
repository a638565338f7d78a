"""``decide``: combine the candidate's scores, record it, and say whether to go on.

A deferred node: it runs once every branch of the turn has finished. The rule is the
benchmark's (``Thresholds``, every score strictly above its threshold): the first invalid
answer is recorded with ``valid: false`` and its reason, ends the question and is never
counted. A failed branch stops the question with its error kind, recording nothing for the
candidate: an error is never a score.

``decided`` is the whole decision as a pure function; the node only reads the clock, pauses
when asked and emits events.
"""

from __future__ import annotations

import time
from typing import Any, cast

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from aidanbench.core.calls import answer_dollars, call_count, call_tokens, usage_missing
from aidanbench.core.scores import by_key, declared, scoring
from aidanbench.core.settings import Settings
from aidanbench.core.state import (
    AnswerRecord,
    CallStats,
    Candidate,
    ErrorInfo,
    QuestionState,
    ScoreOutcome,
)
from aidanbench.core.thresholds import panel_verdict
from aidanbench.core.vocabulary import is_truncated
from aidanbench.nodes.caps import Budget, cap_reached, spent, unpriced_error
from aidanbench.nodes.context import no_calls, paid_aside, settings_of
from aidanbench.nodes.metrics import chain_metrics


def branch_error(state: QuestionState, keys: list[str]) -> ErrorInfo | None:
    """The first error among the candidate's generation and the scoring outcomes."""
    candidate = state.get("candidate")
    if candidate is not None and "error" in candidate:
        return candidate["error"]
    for key in keys:
        outcome: ScoreOutcome | None = state.get(key)  # type: ignore[assignment]
        if outcome is not None and "error" in outcome:
            return outcome["error"]
    return None


def _value(outcome: ScoreOutcome | None, index: int, key: str) -> ScoreOutcome:
    """The outcome scoring answer ``index``: a value, or a panel that decided without it."""
    if (
        outcome is None
        or outcome["index"] != index
        or ("value" not in outcome and not outcome.get("panel"))
    ):
        raise RuntimeError(f"decide: {key} is not scored for answer {index}: {outcome!r}")
    return outcome


def _record(
    state: QuestionState, candidate: Candidate, keys: list[str], settings: Settings, now: float
) -> AnswerRecord:
    index = candidate["index"]
    outcomes = {key: _value(state.get(key), index, key) for key in keys}  # type: ignore[arg-type]
    got = {by_key(key).name: outcome.get("value") for key, outcome in outcomes.items()}
    values = {s.name: got.get(s.name) for s in declared() if s.name in got or s.always_recorded}
    panel = outcomes["coherence_result"].get("panel")
    coherent = None if panel is None else panel_verdict([seat["passes"] for seat in panel])
    reason = settings.thresholds.failure(values, coherent)
    calls: dict[str, CallStats] = {"generate": candidate.get("call", no_calls())}
    flags: list[str] = []
    for key, outcome in outcomes.items():
        role = by_key(key).cost_role
        if role is not None:
            calls[role] = outcome.get("call", no_calls())
        flags.extend(f for f in outcome.get("flags", []) if f not in flags)
    started = state.get("started_at") or now
    fields: dict[str, Any] = {
        "index": index,
        "answer": candidate["answer"],
        "raw_reply": candidate["raw_reply"],
        "used_answer_tag": candidate["used_answer_tag"],
        **values,
        "valid": reason is None,
        "stop_reason": reason,
        "elapsed_s": round(now - started, 3),
        "calls": calls,
        "flags": flags,
        "finish_reason": candidate.get("finish_reason"),
        "truncated": is_truncated(candidate.get("finish_reason")),
        "served_model": calls["generate"]["served_model"],
        "reasoning_tokens": candidate.get("reasoning_tokens"),
    }
    record = cast(AnswerRecord, fields)
    samples = outcomes["coherence_result"].get("samples")
    if samples:
        record["coherence_samples"] = samples
    if panel is not None:
        record["judges"] = panel
    return record


def should_pause(record: AnswerRecord, settings: Settings) -> bool:
    """Whether to pause for a person after this answer (Studio human-in-the-loop). The
    pause comes before anything is written and ``decide`` makes no API call, so resuming
    re-runs it without repeating one (only the elapsed time is read again)."""
    if settings.interrupt_on_reject and not record["valid"]:
        return True
    every = settings.interrupt_every
    return every is not None and record["index"] % every == 0


def _after(state: QuestionState, stop: str | None) -> dict[str, Any]:
    """The stop, or the look-ahead as the next candidate. A stop discards the look-ahead
    unseen (its cost is kept as ``speculative``); a failed look-ahead stops the question
    with its error, to be regenerated on the next invocation."""
    lookahead = state.get("lookahead")
    if stop is not None:
        update: dict[str, Any] = {"stop_reason": stop, "candidate": None, "lookahead": None}
        if lookahead is not None and "call" in lookahead:
            update["speculative"] = paid_aside(state, "lookahead")
        return update
    if lookahead is not None and "error" in lookahead:
        error = lookahead["error"]
        return {"stop_reason": error["kind"], "error": error, "candidate": None, "lookahead": None}
    return {"candidate": lookahead, "lookahead": None}


def answer_event(record: AnswerRecord, score: int, stop: str | None) -> dict[str, Any]:
    """The custom stream event of a scored answer (Studio, progress displays)."""
    return {
        "event": "answer",
        "index": record["index"],
        "valid": record["valid"],
        **{score.name: score.value(record) for score in declared() if score.name in record},
        "score": score,
        "stop_reason": stop,
        "calls": call_count(record["calls"]),
        "tokens": call_tokens(record["calls"]),
        "cost_usd": answer_dollars(record["calls"]),
        "usage_missing": usage_missing(record["calls"]),
    }


def capped(
    state: QuestionState, record: AnswerRecord, settings: Settings, budget_spent: bool
) -> str | None:
    """The cap (``nodes.caps``) that stops the question after ``record``, or None. The
    spend counts the discarded look-aheads and the next turn's too: all were paid for."""
    answers = [*state.get("answers", []), record]
    return cap_reached(answers, paid_aside(state, "lookahead"), settings, budget_spent=budget_spent)


def decided(
    state: QuestionState, settings: Settings, now: float, *, budget_spent: bool = False
) -> tuple[dict[str, Any], AnswerRecord | None]:
    """The update ``decide`` returns, and the answer it records (None on an error stop);
    ``now`` is the decision's wall-clock time (epoch seconds), which gives the answer's
    elapsed time."""
    keys = [score.outcome_key for score in scoring(settings)]
    candidate = state.get("candidate")
    if candidate is None:
        raise RuntimeError("decide ran without a candidate")
    error = branch_error(state, keys)
    if error is not None:
        return {"stop_reason": error["kind"], "error": error}, None
    record = _record(state, candidate, keys, settings, now)
    metrics = chain_metrics([*state.get("answers", []), record], settings.reward_mode)
    stop: str | None = record["stop_reason"]
    cap = settings.max_answers
    if stop is None and cap is not None and metrics["score"] >= cap:
        stop = "max_answers"
    update = {"answers": [record], **metrics, **{key: None for key in keys}}
    if stop is None:
        stop = capped(state, record, settings, budget_spent)
        if stop == "unpriced":
            error = unpriced_error(settings)
            return update | _after(state, "error") | {"error": error}, record
    return update | _after(state, stop), record


def changes(state: QuestionState, update: dict[str, Any]) -> dict[str, Any]:
    """``update`` without the keys whose value ``state`` already holds: each key returned
    is a write LangGraph versions and checkpoints, and most metrics keep their value on a
    turn. ``answers`` is always kept: its writes append."""
    return {
        key: value
        for key, value in update.items()
        if key == "answers" or key not in state or state[key] != value  # type: ignore[literal-required]
    }


async def decide(
    state: QuestionState, runtime: Runtime[Settings], *, budget: Budget | None = None
) -> dict[str, Any]:
    """Record the scored candidate; stop on a failure, an error, a cap or a spent ``budget``."""
    settings = settings_of(runtime)
    update, record = decided(state, settings, time.time(), budget_spent=spent(budget))
    if record is None:
        index = state["candidate"]["index"]  # type: ignore[index]
        runtime.stream_writer({"event": "error", "index": index, **update["error"]})
        return update
    if should_pause(record, settings):
        interrupt({"reason": "review", "answer": record, "score": update["score"]})
    runtime.stream_writer(answer_event(record, update["score"], update.get("stop_reason")))
    return changes(state, update)
