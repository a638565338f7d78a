"""Golden test: replaying the published reference run reproduces its scores exactly.

Every recorded chain is replayed through the real HTTP path (langchain-openai clients
against the local server): the model answers the recorded texts, the judge gives the
recorded coherence, and embeddings are built to give the recorded dissimilarities.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aidanbench.record.results import read_aidanbench_file
from aidanbench.services import default_services
from aidanbench.testing import OpenAIStub
from aidanbench.testing.replay import ReplayBrain

from .builders import REFERENCE_SCORES
from .graphs import run_question
from .test_http import stub_settings

PUBLISHED = REFERENCE_SCORES
"""Each model's published per-question scores (the reference README's)."""

LONGEST = {"anthropic/claude-3.5-sonnet", "gpt-4-turbo", "openai/gpt-4o-mini-2024-07-18"}
"""The models with the most answers (421, 224 and 275): their replays are end-to-end."""


@pytest.mark.parametrize(
    "model",
    [pytest.param(m, marks=pytest.mark.e2e) if m in LONGEST else m for m in sorted(PUBLISHED)],
)
async def test_reference_run_replays_to_published_scores(
    model: str, reference_run: Path, api_key: str
) -> None:
    chains = [q for q in read_aidanbench_file(reference_run) if q.model == model]
    with OpenAIStub(ReplayBrain(chains)) as stub:
        settings = stub_settings(stub, model=model, max_concurrency=64)
        outs = await asyncio.gather(
            *(run_question(default_services, c.question, settings) for c in chains)
        )
    scores = [out["score"] for out in outs]
    assert scores == PUBLISHED[model], [(out["stop_reason"], out.get("error")) for out in outs]
    assert sum(scores) == sum(PUBLISHED[model])
    for chain, out in zip(chains, outs, strict=True):
        assert len(out["answers"]) == len(chain.answers)
        seen: set[str] = set()
        for row, record in zip(chain.answers, out["answers"], strict=True):
            assert record["answer"] == row.answer
            if row.answer not in seen:  # a repeated text was judged twice, differently
                assert record["coherence"] == row.coherence
            seen.add(row.answer)
            assert record["novelty"] == pytest.approx(row.novelty, abs=1e-6)
        assert out["answers"][-1]["valid"] is False
        assert out["stop_reason"] in {"coherence", "novelty"}


def test_published_totals() -> None:
    totals = {m: sum(s) for m, s in PUBLISHED.items()}
    assert totals == {
        "anthropic/claude-3.5-sonnet": 421,
        "google/gemini-flash-1.5-8b": 45,
        "gpt-4-turbo": 224,
        "meta-llama/llama-3.1-70b-instruct": 147,
        "openai/gpt-4o-mini-2024-07-18": 275,
    }
