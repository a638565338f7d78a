"""``judge``: the judge LLM's coherence and plausibility score (0-100) for the candidate."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext
from aidanbench.nodes.judging import ask_judge, neutralise
from aidanbench.nodes.prompts import render_coherence
from aidanbench.services import ServicesFactory
from aidanbench.services.errors import is_recoverable


async def judge(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Score the candidate's coherence; an unreadable or failed judge is recorded, not 0."""
    ctx = NodeContext(runtime, services)
    candidate = state["candidate"]
    assert candidate is not None and "answer" in candidate
    index = candidate["index"]
    shown, flags = neutralise(candidate["answer"])
    try:
        score, call = await ask_judge(
            ctx, render_coherence(state["question"], shown), "coherence_score"
        )
    except Exception as exc:
        if not is_recoverable(exc):
            raise
        return {"coherence_result": ScoreOutcome(index=index, error=ctx.failure("judge", exc))}
    return {
        "coherence_result": ScoreOutcome(index=index, value=float(score), call=call, flags=flags)
    }
