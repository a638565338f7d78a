"""The published AidanBench run as a local API: every model, judge and embedder at once.

``aidanbench demo`` runs the real pipeline against this. ``PublishedRunBrain`` answers
for all five models of the bundled published run: each model's generate requests get its
recorded answers (``ReplayBrain``, by the request's model name), and coherence requests
and embeddings are looked up by text, which is safe because no answer text of the
published run occurs under two models. A generate request waits as long as that answer
took in the published run (its cumulative ``processing_time`` less the previous
answer's), times a scale, so the run's progress follows the published timings.

Run as ``python -m aidanbench.testing.published SCALE [MODEL…]``: serves on 127.0.0.1
(``GET /v1/models`` lists the run's models and the MODELs named, the judge and embedding
model the caller uses), prints the base URL on the first line of stdout and stops when
stdin closes. In its own process the
server's work is not charged to the run it serves.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aidanbench import reference
from aidanbench.record.results import QuestionResult, read_aidanbench_file
from aidanbench.testing.brain import (
    Kind,
    Reply,
    parse_coherence_prompt,
    parse_generate_prompt,
)
from aidanbench.testing.replay import ReplayBrain
from aidanbench.testing.server import OpenAIStub


def published_chains() -> list[QuestionResult]:
    """The bundled published run's question chains, in file order."""
    return read_aidanbench_file(reference.published_run())


def answer_seconds(chain: QuestionResult) -> list[float]:
    """How long each answer of a chain took in the recording (from cumulative times)."""
    seconds: list[float] = []
    before = 0.0
    for row in chain.answers:
        now = row.elapsed_s if row.elapsed_s is not None else before
        seconds.append(max(0.0, now - before))
        before = now
    return seconds


class PublishedRunBrain:
    """Replays every model of a recorded run; generate requests take the recorded time."""

    def __init__(self, chains: Sequence[QuestionResult], latency_scale: float = 0.0) -> None:
        if latency_scale < 0:
            raise ValueError(f"latency scale must be at least 0, got {latency_scale}")
        by_model: dict[str, list[QuestionResult]] = {}
        for chain in chains:
            by_model.setdefault(chain.model, []).append(chain)
        self.brains = {model: ReplayBrain(own) for model, own in by_model.items()}
        self.latency_scale = latency_scale
        self.seconds = {(c.model, c.question): answer_seconds(c) for c in chains}
        self._judge: dict[tuple[str, str], ReplayBrain] = {}
        self._vectors: dict[str, np.ndarray] = {}
        for brain in self.brains.values():
            for key in brain.coherence:
                self._judge.setdefault(key, brain)
            for text, vector in brain.vectors.items():
                self._vectors.setdefault(text, vector)
        self.dimensions = max(len(v) for v in self._vectors.values())
        self._beyond = np.full(self.dimensions, 1.0 / math.sqrt(self.dimensions))

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """The model's recorded answer (after its recorded time), or the recorded score."""
        if kind == "generate":
            brain = self.brains.get(model)
            if brain is None:
                raise ValueError(f"the published run has no model {model!r}")
            question, previous = parse_generate_prompt(prompt)
            times = self.seconds.get((model, question), [])
            if self.latency_scale and len(previous) < len(times):
                time.sleep(times[len(previous)] * self.latency_scale)
            return brain.chat(kind, model, prompt, body)
        if kind == "coherence":
            judge = self._judge.get(parse_coherence_prompt(prompt))
            if judge is None:
                raise ValueError("coherence asked for an answer the published run does not have")
            return judge.chat(kind, model, prompt, body)
        return next(iter(self.brains.values())).chat(kind, model, prompt, body)

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """Each text's constructed vector, zero-padded to one length for every model.

        Each model's vectors span their own axes; padding with zeros keeps every cosine
        within a chain, and one batch may hold texts of several models.
        """
        out = []
        for text in texts:
            vector = self._vectors.get(text)
            if vector is None:
                out.append(self._beyond.tolist())
                continue
            padded = np.zeros(self.dimensions)
            padded[: len(vector)] = vector
            out.append(padded.tolist())
        return out


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the published run until stdin closes (the demo's child process)."""
    args = list(sys.argv[1:] if argv is None else argv)
    scale = float(args[0]) if args else 0.0
    chains = published_chains()
    served = [*dict.fromkeys(c.model for c in chains), *args[1:]]
    with OpenAIStub(PublishedRunBrain(chains, scale), models=served) as stub:
        print(stub.base_url, flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
