"""How a question's result becomes verifiers rewards and metrics: the graph computes the benchmark's
numbers (``nodes.metrics``), named here as the community environment's users read them. A metric
without a value (no valid answer to average, LLM novelty off) is left out, never a made-up 0."""

from __future__ import annotations

from typing import Any, Literal

from aidanbench.core.metric_names import RUBRIC_REWARD, rubric
from aidanbench.core.state import QuestionOutput

RewardMode = Literal["count", "novelty_sum"]

INFO_KEY = "aidanbench"
"""Key of the question's result (answers, scores, stop reason) in the trace's ``info``."""


def summary(out: QuestionOutput | dict[str, Any], reward_mode: RewardMode) -> dict[str, Any]:
    """The question's result as kept on the trace (JSON-ready): answers, scores, stop, metrics,
    mode."""
    keys = ("stop_reason", *rubric().values())
    return {
        "reward_mode": reward_mode,
        **{key: out.get(key) for key in keys},
        "answers": [dict(record) for record in out.get("answers", [])],
    }


def rewards(result: dict[str, Any]) -> dict[str, float]:
    """The reward of the result's mode, by name."""
    name = RUBRIC_REWARD[result["reward_mode"]]
    return {name: float(result[rubric()[name]])}


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Every metric the result has a value for."""
    return {
        name: float(value) for name, key in rubric().items() if (value := result[key]) is not None
    }
