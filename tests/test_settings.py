"""Settings refuse credentials: in a base URL (anywhere in it) and in ``model_kwargs``,
for every caller that builds them (the command line, Studio, the server, Python)."""

from __future__ import annotations

import pytest

from aidanbench.core.settings import Settings


@pytest.mark.parametrize("field", ["base_url", "judge_base_url", "embedding_base_url"])
@pytest.mark.parametrize("url", ["https://user:sk-secret@host/v1", "https://sk-secret@host/v1"])
def test_base_urls_with_credentials_are_refused(field: str, url: str) -> None:
    with pytest.raises(ValueError, match="must not carry credentials"):
        Settings(**{field: url})  # type: ignore[arg-type]


CANARY = "sk-canary0123456789ABCDEFabcdef"


@pytest.mark.parametrize("field", ["base_url", "judge_base_url", "embedding_base_url"])
@pytest.mark.parametrize(
    "url",
    [
        f"https://host/v1?api_key={CANARY}",
        f"https://host/v1?region=eu&x={CANARY}",
        f"https://host/{CANARY}/v1",
        f"https://host/v1#{CANARY}",
    ],
)
def test_settings_refuse_credentials_anywhere_in_a_base_url(field: str, url: str) -> None:
    """Settings, not only the command line, refuse them: Studio, the server and Python
    callers build Settings directly, and a base URL is stored and logged."""
    with pytest.raises(ValueError, match="must not carry credentials") as caught:
        Settings(**{field: url})  # type: ignore[arg-type]
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize(
    "kwargs",
    [{"api_key": CANARY}, {"extra_headers": {"Authorization": "x"}}, {"user": CANARY}],
)
def test_settings_refuse_credentials_in_model_kwargs(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must not carry credentials") as caught:
        Settings(model_kwargs=kwargs)
    assert CANARY not in str(caught.value)


def test_ordinary_model_kwargs_and_urls_pass() -> None:
    settings = Settings(
        base_url="https://openrouter.ai/api/v1?region=eu",
        model_kwargs={"max_tokens": 512, "provider": {"order": ["deepinfra"]}, "author": "x"},
    )
    assert settings.model_kwargs["max_tokens"] == 512
