"""The pass rule at, just above and just below each threshold: strictly greater passes."""

from __future__ import annotations

import pytest

from aidanbench.core.settings import Settings
from aidanbench.core.thresholds import Thresholds

EPS = 1e-9
RULE = Thresholds(coherence=15.0, novelty=0.15, llm_novelty=0.15)


def verdict(
    rule: Thresholds, coherence: float, novelty: float, llm: float | None = None
) -> str | None:
    return rule.failure({"coherence": coherence, "novelty": novelty, "llm_novelty": llm})


@pytest.mark.parametrize(
    ("coherence", "expected"),
    [
        (15.0, "coherence"),
        (15.0 - EPS, "coherence"),
        (15.0 + EPS, None),
        (16.0, None),
        (0, "coherence"),
    ],
)
def test_coherence_boundary(coherence: float, expected: str | None) -> None:
    assert verdict(RULE, coherence, 0.5, 0.5) == expected


@pytest.mark.parametrize(
    ("novelty", "expected"),
    [(0.15, "novelty"), (0.15 - EPS, "novelty"), (0.15 + EPS, None), (0.0, "novelty")],
)
def test_novelty_boundary(novelty: float, expected: str | None) -> None:
    assert verdict(RULE, 50, novelty, 0.5) == expected


@pytest.mark.parametrize(
    ("llm", "expected"),
    [(0.15, "llm_novelty"), (0.15 - EPS, "llm_novelty"), (0.15 + EPS, None)],
)
def test_llm_novelty_boundary(llm: float, expected: str | None) -> None:
    assert verdict(RULE, 50, 0.5, llm) == expected


def test_coherence_is_reported_first() -> None:
    assert verdict(RULE, 10, 0.0, 0.0) == "coherence"
    assert verdict(RULE, 50, 0.1, 0.0) == "novelty"


def test_llm_novelty_ignored_when_off() -> None:
    assert verdict(Thresholds(), 50, 0.5, None) is None
    assert verdict(Thresholds(), 50, 0.5, 0.0) is None


def test_llm_novelty_required_when_on() -> None:
    with pytest.raises(ValueError):
        verdict(RULE, 50, 0.5, None)


def test_settings_thresholds() -> None:
    assert Settings().thresholds == Thresholds(coherence=15.0, novelty=0.15, llm_novelty=None)
    on = Settings(llm_novelty=True, coherence_threshold=20, novelty_threshold=0.3)
    assert on.thresholds == Thresholds(coherence=20.0, novelty=0.3, llm_novelty=0.15)


@pytest.mark.parametrize(
    "bad",
    [
        {"coherence_threshold": 101},
        {"novelty_threshold": -0.1},
        {"llm_novelty_threshold": 2},
        {"max_answers": 0},
        {"base_url": "localhost:8000"},
        {"unknown": 1},
    ],
)
def test_invalid_settings_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Settings(**bad)  # type: ignore[arg-type]


def test_thresholds_default_to_the_benchmark() -> None:
    assert Thresholds() == Thresholds(coherence=15.0, novelty=0.15, llm_novelty=None)
    assert verdict(Thresholds(), 15.5, 0.16) is None
    assert verdict(Thresholds(), 15.0, 0.16) == "coherence"
    assert verdict(Thresholds(), 16.0, 0.15) == "novelty"


def test_llm_novelty_is_checked_after_the_others_and_must_be_given() -> None:
    rule = Thresholds(llm_novelty=0.2)
    assert verdict(rule, 50, 0.5, 0.2) == "llm_novelty"
    assert verdict(rule, 50, 0.5, 0.21) is None
    assert verdict(rule, 50, 0.1, 0.0) == "novelty"
    with pytest.raises(ValueError) as caught:
        verdict(rule, 50, 0.5)
    assert str(caught.value) == "LLM novelty is on but the answer has no LLM novelty score"
