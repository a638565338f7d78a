"""A brain that replays recorded AidanBench runs, answer for answer, for every model at once:
the graph run against it must reproduce the recorded per-question scores (the golden test).

The model "answers" each chain's recorded texts in order, the judge gives the recorded
coherence, and the embeddings make the graph's novelty equal the recorded dissimilarity: each
answer's vector is ``s·(previous vector) + sqrt(1 − s²)·(a fresh orthogonal unit vector)``
with ``s = 1 − recorded dissimilarity``, so its cosine with the previous answer is ``s`` and
with any earlier one at most ``s``. A text seen before reuses its vector (in the reference
run only a chain's terminal repeat, whose dissimilarity is 0 either way).

Generate requests are answered by model name; coherence and embeddings by text, safe because no
published answer occurs under two models. Each model's vectors span their own axes, zero-padded to
one length, so every cosine within a chain is kept and one batch may mix models. A generate request
can wait its recorded time (cumulative ``processing_time`` less the previous answer's) times a
scale.
"""

from __future__ import annotations

import math
import time
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


def answer_seconds(chain: QuestionResult) -> list[float]:
    """How long each answer of a chain took in the recording (from cumulative times)."""
    seconds: list[float] = []
    before = 0.0
    for row in chain.answers:
        now = row.elapsed_s if row.elapsed_s is not None else before
        seconds.append(max(0.0, now - before))
        before = now
    return seconds


class ReplayBrain:
    """Replays the chains of recorded models (a model's questions must be distinct);
    generate requests take the recorded time times ``latency_scale``."""

    def __init__(self, chains: Sequence[QuestionResult], latency_scale: float = 0.0) -> None:
        if latency_scale < 0:
            raise ValueError(f"latency scale must be at least 0, got {latency_scale}")
        self.chains = {(c.model, c.question): c for c in chains}
        if len(self.chains) != len(chains):
            raise ValueError("ReplayBrain replays a model's questions once: they must be distinct")
        self.latency_scale = latency_scale
        self.seconds = {key: answer_seconds(chain) for key, chain in self.chains.items()}
        self.coherence: dict[tuple[str, str], float] = {}
        for chain in chains:
            for row in chain.answers:
                if row.coherence is None:
                    raise ValueError(f"answer {row.index} of {chain.question!r} has no coherence")
                self.coherence.setdefault((chain.question, row.answer), row.coherence)
        by_model: dict[str, list[QuestionResult]] = {}
        for chain in chains:
            by_model.setdefault(chain.model, []).append(chain)
        self.vectors: dict[str, np.ndarray] = {}
        for own in by_model.values():
            for text, vector in _replay_vectors(own).items():
                self.vectors.setdefault(text, vector)
        self.dimensions = max((len(v) for v in self.vectors.values()), default=1)
        self._beyond = np.full(self.dimensions, 1.0 / math.sqrt(self.dimensions))

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """The recorded answer (after its recorded time), recorded coherence, 100/0 similarity
        by identity, or ``OK`` to any other message (a preflight's)."""
        if kind == "generate":
            question, previous = parse_generate_prompt(prompt)
            chain = self.chains.get((model, question))
            if chain is None:
                raise ValueError(f"the recording has no question {question!r} for {model!r}")
            rows = chain.answers
            if len(previous) >= len(rows):
                return Reply(f"<answer>{BEYOND_RECORDING}</answer>", served_model=model)
            if self.latency_scale:
                time.sleep(self.seconds[(model, question)][len(previous)] * self.latency_scale)
            return Reply(f"<answer>{rows[len(previous)].answer}</answer>", served_model=model)
        if kind == "coherence":
            score = self.coherence.get(parse_coherence_prompt(prompt))
            if score is None:
                raise ValueError("coherence asked for an answer the recording does not have")
            return Reply(f"<coherence_score>{round(score)}</coherence_score>")
        if kind == "similarity":
            _, first, second = parse_similarity_prompt(prompt)
            return Reply(f"<similarity_score>{100 if first == second else 0}</similarity_score>")
        if kind == "other":
            return Reply("OK")
        raise ValueError(f"replay brain cannot answer a {kind} request")

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """Each recorded text's constructed vector, zero-padded to one length."""
        out = []
        for text in texts:
            vector = self.vectors.get(text, self._beyond)
            padded = np.zeros(self.dimensions)
            padded[: len(vector)] = vector
            out.append(padded.tolist())
        return out


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
