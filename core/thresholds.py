"""The pass rule of AidanBench, in one place.

An answer is valid when every score that is on (``core.scores``) is strictly above its
threshold: an answer exactly at a threshold fails. The first failing answer ends the
question; it is recorded but not counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, make_dataclass
from functools import cache
from typing import Any

from aidanbench.core.scores import COHERENCE_THRESHOLD as COHERENCE_THRESHOLD
from aidanbench.core.scores import NOVELTY_THRESHOLD as NOVELTY_THRESHOLD
from aidanbench.core.scores import Score, declared


class Thresholds:
    """Thresholds of one run: a frozen dataclass whose fields are the declared scores
    (``_with_fields``), given by position or name (``Thresholds(15, 0.15)``). A score not
    given has its default, or is None (off) when a setting switches it."""

    coherence: float
    novelty: float
    llm_novelty: float | None

    def __new__(cls, *limits: float | None, **named: float | None) -> Thresholds:
        names = [score.name for score in declared()]
        if len(limits) > len(names) or set(named) - set(names):
            raise TypeError(f"Thresholds takes the declared scores {names}")
        given = dict(zip(names, limits, strict=False)) | named
        found = object.__new__(_with_fields(declared()))
        for s in declared():
            default = s.threshold if s.switch is None else None
            object.__setattr__(found, s.name, given.get(s.name, default))
        return found

    def __reduce__(self) -> tuple[Any, ...]:
        return _restored, (self.limits,)

    @property
    def limits(self) -> tuple[tuple[str, float | None], ...]:
        """Each declared score's name and threshold, in the table's order."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))  # type: ignore[arg-type]

    def failure(
        self, values: Mapping[str, float | None], coherent: bool | None = None
    ) -> str | None:
        """The first score of ``values`` (each score's by name) that fails, or None when
        the answer is valid. ``coherent`` is a judge panel's decision (``panel_verdict``),
        which takes the place of ``coherence > self.coherence`` (the coherence itself may then
        be unknown: the panel's first judge gave none)."""
        on = [name for name, limit in self.limits if limit is not None]
        decided = {"coherence"} if coherent is not None else set()
        missing = [name for name in on if values.get(name) is None and name not in decided]
        if missing:
            label = next(s.label for s in declared() if s.name == missing[0])
            raise ValueError(f"{label} is on but the answer has no {label} score")
        for name in on:
            panel = coherent if name == "coherence" else None
            if not (self.passes(name, values[name]) if panel is None else panel):  # type: ignore[arg-type]
                return name
        return None

    def passes(self, name: str, value: float) -> bool:
        """Whether one score is strictly above its threshold (or its check is off)."""
        limit = dict(self.limits).get(name)
        return limit is None or value > limit


def panel_verdict(passes: Sequence[bool | None]) -> bool | None:
    """A judge panel's decision: more than half of its judges pass the answer (a tie fails
    it, as a judgment at the threshold does). A judge that gave no decision (None) is never
    counted as a pass or a fail: the decision is the one the others already make whatever it
    would say, else None (undecided)."""
    yes = sum(1 for vote in passes if vote is True)
    unknown = sum(1 for vote in passes if vote is None)
    if 2 * yes > len(passes):
        return True
    if 2 * (yes + unknown) <= len(passes):
        return False
    return None


@cache
def _with_fields(scores: tuple[Score, ...]) -> type[Thresholds]:
    return make_dataclass(
        "Thresholds",
        [(score.name, float | None) for score in scores],
        bases=(Thresholds,),
        init=False,
        frozen=True,
        namespace={"__module__": __name__},
    )


def _restored(limits: tuple[tuple[str, float | None], ...]) -> Thresholds:
    return Thresholds(**dict(limits))
