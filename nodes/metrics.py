"""The per-question metrics of the output schema, computed from the answer records."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from aidanbench.core.metric_names import environment_aliases
from aidanbench.core.scores import declared
from aidanbench.core.state import AnswerRecord


def chain_metrics(answers: Sequence[AnswerRecord], reward_mode: str = "count") -> dict[str, Any]:
    """Score, novelty sum and each declared score's mean over the valid answers that have it
    (None: none has; coherence is a panel's first judge's, unknown where it gave none),
    format adherence (over the answers whose reply was recorded), each also
    under the verifiers environment's name (``core.metric_names``); ``reward_mode`` chooses
    what ``reward`` is."""
    valid = [a for a in answers if a["valid"]]
    tagged = [a for a in answers if a["used_answer_tag"] is not None]
    metrics: dict[str, Any] = {
        "score": len(valid),
        "novelty_sum": float(sum(a["novelty"] for a in valid)),
    }
    for score in declared():
        values = [float(v) for a in valid if (v := a.get(score.name)) is not None]  # type: ignore[arg-type]
        metrics[score.mean] = fmean(values) if values else None
    metrics["format_adherence"] = (
        sum(1 for a in tagged if a["used_answer_tag"]) / len(tagged) if tagged else None
    )
    return {**metrics, **environment_aliases(metrics, reward_mode)}
