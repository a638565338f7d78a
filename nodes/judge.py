"""``judge``: the judge LLM's coherence and plausibility score (0-100) for the candidate.

With ``judge_samples`` K > 1 all K judgments are kept as ``samples``; the first is the score
(``judge_calls.sample_judgments``). With a judge panel (``judge_panel``) every judge scores
the candidate at once and each is kept as its own record (``panel``: its score, decision,
served model, refusals, dollars, or its error naming its own host); the first judge's is the
score, and the majority of their decisions at their own thresholds decides coherence. A judge
that gives no score (a refusal in every try, a time-out) undecides the answer only when the
others' majority does not already decide it (``core.thresholds.panel_verdict``): an unknown is
never a pass or a fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.errors import ErrorInfo
from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, PanelJudgment, QuestionState, ScoreOutcome
from aidanbench.core.thresholds import panel_verdict
from aidanbench.nodes.context import NodeContext, add_calls, candidate_answer, no_calls, scored
from aidanbench.nodes.judge_calls import ask_judge, neutralise, sample_judgments
from aidanbench.nodes.prompts import render_coherence
from aidanbench.services import ServicesFactory
from aidanbench.services.errors import is_recoverable

Judged = tuple[list[int], CallStats]
"""One judge's judgments of the candidate and what they cost."""


@dataclass(frozen=True)
class Seat:
    """What one judge of a panel gave: its judgments, or the failure that stopped them."""

    settings: Settings
    judged: Judged | None
    error: ErrorInfo | None = None
    calls: CallStats | None = None
    """What its failed judgment cost (the replies it could not read), when known."""


async def judge(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Score the candidate's coherence; an unreadable or failed judge is recorded, not 0."""
    ctx = NodeContext(runtime, services)
    answer, index = candidate_answer(state)
    shown, flags = neutralise(answer)
    prompt = render_coherence(state["question"], shown)
    samples = ctx.settings.judge_samples
    judges = ctx.settings.judges

    def one(seat: Settings) -> Awaitable[Judged]:
        extra = None if seat is ctx.settings else seat
        return sample_judgments(lambda: ask_judge(ctx, prompt, "coherence_score", extra), samples)

    if len(judges) == 1:  # no task to schedule: its request is queued before the look-ahead's

        def alone(judged: Judged) -> ScoreOutcome:
            scores, call = judged
            outcome = ScoreOutcome(index=index, value=float(scores[0]), call=call, flags=flags)
            if samples > 1:
                outcome["samples"] = [float(score) for score in scores]
            return outcome

        found = await scored(ctx, state, "coherence", "judge", lambda: one(ctx.settings), alone)
        return {"coherence_result": found}

    async def seat_of(settings: Settings) -> Seat:
        try:
            return Seat(settings, await one(settings))
        except Exception as exc:
            if not is_recoverable(exc):
                raise
            failed = getattr(exc, "calls", None)
            return Seat(settings, None, ctx.failure("judge", exc, settings), failed)

    async def ask() -> list[Seat]:
        return list(await asyncio.gather(*(seat_of(settings) for settings in judges)))

    def panel(seats: list[Seat]) -> ScoreOutcome:
        return panel_outcome(seats, index, samples, flags)

    return {"coherence_result": await scored(ctx, state, "coherence", "judge", ask, panel)}


def panel_outcome(seats: list[Seat], index: int, samples: int, flags: list[str]) -> ScoreOutcome:
    """The panel's outcome: every judge's record, the first judge's score as the value, and
    the first failed judge's error when the judges who answered leave the answer undecided.
    ``calls.judge`` sums every judge's calls; its served model is the first judge's (the
    judge the answer's coherence is), never the last one to answer."""
    records = [panel_judgment(seat, samples) for seat in seats]
    call = no_calls()
    for seat in seats:
        spent = seat.judged[1] if seat.judged is not None else seat.calls
        if spent is not None:
            call = add_calls(call, spent)
    first = seats[0].judged
    call["served_model"] = first[1]["served_model"] if first is not None else None
    if panel_verdict([record["passes"] for record in records]) is None:
        failed = next(seat.error for seat in seats if seat.error is not None)
        return ScoreOutcome(index=index, error=failed)
    outcome = ScoreOutcome(index=index, call=call, flags=flags, panel=records)
    if first is not None:
        scores = first[0]
        outcome["value"] = float(scores[0])
        if samples > 1:
            outcome["samples"] = [float(score) for score in scores]
    return outcome


def panel_judgment(seat: Seat, samples: int) -> PanelJudgment:
    """One panel judge's judgment, its decision at its threshold and what it cost, or why it
    gave none."""
    settings = seat.settings
    threshold = settings.coherence_threshold
    if seat.judged is None:
        found = PanelJudgment(
            judge=settings.judge_model, score=None, threshold=threshold, passes=None
        )
        spent = seat.calls
        if seat.error is not None:
            found["error"] = seat.error
    else:
        scores, spent = seat.judged
        found = PanelJudgment(
            judge=settings.judge_model,
            score=float(scores[0]),
            threshold=threshold,
            passes=scores[0] > threshold,
        )
        if samples > 1:
            found["samples"] = [float(score) for score in scores]
    if spent is not None:
        found["cost_usd"] = spent.get("cost_usd")
        found["served_model"] = spent["served_model"]
        if spent.get("unreadable"):
            found["unreadable"] = dict(spent["unreadable"])
    return found
