"""Embedding novelty: 1 − the largest cosine similarity to any earlier answer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike


def unit(vector: ArrayLike) -> np.ndarray:
    """The vector scaled to length one; a zero vector is an error, not a novelty."""
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("embedding has zero or non-finite length")
    return v / norm


def cosine_novelty(vector: ArrayLike, previous: Sequence[ArrayLike]) -> float:
    """Cosine novelty of ``vector`` (need not be normalised) against ``previous``, as the
    benchmark computes it: 1.0 when there is nothing before it."""
    if len(previous) == 0:
        return 1.0
    new = unit(vector)
    earlier = np.asarray(np.stack(previous), dtype=np.float64)
    norms = np.linalg.norm(earlier, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0.0):
        raise ValueError("embedding has zero or non-finite length")
    return float(1.0 - float(np.max((earlier @ new) / norms)))


def llm_novelty(similarities: Sequence[int]) -> float:
    """LLM novelty from judge similarity scores (0-100): 1 − max/100, 1.0 with none."""
    if not similarities:
        return 1.0
    return 1.0 - max(similarities) / 100.0
