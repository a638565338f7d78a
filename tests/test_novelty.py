"""Cosine novelty and LLM novelty on hand-built values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aidanbench.nodes.novelty import cosine_novelty, llm_novelty


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
