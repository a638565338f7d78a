"""Cosine novelty and LLM novelty on hand-built values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aidanbench.nodes.novelty import cosine_novelty, llm_novelty, unit


def test_first_answer_is_fully_novel() -> None:
    assert cosine_novelty([1.0, 2.0], []) == 1.0


def test_identical_direction_has_no_novelty() -> None:
    assert cosine_novelty([2.0, 0.0], [[1.0, 0.0]]) == pytest.approx(0.0)


def test_orthogonal_is_fully_novel() -> None:
    assert cosine_novelty([0.0, 3.0], [[1.0, 0.0]]) == pytest.approx(1.0)


def test_max_similarity_over_all_previous() -> None:
    angle = math.radians(60)
    new = [math.cos(angle), math.sin(angle)]
    previous = [[0.0, -1.0], [1.0, 0.0], [-1.0, 0.0]]
    assert cosine_novelty(new, previous) == pytest.approx(1 - math.cos(angle))


def test_opposite_direction_scores_above_one() -> None:
    assert cosine_novelty([-1.0, 0.0], [[1.0, 0.0]]) == pytest.approx(2.0)


def test_unnormalised_vectors() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(8), rng.standard_normal(8)
    expected = 1 - float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert cosine_novelty(a * 7, [b * 0.1]) == pytest.approx(expected)


def test_zero_vector_is_an_error() -> None:
    with pytest.raises(ValueError):
        cosine_novelty([0.0, 0.0], [[1.0, 0.0]])


def test_llm_novelty() -> None:
    assert llm_novelty([]) == 1.0
    assert llm_novelty([10, 85, 40]) == pytest.approx(0.15)
    assert llm_novelty([100]) == 0.0


def test_unit_scales_to_length_one_and_refuses_bad_vectors() -> None:
    assert unit([3.0, 4.0]).tolist() == [0.6, 0.8]
    for bad in ([0.0, 0.0], [math.inf, 1.0], [math.nan, 1.0]):
        with pytest.raises(ValueError) as caught:
            unit(bad)
        assert str(caught.value) == "embedding has zero or non-finite length"


def test_vectors_are_computed_in_double_precision() -> None:
    """A float32 vector of 1e-30 has a float32 norm of 0 (its square underflows)."""
    tiny = np.array([1e-30, 0.0], dtype=np.float32)
    assert unit(tiny).tolist() == [1.0, 0.0]
    assert unit(np.array([3, 4], dtype=np.float32)).dtype == np.float64
    assert cosine_novelty([1.0, 0.0], [tiny]) == pytest.approx(0.0)
    assert cosine_novelty(tiny, [np.array([0.0, 1e-30], dtype=np.float32)]) == 1.0


def test_previous_vectors_of_zero_or_non_finite_length_are_errors() -> None:
    for bad in ([0.0, 0.0], [math.inf, 0.0], [math.nan, 0.0]):
        with pytest.raises(ValueError) as caught:
            cosine_novelty([1.0, 0.0], [[1.0, 1.0], bad])
        assert str(caught.value) == "embedding has zero or non-finite length"


def test_novelty_uses_the_most_similar_earlier_answer_exactly() -> None:
    previous = [np.array([0.0, 2.0]), np.array([3.0, 4.0])]
    assert cosine_novelty(np.array([1.0, 0.0]), previous) == pytest.approx(1 - 0.6, abs=1e-12)
    assert isinstance(cosine_novelty([1.0, 0.0], previous), float)


def test_llm_novelty_of_each_score() -> None:
    assert llm_novelty([]) == 1.0
    assert llm_novelty([0]) == 1.0
    assert llm_novelty([40, 85, 10]) == pytest.approx(0.15)
    assert llm_novelty([100]) == 0.0
