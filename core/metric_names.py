"""The verifiers ``aidanbench`` environment's metric names, as aliases of ours.

Every output that carries our metrics (the question graph's output, ``questions.jsonl``,
``report --json``) carries the names that environment's users read beside them, each
holding exactly the value of the metric it aliases. Kept apart from the graph's modules so
the analysis code can use it without loading LangGraph.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from aidanbench.core.scores import Score, declared

ENVIRONMENT_NAMES = {
    "format_reward": "format_adherence",
    "avg_coherence": "mean_coherence",
    "avg_embedding_novelty": "mean_novelty",
    "sum_embedding_novelty": "novelty_sum",
    "avg_llm_novelty": "mean_llm_novelty",
}
"""The environment's published metric names → ours (``reward`` depends on the reward mode),
in its order."""


def environment_names() -> dict[str, str]:
    """Every environment metric name → ours: the published ones, then the mean of each
    score declared since (``Score.metric``), so a new score is a metric of both
    environments without a name written here."""
    return _names(declared())


@cache
def _names(scores: tuple[Score, ...]) -> dict[str, str]:
    ours = set(ENVIRONMENT_NAMES.values())
    added = {score.metric: score.mean for score in scores if score.mean not in ours}
    return {**ENVIRONMENT_NAMES, **added}


REWARD_OF = {"count": "score", "novelty_sum": "novelty_sum"}
"""Reward mode → the metric that ``reward`` aliases, as the environment's rubric weights
choose."""


def environment_metrics() -> tuple[str, ...]:
    """Every environment metric name, in the environment's order."""
    return ("reward", *environment_names())


def rubric() -> dict[str, str]:
    """The verifiers environments' rubric: each metric's name → ours, which it reads."""
    return {"aidanbench_score": "score", **environment_names()}


def metrics_off(settings: Any) -> set[str]:
    """The environment metrics of the scores ``settings`` switch off: never reported."""
    return {score.metric for score in declared() if not score.on(settings)}


RUBRIC_REWARD = {"count": "aidanbench_score", "novelty_sum": "sum_embedding_novelty"}
"""Reward mode → the rubric's metric that is the reward."""


def environment_aliases(metrics: Mapping[str, Any], reward_mode: str = "count") -> dict[str, Any]:
    """The environment's names for ``metrics`` (ours), each holding the same value."""
    if reward_mode not in REWARD_OF:
        raise ValueError(f"reward_mode must be count or novelty_sum, got {reward_mode!r}")
    return {
        "reward": metrics.get(REWARD_OF[reward_mode]),
        **{env: metrics.get(ours) for env, ours in environment_names().items()},
    }
