"""Stand-in successor judges for the published run: scores that follow the recorded judge's.

``RecordedJudge`` answers a coherence prompt about a recorded answer with a ``Rule`` of its
recorded score; every other request goes to ``inner``. Noise needs different replies to one
prompt: the n-th request for a prompt gets the n-th draw, a pure function of (prompt, n). A run
asks an answer's first judgment alone (``nodes.judge_calls.sample_judgments``), so the first
reply holds whatever the concurrency (the others, asked together, may swap).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aidanbench.nodes.judge_calls import neutralise
from aidanbench.record.results import QuestionResult
from aidanbench.testing.brain import Brain, Kind, Reply, parse_coherence_prompt

Rule = Callable[[float, str, int], int]
"""A judgment from the recorded score, the prompt and which request for it this is (1…)."""


def affine(slope: float, intercept: float) -> Rule:
    """``floor(slope · recorded + intercept)``, clipped to 0-100, every time."""

    def rule(recorded: float, prompt: str, n: int) -> int:
        return max(0, min(100, math.floor(slope * recorded + intercept)))

    return rule


def noisy(width: float) -> Rule:
    """The recorded score plus noise uniform in ±``width``, rounded and clipped to 0-100."""

    def rule(recorded: float, prompt: str, n: int) -> int:
        digest = hashlib.sha256(f"{n}|{prompt}".encode()).digest()
        unit = int.from_bytes(digest[:8], "big") / 2**64
        return max(0, min(100, round(recorded + (2 * unit - 1) * width)))

    return rule


class RecordedJudge:
    """A judge scoring a recorded run's answers by ``rule``; everything else to ``inner``.
    ``served_model`` makes every judgment claim that model, as a substituting provider would."""

    def __init__(
        self,
        chains: Sequence[QuestionResult],
        rule: Rule,
        inner: Brain,
        *,
        served_model: str | None = None,
        unrecorded: int = 80,
    ) -> None:
        self.rule = rule
        self.inner = inner
        self.served_model = served_model
        self.unrecorded = unrecorded
        """The score of an answer the recording does not have (generated past it)."""
        self.recorded: dict[tuple[str, str], float] = {}
        for chain in chains:
            for row in chain.answers:
                if row.coherence is not None:
                    key = (chain.question, neutralise(row.answer)[0])
                    self.recorded.setdefault(key, row.coherence)
        self._asked: dict[str, int] = {}
        self._lock = threading.Lock()

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """A coherence judgment by the rule, or ``inner``'s answer."""
        if kind != "coherence":
            return self.inner.chat(kind, model, prompt, body)
        with self._lock:
            n = self._asked[prompt] = self._asked.get(prompt, 0) + 1
        recorded = self.recorded.get(parse_coherence_prompt(prompt))
        score = self.unrecorded if recorded is None else self.rule(recorded, prompt, n)
        return Reply(f"<coherence_score>{score}</coherence_score>", served_model=self.served_model)

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """``inner``'s vectors."""
        return self.inner.embed(model, texts)
