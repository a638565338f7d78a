"""``llm_novelty``: the judge rates similarity (0-100) to each earlier answer.

LLM novelty is 1 − max(similarity)/100. Each pair is judged at most once (scores are cached
by the rendered prompt, across restarts); a turn's pairs are asked concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, add_calls, candidate_answer, no_calls, scored
from aidanbench.nodes.generate import previous_answers
from aidanbench.nodes.judge_calls import ask_judge, neutralise
from aidanbench.nodes.novelty import llm_novelty as novelty_from_similarities
from aidanbench.nodes.prompts import render_similarity
from aidanbench.services import ServicesFactory, judge_namespace


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
    answer, index = candidate_answer(state)
    new, flags = neutralise(answer)
    prompts = [
        render_similarity(state["question"], new, neutralise(earlier)[0])
        for earlier in previous_answers(state)
    ]

    def novelty(scored_pairs: list[tuple[int, CallStats]]) -> ScoreOutcome:
        call = no_calls()
        for _, one in scored_pairs:
            call = add_calls(call, one)
        value = novelty_from_similarities([score for score, _ in scored_pairs])
        return ScoreOutcome(index=index, value=value, call=call, flags=flags)

    def ask() -> Awaitable[list[tuple[int, CallStats]]]:
        return asyncio.gather(*(_similarity(ctx, p) for p in prompts))

    return {"similarity_result": await scored(ctx, state, "llm_novelty", "judge", ask, novelty)}
