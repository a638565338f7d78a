"""``lexical_novelty``: how little of an answer's wording repeats an earlier answer's.

Lexical novelty is 1 − the largest Jaccard overlap between the answer's set of word
3-grams and an earlier answer's: words are ``re.findall(r"\\w+", text.lower())``, an
answer's n-grams its consecutive word triples (a text of one or two words is its one
n-gram), an empty union overlaps 0, and the first answer scores 1.0. It needs no API call,
so it costs nothing and cannot fail as a request can; it measures wording, where
embedding novelty measures meaning (a paraphrase is lexically new and semantically not).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionState, ScoreOutcome
from aidanbench.nodes.context import NodeContext, candidate_answer, scored
from aidanbench.nodes.generate import previous_answers
from aidanbench.services import ServicesFactory

WORDS = re.compile(r"\w+")
N = 3
"""Words per n-gram."""


@lru_cache(maxsize=65_536)
def ngrams(text: str) -> frozenset[tuple[str, ...]]:
    """The set of word ``N``-grams of ``text``; a text shorter than ``N`` words is its one
    n-gram, a text without words has none. Cached: each turn compares the answer with every
    earlier one, whose sets are the same as at the last turn."""
    words = WORDS.findall(text.lower())
    if len(words) < N:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + N]) for i in range(len(words) - N + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 when the union is empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def lexical_novelty_of(answer: str, previous: Sequence[str]) -> float:
    """1 − the largest Jaccard overlap of ``answer``'s n-grams with an earlier answer's;
    1.0 when there is nothing before it."""
    mine = ngrams(answer)
    return 1.0 - max((jaccard(mine, ngrams(text)) for text in previous), default=0.0)


async def lexical_novelty(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Lexical novelty of the candidate against every earlier answer of the chain."""
    ctx = NodeContext(runtime, services)
    answer, index = candidate_answer(state)
    earlier = previous_answers(state)

    async def compare() -> float:
        return lexical_novelty_of(answer, earlier)

    def outcome(value: float) -> ScoreOutcome:
        return ScoreOutcome(index=index, value=value)

    found = await scored(ctx, state, "lexical_novelty", "model", compare, outcome)
    return {"lexical_novelty_result": found}
