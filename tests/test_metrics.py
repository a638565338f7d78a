"""A chain's metrics (``nodes.metrics``): averages over valid answers, exactly."""

from __future__ import annotations

import pytest

from aidanbench.core.metric_names import environment_aliases
from aidanbench.nodes.metrics import chain_metrics

from .states import record


def test_chain_metrics_of_an_empty_chain() -> None:
    ours = {
        "score": 0,
        "novelty_sum": 0.0,
        "mean_coherence": None,
        "mean_novelty": None,
        "mean_llm_novelty": None,
        "mean_lexical_novelty": None,
        "format_adherence": None,
    }
    assert chain_metrics([]) == ours | environment_aliases(ours)


def test_chain_metrics_average_valid_answers_only() -> None:
    answers = [
        record(1, coherence=60.0, novelty=1.0, llm_novelty=0.9),
        record(2, coherence=90.0, novelty=0.5, llm_novelty=None, used_answer_tag=False),
        record(3, valid=False, coherence=10.0, novelty=0.05, llm_novelty=0.1),
    ]
    metrics = chain_metrics(answers)
    ours = {
        "score": 2,
        "novelty_sum": 1.5,
        "mean_coherence": 75.0,
        "mean_novelty": 0.75,
        "mean_llm_novelty": 0.9,
        "mean_lexical_novelty": None,
        "format_adherence": pytest.approx(2 / 3),
    }
    assert metrics == ours | environment_aliases(ours)
    assert isinstance(metrics["novelty_sum"], float)


def test_chain_metrics_with_only_an_invalid_answer() -> None:
    metrics = chain_metrics([record(1, valid=False, used_answer_tag=False)])
    assert metrics["score"] == 0 and metrics["novelty_sum"] == 0.0
    assert metrics["mean_coherence"] is None and metrics["mean_novelty"] is None
    assert metrics["format_adherence"] == 0.0
