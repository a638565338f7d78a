"""``judge``: the judge LLM's coherence and plausibility score (0-100) for the candidate.

With ``judge_samples`` K > 1 the judge is asked K times; the first judgment is the score
(the benchmark's definition: one judgment decides) and all K are kept as ``samples``.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext
from aidanbench.nodes.judge_calls import ask_judge, neutralise, sample_judgments
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
    prompt = render_coherence(state["question"], shown)
    samples = ctx.settings.judge_samples
    try:
        scores, call = await sample_judgments(
            lambda: ask_judge(ctx, prompt, "coherence_score"), samples
        )
    except Exception as exc:
        if not is_recoverable(exc):
            raise
        return {"coherence_result": ScoreOutcome(index=index, error=ctx.failure("judge", exc))}
    outcome = ScoreOutcome(index=index, value=float(scores[0]), call=call, flags=flags)
    if samples > 1:
        outcome["samples"] = [float(score) for score in scores]
    return {"coherence_result": outcome}
