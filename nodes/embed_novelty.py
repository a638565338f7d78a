"""``embed_novelty``: 1 − max cosine similarity of the candidate to earlier valid answers.

Every vector comes from the score cache, so a restart embeds no earlier answer again; only
unseen texts are sent, batched with other questions' (``services.batching``), and only
usable vectors are cached (a bad one is this question's retryable error).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import CallStats, QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, candidate_answer, no_calls, scored, stopwatch
from aidanbench.nodes.generate import previous_answers
from aidanbench.nodes.novelty import cosine_novelty
from aidanbench.services import ServicesFactory


async def embed_texts(ctx: NodeContext, texts: list[str]) -> tuple[list[np.ndarray], CallStats]:
    """Vectors for ``texts`` (cached where possible) and what embedding them cost."""
    services = ctx.services
    model = services.embedding_namespace
    found = services.cache.vectors(model, texts)
    missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
    call = no_calls()
    if missing:
        with stopwatch() as elapsed:
            vectors = await services.embed(missing)
        services.cache.put_vectors(model, zip(missing, vectors, strict=True))
        call = CallStats(
            served_model=model, latency_s=elapsed(), input_tokens=None, output_tokens=None, calls=1
        )
        found = services.cache.vectors(model, texts)
    ready = [v for v in found if v is not None]
    if len(ready) != len(texts):
        raise RuntimeError("score cache lost vectors it was just given")
    return ready, call


async def embed_novelty(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Embedding novelty of the candidate against every earlier valid answer."""
    ctx = NodeContext(runtime, services)
    answer, index = candidate_answer(state)
    texts = [*previous_answers(state), answer]

    def novelty(found: tuple[list[np.ndarray], CallStats]) -> ScoreOutcome:
        vectors, call = found
        value = cosine_novelty(vectors[-1], vectors[:-1])
        return ScoreOutcome(index=index, value=value, call=call)

    outcome = await scored(
        ctx, state, "novelty", "embeddings", lambda: embed_texts(ctx, texts), novelty
    )
    return {"novelty_result": outcome}
