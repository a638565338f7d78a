"""The per-question metrics of the output schema, computed from the answer records."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from aidanbench.core.metric_names import environment_aliases
from aidanbench.core.state import AnswerRecord


def chain_metrics(answers: Sequence[AnswerRecord], reward_mode: str = "count") -> dict[str, Any]:
    """Score, novelty sum and means over valid answers (coherence over those a panel's first
    judge scored: ``AnswerRecord.coherence``), format adherence (over the answers
    whose reply was recorded), each also under the verifiers environment's name
    (``core.metric_names``); ``reward_mode`` chooses what ``reward`` is."""
    valid = [a for a in answers if a["valid"]]
    tagged = [a for a in answers if a["used_answer_tag"] is not None]
    llm = [a["llm_novelty"] for a in valid if a["llm_novelty"] is not None]
    coherence = [a["coherence"] for a in valid if a["coherence"] is not None]
    metrics = {
        "score": len(valid),
        "novelty_sum": float(sum(a["novelty"] for a in valid)),
        "mean_coherence": fmean(coherence) if coherence else None,
        "mean_novelty": fmean(a["novelty"] for a in valid) if valid else None,
        "mean_llm_novelty": fmean(llm) if llm else None,
        "format_adherence": (
            sum(1 for a in tagged if a["used_answer_tag"]) / len(tagged) if tagged else None
        ),
    }
    return {**metrics, **environment_aliases(metrics, reward_mode)}
