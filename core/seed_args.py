"""The verifiers ``aidanbench`` environment's arguments, as the run settings they choose.

The seed's users set the judge, the embeddings and the pass rule with the environment's
own names (``judge_api_base_url``, ``thresholds.coherence_score``…). Both verifiers
environments accept exactly those names (``aidanbench.verifiers_env``'s taskset on the
current verifiers, ``aidanbench.verifiers_seed``'s ``-a`` on verifiers 0.1), and both
turn them into settings here, so one name means one setting in each.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from aidanbench.core.settings import Settings

OPTION_KEYS = {
    "reward_mode": "reward_mode",
    "judge_model": "judge_model",
    "judge_api_base_url": "judge_base_url",
    "judge_api_key_var": "judge_api_key_env",
    "embedding_model": "embedding_model",
    "embedding_api_base_url": "embedding_base_url",
    "embedding_api_key_var": "embedding_api_key_env",
    "use_llm_similarity": "llm_novelty",
    "max_answers": "max_answers",
    "cot": "cot",
    "cache_path": "cache_path",
}
"""Argument → the setting it is, one to one."""

THRESHOLD_KEYS = {
    "coherence_score": "coherence_threshold",
    "embedding_dissimilarity_score": "novelty_threshold",
    "llm_dissimilarity_score": "llm_novelty_threshold",
}
"""``thresholds`` key → the setting it is."""


def seed_settings(args: BaseModel, thresholds: BaseModel, model: str, **labels: Any) -> Settings:
    """The run settings ``args`` and its ``thresholds`` (an environment's arguments, by
    the names above) choose for ``model``, with ``labels`` (settings that only label the
    results).

    Pipelining is off: the next answer is asked for only once the current one has
    passed, so the policy is never sampled on a prompt whose answer is then thrown away
    (and a verifiers interaction is never asked for two turns at once).
    """
    return Settings(
        model=model,
        **labels,
        **{ours: getattr(args, key) for key, ours in OPTION_KEYS.items()},
        **{ours: getattr(thresholds, key) for key, ours in THRESHOLD_KEYS.items()},
        pipeline=False,
    )
