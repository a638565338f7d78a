"""The verifiers ``aidanbench`` environment's metric names, as aliases of ours.

Every output that carries our metrics (the question graph's output, ``questions.jsonl``,
``report --json``) carries the names that environment's users read beside them, each
holding exactly the value of the metric it aliases. Kept apart from the graph's modules so
the analysis code can use it without loading LangGraph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENVIRONMENT_NAMES = {
    "format_reward": "format_adherence",
    "avg_coherence": "mean_coherence",
    "avg_embedding_novelty": "mean_novelty",
    "sum_embedding_novelty": "novelty_sum",
    "avg_llm_novelty": "mean_llm_novelty",
}
"""The environment's metric name → ours (``reward`` depends on the reward mode)."""

REWARD_OF = {"count": "score", "novelty_sum": "novelty_sum"}
"""Reward mode → the metric that ``reward`` aliases, as the environment's rubric weights
choose."""

ENVIRONMENT_METRICS = ("reward", *ENVIRONMENT_NAMES)
"""Every environment metric name, in the environment's order."""

RUBRIC = {"aidanbench_score": "score", **ENVIRONMENT_NAMES}
"""The verifiers environments' rubric: each metric's name → ours, which it reads."""

RUBRIC_REWARD = {"count": "aidanbench_score", "novelty_sum": "sum_embedding_novelty"}
"""Reward mode → the rubric's metric that is the reward."""


def environment_aliases(metrics: Mapping[str, Any], reward_mode: str = "count") -> dict[str, Any]:
    """The environment's names for ``metrics`` (ours), each holding the same value."""
    if reward_mode not in REWARD_OF:
        raise ValueError(f"reward_mode must be count or novelty_sum, got {reward_mode!r}")
    return {
        "reward": metrics.get(REWARD_OF[reward_mode]),
        **{env: metrics.get(ours) for env, ours in ENVIRONMENT_NAMES.items()},
    }
