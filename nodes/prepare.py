"""``prepare``: the first step of every invocation of a question thread.

On a new thread it notes the start time and fills every output key (an empty chain's
metrics), so callers always get the whole output schema. On a thread that stopped with
an error it clears the error and every failed outcome, keeping whatever succeeded, so
routing re-runs only the failed parts: a finished judge or embedding result is not
recomputed. On a thread that finished by the benchmark's rule it changes nothing, and
routing ends at once.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.graph.settings import Settings
from aidanbench.graph.state import QuestionState
from aidanbench.nodes.context import settings_of
from aidanbench.nodes.metrics import chain_metrics

ERROR_KINDS = frozenset({"error", "judge_error"})
"""Stop reasons after which invoking the thread again retries."""

OUTCOME_KEYS = ("candidate", "lookahead", "coherence_result", "novelty_result", "similarity_result")


async def prepare(state: QuestionState, runtime: Runtime[Settings]) -> dict[str, Any]:
    """Start a new question or clear a recorded error so the thread can go on."""
    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty string, got {question!r}")
    update: dict[str, Any] = {}
    if state.get("started_at") is None:
        update |= {"started_at": time.time(), "stop_reason": None, "error": None}
        update |= {"speculative": None, **chain_metrics([], settings_of(runtime).reward_mode)}
    if state.get("stop_reason") in ERROR_KINDS:
        update |= {"stop_reason": None, "error": None}
        for key in OUTCOME_KEYS:
            outcome = state.get(key)
            if isinstance(outcome, dict) and "error" in outcome:
                update[key] = None
    return update
