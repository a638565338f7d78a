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


def seed_settings(args: BaseModel, thresholds: BaseModel, model: str, **labels: Any) -> Settings:
    """The run settings ``args`` and its ``thresholds`` (an environment's arguments, by
    the seed's names) choose for ``model``, with ``labels`` (settings that only label the
    results).

    Pipelining is off: the next answer is asked for only once the current one has
    passed, so the policy is never sampled on a prompt whose answer is then thrown away
    (and a verifiers interaction is never asked for two turns at once).
    """
    seed = args.model_dump()
    limits = thresholds.model_dump()
    return Settings(
        model=model,
        **labels,
        reward_mode=seed["reward_mode"],
        judge_model=seed["judge_model"],
        judge_base_url=seed["judge_api_base_url"],
        judge_api_key_env=seed["judge_api_key_var"],
        embedding_model=seed["embedding_model"],
        embedding_base_url=seed["embedding_api_base_url"],
        embedding_api_key_env=seed["embedding_api_key_var"],
        llm_novelty=seed["use_llm_similarity"],
        coherence_threshold=limits["coherence_score"],
        novelty_threshold=limits["embedding_dissimilarity_score"],
        llm_novelty_threshold=limits["llm_dissimilarity_score"],
        max_answers=seed["max_answers"],
        cot=seed["cot"],
        cache_path=seed["cache_path"],
        pipeline=False,
    )
