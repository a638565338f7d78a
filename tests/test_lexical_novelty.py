"""Lexical novelty: its definition at the edges, its threshold's boundary, and the published
chains replayed with it on, every recorded value checked against a computation written here
from the definition alone (docs/results.md, "Lexical novelty")."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from aidanbench.core.settings import Settings
from aidanbench.core.thresholds import Thresholds
from aidanbench.nodes.lexical_novelty import lexical_novelty_of
from aidanbench.record.results import read_aidanbench_file
from aidanbench.services import default_services
from aidanbench.testing import OpenAIStub
from aidanbench.testing.replay import ReplayBrain

from .graphs import run_question
from .test_http import stub_settings


def grams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    if len(words) < 3:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def expected(answer: str, earlier: list[str]) -> float:
    """The definition, written out: 1 - the largest Jaccard overlap (0 for an empty union)."""
    mine, overlaps = grams(answer), [0.0]
    for text in earlier:
        theirs = grams(text)
        union = mine | theirs
        overlaps.append(len(mine & theirs) / len(union) if union else 0.0)
    return 1.0 - max(overlaps)


@pytest.mark.parametrize(
    ("answer", "earlier", "value"),
    [
        ("anything at all", [], 1.0),
        ("Cats purr.", ["cats PURR!"], 0.0),  # case and punctuation are not words
        ("cats", ["dogs"], 1.0),  # one word: its one n-gram
        ("...", ["!!!"], 1.0),  # no words: an empty union overlaps 0
        ("a b c d", ["a b c"], 0.5),  # {abc, bcd} against {abc}
        ("a b c d", ["x y z", "b c d e"], 1 - 1 / 3),  # the largest overlap decides
    ],
)
def test_the_definition_at_its_edges(answer: str, earlier: list[str], value: float) -> None:
    assert lexical_novelty_of(answer, earlier) == pytest.approx(value)
    assert expected(answer, earlier) == pytest.approx(value)


def test_an_answer_exactly_at_the_threshold_fails() -> None:
    rule = Settings(lexical_novelty=True, lexical_novelty_threshold=0.5).thresholds
    at = lexical_novelty_of("a b c d", ["a b c"])
    assert at == 0.5
    scores = {"coherence": 50.0, "novelty": 0.5}
    assert rule.failure({**scores, "lexical_novelty": at}) == "lexical_novelty"
    assert rule.failure({**scores, "lexical_novelty": at + 1e-9}) is None
    assert Thresholds().failure({**scores, "lexical_novelty": 0.0}) is None, "off by default"


def test_settings_switch_it_on_with_its_threshold() -> None:
    assert Settings().thresholds["lexical_novelty"] is None
    assert Settings(lexical_novelty=True).thresholds["lexical_novelty"] == 0.1


@pytest.mark.parametrize(
    "model", ["google/gemini-flash-1.5-8b", "meta-llama/llama-3.1-70b-instruct"]
)
async def test_published_chains_replay_with_lexical_novelty(
    model: str, reference_run: Path, api_key: str
) -> None:
    """Each chain stops at the first answer failing the published rule or lexical novelty
    > 0.7, and every recorded lexical novelty is the definition's."""
    chains = [q for q in read_aidanbench_file(reference_run) if q.model == model]
    with OpenAIStub(ReplayBrain(chains)) as stub:
        settings = stub_settings(
            stub,
            model=model,
            max_concurrency=64,
            lexical_novelty=True,
            lexical_novelty_threshold=0.7,
        )
        outs = await asyncio.gather(
            *(run_question(default_services, c.question, settings) for c in chains)
        )
    stops = set()
    for chain, out in zip(chains, outs, strict=True):
        earlier: list[str] = []
        score = None
        for position, (row, record) in enumerate(zip(chain.answers, out["answers"], strict=False)):
            assert record["answer"] == row.answer
            assert record["lexical_novelty"] == pytest.approx(
                expected(row.answer, earlier), abs=1e-12
            )
            passes = (
                row.coherence is not None
                and row.coherence > 15
                and row.novelty is not None
                and row.novelty > 0.15
                and record["lexical_novelty"] > 0.7
            )
            if not passes:
                score = position
                break
            earlier.append(row.answer)
        assert out["score"] == score and len(out["answers"]) == score + 1
        stops.add(out["stop_reason"])
    assert "lexical_novelty" in stops, "the threshold ends some chains"
