"""A question line's metrics under our names and the verifiers environment's.

``report --json`` gives each question line (one rollout, in the environment's words) its
metrics under both names, and each run the mean of every environment metric over its
lines: the figure ``vf-eval`` prints as that metric's average over rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from statistics import fmean
from typing import Any

from aidanbench.core.metric_names import environment_aliases, environment_metrics
from aidanbench.core.scores import Score, declared
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult, measured_scores


def _mean(
    values: Sequence[float], average: Callable[[Sequence[float]], Any] = fmean
) -> float | None:
    return float(average(values)) if values else None


def answer_means(
    answers: Iterable[AnswerLine],
    scores: Iterable[Score],
    average: Callable[[Sequence[float]], Any] = fmean,
) -> dict[str, float | None]:
    """``mean_<score>`` of each of ``scores`` over the valid answers, and ``format_adherence``
    over the answers that recorded tag use: a line's figures and a run's alike. ``average`` is
    the summary's ``numpy.mean`` (pairwise summation, whose last digits its JSON carries)."""
    answers = list(answers)
    valid = [a for a in answers if a.valid]
    means = {
        score.mean: _mean([v for a in valid if (v := score.value(a)) is not None], average)
        for score in scores
    }
    tags = [float(a.used_answer_tag) for a in answers if a.used_answer_tag is not None]
    return {**means, "format_adherence": _mean(tags, average)}


def line_metrics(result: QuestionResult, reward_mode: str = "count") -> dict[str, Any]:
    """The line's metrics as the question graph computes them, with the environment's names:
    a score the line did not measure has neither (``measured_scores``)."""
    measured = measured_scores([result])
    ours = {
        "score": result.score,
        "novelty_sum": result.novelty_sum,
        **answer_means(result.answers, measured),
    }
    unmeasured = {s.metric for s in declared() if s not in measured}
    aliases = environment_aliases(ours, reward_mode).items()
    return {**ours, **{name: value for name, value in aliases if name not in unmeasured}}


def rollout_means(results: Sequence[QuestionResult], reward_mode: str = "count") -> dict[str, Any]:
    """Each environment metric's mean over question lines (lines where it is None left out)."""
    lines = [line_metrics(r, reward_mode) for r in results]
    return {
        name: _mean([line[name] for line in lines if line.get(name) is not None])
        for name in environment_metrics()
        if any(name in line for line in lines) or not lines
    }
