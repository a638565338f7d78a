"""A brain that replays a recorded AidanBench run, answer for answer.

For each recorded chain the model "answers" the recorded texts in order, the judge gives
the recorded coherence, and the embeddings are built so that the novelty the graph
computes equals the recorded dissimilarity: each answer's vector is
``s·(previous answer's vector) + sqrt(1 − s²)·(a fresh orthogonal unit vector)`` with
``s = 1 − recorded dissimilarity``. Its cosine with the previous answer is ``s``, and with
any earlier answer ``s`` times something at most 1, so the maximum is ``s``. A text seen
before reuses its vector (in the reference run that only happens for a chain's terminal
repeat, whose recorded dissimilarity is 0 either way).

Running the graph against this brain must reproduce the recorded per-question scores:
the golden test of the whole pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aidanbench.record.results import QuestionResult
from aidanbench.testing.brain import (
    Kind,
    Reply,
    parse_coherence_prompt,
    parse_generate_prompt,
    parse_similarity_prompt,
)

BEYOND_RECORDING = "(the recording ends here)"
"""Answer given past a chain's end: only a pipelined look-ahead asks, and it is discarded."""


class ReplayBrain:
    """Replays the chains of one model (questions must be distinct)."""

    def __init__(self, chains: Sequence[QuestionResult]) -> None:
        self.chains = {c.question: c for c in chains}
        if len(self.chains) != len(chains):
            raise ValueError("ReplayBrain replays one model: questions must be distinct")
        self.coherence: dict[tuple[str, str], float] = {}
        for chain in chains:
            for row in chain.answers:
                if row.coherence is None:
                    raise ValueError(f"answer {row.index} of {chain.question!r} has no coherence")
                self.coherence.setdefault((chain.question, row.answer), row.coherence)
        self.vectors = _replay_vectors(chains)
        size = len(next(iter(self.vectors.values()))) if self.vectors else 1
        self._beyond = np.full(size, 1.0 / math.sqrt(size))

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """Recorded answer, recorded coherence, or 100/0 similarity by identity; any
        other message (a preflight's one-line request) gets a plain ``OK``."""
        if kind == "generate":
            question, previous = parse_generate_prompt(prompt)
            rows = self.chains[question].answers
            if len(previous) >= len(rows):
                return Reply(f"<answer>{BEYOND_RECORDING}</answer>", served_model=model)
            return Reply(f"<answer>{rows[len(previous)].answer}</answer>", served_model=model)
        if kind == "coherence":
            question, answer = parse_coherence_prompt(prompt)
            score = self.coherence[(question, answer)]
            return Reply(f"<coherence_score>{round(score)}</coherence_score>")
        if kind == "similarity":
            _, first, second = parse_similarity_prompt(prompt)
            return Reply(f"<similarity_score>{100 if first == second else 0}</similarity_score>")
        if kind == "other":
            return Reply("OK")
        raise ValueError(f"replay brain cannot answer a {kind} request")

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """The constructed vector of each recorded text."""
        return [self.vectors.get(t, self._beyond).tolist() for t in texts]


def _replay_vectors(chains: Sequence[QuestionResult]) -> dict[str, np.ndarray]:
    dim = sum(len(c.answers) for c in chains) + 1
    vectors: dict[str, np.ndarray] = {}
    fresh = 0
    for chain in chains:
        previous: np.ndarray | None = None
        for row in chain.answers:
            if row.answer in vectors:
                previous = vectors[row.answer]
                continue
            basis = np.zeros(dim)
            basis[fresh] = 1.0
            fresh += 1
            if previous is None:
                vector = basis
            else:
                s = 1.0 - float(row.novelty if row.novelty is not None else 1.0)
                vector = s * previous + math.sqrt(max(0.0, 1.0 - s * s)) * basis
            vectors[row.answer] = vector
            previous = vector
    return vectors
