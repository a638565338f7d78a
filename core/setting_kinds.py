"""Which settings decide a question's scores and which only decide how they are reached.

A question thread's identity is what its scores depend on (the model and its sampling, the
judge, the embedding model, the pass rule, the prompts): changing any of those mid-run would
mix two measurements, so a run refuses it. Everything else is operational (endpoints, key
variables, timeouts, retries, limits, caching, pauses): it may change between the sessions
of a run (an endpoint moves, a rate limit is lowered after 429s), each applying its own.
Every ``Settings`` field is in exactly one of the two sets; a test holds them to the
model's fields, so a new field cannot go unclassified.
"""

from __future__ import annotations

from typing import Any

from aidanbench.core.settings import Settings

SCORING_FIELDS: frozenset[str] = frozenset(
    {
        "model",
        "temperature",
        "model_kwargs",
        "variant_fields",
        "cot",
        "judge_model",
        "judge_panel",
        "judge_temperature",
        "judge_attempts",
        "embedding_model",
        "llm_novelty",
        "coherence_threshold",
        "novelty_threshold",
        "llm_novelty_threshold",
        "lexical_novelty",
        "lexical_novelty_threshold",
        "reward_mode",
        "max_answers",
    }
)
"""Fields that decide a thread's answers or scores: fixed for a model once it is in a run."""

OPERATIONAL_FIELDS: frozenset[str] = frozenset(
    {
        "base_url",
        "api_key_env",
        "judge_base_url",
        "judge_api_key_env",
        "embedding_base_url",
        "embedding_api_key_env",
        "pipeline",
        "request_timeout",
        "max_retries",
        "max_concurrency",
        "requests_per_minute",
        "cache_path",
        "interrupt_on_reject",
        "interrupt_every",
        "prices_path",
        "max_question_cost",
        "max_question_seconds",
        "judge_samples",
    }
)
"""Fields that decide only how the scores are reached: each session of a run sets its own.

``pipeline``: a look-ahead answer is discarded, never counted, when the current one fails,
so the chain is the same either way. The spending caps: a question they stop is continued,
not redone, when a later session raises them (a lower bound meanwhile). ``judge_samples``:
the first judgment decides, as the benchmark's one does; the others only measure noise."""

PER_THREAD_FIELDS: frozenset[str] = frozenset({"model", "temperature"})
"""Scoring fields that are part of a thread's key rather than of its model's record."""


def scoring_settings(settings: Settings) -> dict[str, Any]:
    """The scoring fields of ``settings`` as JSON values, a judge panel without its
    endpoints (``panel_record``), ``novelty_threshold`` resolved: a run started on the
    default and continued with the same number written out is the same measurement."""
    values = settings.model_dump(mode="json", include=set(SCORING_FIELDS - PER_THREAD_FIELDS))
    values["novelty_threshold"] = settings.resolved_novelty_threshold
    values["judge_panel"] = panel_record(settings)
    return values


def panel_record(settings: Settings) -> list[dict[str, Any]]:
    """What a judge panel measures with: each more judge and its threshold (where it is
    and its key are operational, as the first judge's are)."""
    return [
        {"model": seat.model, "coherence_threshold": seat.coherence_threshold}
        for seat in settings.judge_panel
    ]


def operational_settings(settings: Settings) -> dict[str, Any]:
    """The operational fields of ``settings`` as JSON values."""
    return settings.model_dump(mode="json", include=set(OPERATIONAL_FIELDS))
