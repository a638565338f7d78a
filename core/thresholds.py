"""The pass rule of AidanBench, in one place.

An answer is valid when coherence > the coherence threshold AND embedding novelty > the
novelty threshold (AND LLM novelty > its threshold when that judge is on). Strictly
greater: an answer exactly at a threshold fails. The first failing answer ends the
question; it is recorded but not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from aidanbench.core.vocabulary import ThresholdStop

COHERENCE_THRESHOLD = 15.0
"""The published coherence threshold, on the scale of the benchmark's judge (o1-mini)."""

NOVELTY_THRESHOLD = 0.15
"""The published novelty threshold, on text-embedding-3-large cosines; LLM novelty's too."""


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of one run; ``llm_novelty`` is None when the similarity judge is off."""

    coherence: float = COHERENCE_THRESHOLD
    novelty: float = NOVELTY_THRESHOLD
    llm_novelty: float | None = None

    def failure(
        self,
        coherence: float,
        novelty: float,
        llm_novelty: float | None = None,
        coherent: bool | None = None,
    ) -> ThresholdStop | None:
        """The first criterion the scores fail (``coherence``, ``novelty``, ``llm_novelty``),
        or None when the answer is valid. ``coherent`` is a judge panel's decision
        (``panel_passes``), which takes the place of ``coherence > self.coherence``."""
        if self.llm_novelty is not None and llm_novelty is None:
            raise ValueError("LLM novelty is on but the answer has no LLM novelty score")
        if not (self.passes("coherence", coherence) if coherent is None else coherent):
            return "coherence"
        if not self.passes("novelty", novelty):
            return "novelty"
        if llm_novelty is not None and not self.passes("llm_novelty", llm_novelty):
            return "llm_novelty"
        return None

    def passes(self, name: ThresholdStop, value: float) -> bool:
        """Whether one score is strictly above its threshold (or its check is off)."""
        limit = {"coherence": self.coherence, "novelty": self.novelty}.get(name, self.llm_novelty)
        return limit is None or value > limit


def panel_passes(passes: list[bool]) -> bool:
    """A judge panel's decision: more than half of its judges pass the answer (a tie
    fails it, as a judgment at the threshold does)."""
    return 2 * sum(passes) > len(passes)
