"""``judge``: the judge LLM's coherence and plausibility score (0-100) for the candidate.

With ``judge_samples`` K > 1 the judge is asked K times; the first judgment is the score
(the benchmark's definition: one judgment decides) and all K are kept as ``samples``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, candidate_answer, scored
from aidanbench.nodes.judge_calls import ask_judge, neutralise, sample_judgments
from aidanbench.nodes.prompts import render_coherence
from aidanbench.services import ServicesFactory


async def judge(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Score the candidate's coherence; an unreadable or failed judge is recorded, not 0."""
    ctx = NodeContext(runtime, services)
    answer, index = candidate_answer(state)
    shown, flags = neutralise(answer)
    prompt = render_coherence(state["question"], shown)
    samples = ctx.settings.judge_samples

    def coherence(judged: tuple[list[int], CallStats]) -> ScoreOutcome:
        scores, call = judged
        outcome = ScoreOutcome(index=index, value=float(scores[0]), call=call, flags=flags)
        if samples > 1:
            outcome["samples"] = [float(score) for score in scores]
        return outcome

    def ask() -> Awaitable[tuple[list[int], CallStats]]:
        return sample_judgments(lambda: ask_judge(ctx, prompt, "coherence_score"), samples)

    return {"coherence_result": await scored(ctx, state, "coherence", "judge", ask, coherence)}
