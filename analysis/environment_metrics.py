"""A question line's metrics under our names and the verifiers environment's.

``report --json`` gives each question line (one rollout, in the environment's words) its
metrics under both names, and each run the mean of every environment metric over its
lines: the figure ``vf-eval`` prints as that metric's average over rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from aidanbench.core.metric_names import ENVIRONMENT_METRICS, environment_aliases
from aidanbench.record.results import QuestionResult


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def line_metrics(result: QuestionResult, reward_mode: str = "count") -> dict[str, Any]:
    """The line's metrics as the question graph computes them, with the environment's names.

    Means are over valid answers; format adherence over answers whose tag use was
    recorded (None for results files in the original schema, which do not record it).
    """
    valid = [a for a in result.answers if a.valid]
    tags = [float(a.used_answer_tag) for a in result.answers if a.used_answer_tag is not None]
    ours = {
        "score": result.score,
        "novelty_sum": result.novelty_sum,
        "mean_coherence": _mean([a.coherence for a in valid if a.coherence is not None]),
        "mean_novelty": _mean([a.novelty for a in valid if a.novelty is not None]),
        "mean_llm_novelty": _mean([a.llm_novelty for a in valid if a.llm_novelty is not None]),
        "format_adherence": _mean(tags),
    }
    return {**ours, **environment_aliases(ours, reward_mode)}


def rollout_means(results: Sequence[QuestionResult], reward_mode: str = "count") -> dict[str, Any]:
    """Each environment metric's mean over question lines (lines where it is None left out)."""
    lines = [line_metrics(r, reward_mode) for r in results]
    return {
        name: _mean([line[name] for line in lines if line[name] is not None])
        for name in ENVIRONMENT_METRICS
    }
