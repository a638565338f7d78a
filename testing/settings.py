"""Settings that point every role at one local OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

from aidanbench.core.settings import Settings

TEST_KEY_VARIABLE = "AIDANBENCH_TEST_KEY"
"""The variable the test and benchmark settings read their (fake) key from."""


def stub_flags(base_url: str) -> list[str]:
    """``aidanbench run`` flags pointing every role at ``base_url``: ``stub_settings`` as flags."""
    flags = []
    for role in ("", "judge-", "embedding-"):
        flags += [f"--{role}base-url", base_url, f"--{role}api-key-env", TEST_KEY_VARIABLE]
    return flags


def stub_settings(base_url: str, **overrides: Any) -> Settings:
    """Model, judge and embeddings all at ``base_url``, keyed by ``TEST_KEY_VARIABLE``, with
    distinct model names so request bodies show which role sent them."""
    fields: dict[str, Any] = {
        "model": "model-under-test",
        "base_url": base_url,
        "api_key_env": TEST_KEY_VARIABLE,
        "judge_model": "judge-model",
        "judge_base_url": base_url,
        "judge_api_key_env": TEST_KEY_VARIABLE,
        "embedding_model": "embedding-model",
        "embedding_base_url": base_url,
        "embedding_api_key_env": TEST_KEY_VARIABLE,
        "request_timeout": 10.0,
    }
    fields.update(overrides)
    return Settings.model_validate(fields)
