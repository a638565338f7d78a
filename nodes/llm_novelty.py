"""``llm_novelty``: the judge rates similarity (0-100) to each earlier answer.

LLM novelty is 1 − max(similarity)/100. Each (answer, earlier answer) pair is judged at
most once: scores are cached by the rendered prompt, across restarts. The pairs of one
turn are asked concurrently, bounded by the judge endpoint's limiter.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, add_calls, no_calls
from aidanbench.nodes.generate import previous_answers
from aidanbench.nodes.judge_calls import ask_judge, neutralise
from aidanbench.nodes.novelty import llm_novelty as novelty_from_similarities
from aidanbench.nodes.prompts import render_similarity
from aidanbench.services import ServicesFactory, judge_namespace
from aidanbench.services.errors import is_recoverable


async def _similarity(ctx: NodeContext, prompt: str) -> tuple[int, CallStats]:
    cache, judge_model = ctx.services.cache, judge_namespace(ctx.settings)
    cached = cache.similarity(judge_model, prompt)
    if cached is not None:
        return cached, no_calls()
    score, call = await ask_judge(ctx, prompt, "similarity_score")
    cache.put_similarity(judge_model, prompt, score)
    return score, call


async def llm_novelty(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """LLM novelty of the candidate against every earlier valid answer."""
    ctx = NodeContext(runtime, services)
    candidate = state["candidate"]
    assert candidate is not None and "answer" in candidate
    index = candidate["index"]
    new, flags = neutralise(candidate["answer"])
    prompts = [
        render_similarity(state["question"], new, neutralise(earlier)[0])
        for earlier in previous_answers(state)
    ]
    try:
        scored = await asyncio.gather(*(_similarity(ctx, p) for p in prompts))
    except Exception as exc:
        if not is_recoverable(exc):
            raise
        return {"similarity_result": ScoreOutcome(index=index, error=ctx.failure("judge", exc))}
    call = no_calls()
    for _, one in scored:
        call = add_calls(call, one)
    value = novelty_from_similarities([score for score, _ in scored])
    return {"similarity_result": ScoreOutcome(index=index, value=value, call=call, flags=flags)}
