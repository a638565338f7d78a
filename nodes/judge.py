"""``judge``: the judge LLM's coherence and plausibility score (0-100) for the candidate.

With ``judge_samples`` K > 1 all K judgments are kept as ``samples``; the first is the score
(``judge_calls.sample_judgments``). With a judge panel (``judge_panel``) every judge scores
the candidate at once and is kept (``panel``); the first judge's is the score, and the
majority of their decisions at their own thresholds decides coherence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, PanelJudgment, QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, add_calls, candidate_answer, scored
from aidanbench.nodes.judge_calls import ask_judge, neutralise, sample_judgments
from aidanbench.nodes.prompts import render_coherence
from aidanbench.services import ServicesFactory

Judged = list[tuple[list[int], CallStats]]
"""Each judge's judgments of the candidate and what they cost."""


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

    def coherence(judged: Judged) -> ScoreOutcome:
        (scores, _), *_ = judged
        call = judged[0][1]
        for _, more in judged[1:]:
            call = add_calls(call, more)
        outcome = ScoreOutcome(index=index, value=float(scores[0]), call=call, flags=flags)
        if samples > 1:
            outcome["samples"] = [float(score) for score in scores]
        if len(judges) > 1:
            outcome["panel"] = [
                panel_judgment(seat, found, samples, seat_call)
                for seat, (found, seat_call) in zip(judges, judged, strict=True)
            ]
        return outcome

    def one(seat: Settings) -> Awaitable[tuple[list[int], CallStats]]:
        extra = None if seat is ctx.settings else seat
        return sample_judgments(lambda: ask_judge(ctx, prompt, "coherence_score", extra), samples)

    async def ask() -> Judged:
        if len(judges) == 1:  # no task to schedule: its request is queued before the look-ahead's
            return [await one(ctx.settings)]
        return list(await asyncio.gather(*(one(seat) for seat in judges)))

    return {"coherence_result": await scored(ctx, state, "coherence", "judge", ask, coherence)}


def panel_judgment(
    seat: Settings, scores: list[int], samples: int, call: CallStats
) -> PanelJudgment:
    """One panel judge's judgment, its decision at its threshold and what it cost."""
    found = PanelJudgment(
        judge=seat.judge_model,
        score=float(scores[0]),
        threshold=seat.coherence_threshold,
        passes=scores[0] > seat.coherence_threshold,
        cost_usd=call.get("cost_usd"),
    )
    if samples > 1:
        found["samples"] = [float(score) for score in scores]
    return found
