"""The pass rule of AidanBench, in one place.

An answer is valid when coherence > the coherence threshold AND embedding novelty > the
novelty threshold (AND LLM novelty > its threshold when that judge is on). Strictly
greater: an answer exactly at a threshold fails. The first failing answer ends the
question; it is recorded but not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from aidanbench.core.vocabulary import ThresholdStop


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of one run; ``llm_novelty`` is None when the similarity judge is off."""

    coherence: float = 15.0
    novelty: float = 0.15
    llm_novelty: float | None = None

    def failure(
        self, coherence: float, novelty: float, llm_novelty: float | None = None
    ) -> ThresholdStop | None:
        """The first criterion the scores fail (``coherence``, ``novelty``, ``llm_novelty``),
        or None when the answer is valid."""
        if self.llm_novelty is not None and llm_novelty is None:
            raise ValueError("LLM novelty is on but the answer has no LLM novelty score")
        scores: dict[ThresholdStop, float | None] = {
            "coherence": coherence,
            "novelty": novelty,
            "llm_novelty": llm_novelty,
        }
        return next((n for n, v in scores.items() if v is not None and not self.passes(n, v)), None)

    def passes(self, name: ThresholdStop, value: float) -> bool:
        """Whether one score is strictly above its threshold (or its check is off)."""
        limit = {"coherence": self.coherence, "novelty": self.novelty}.get(name, self.llm_novelty)
        return limit is None or value > limit
