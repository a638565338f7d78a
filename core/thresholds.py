"""The pass rule of AidanBench, in one place.

An answer is valid when every score that is on (``core.scores``) is strictly above its
threshold: an answer exactly at a threshold fails. The first failing answer ends the
question; it is recorded but not counted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aidanbench.core.scores import COHERENCE_THRESHOLD as COHERENCE_THRESHOLD
from aidanbench.core.scores import NOVELTY_THRESHOLD as NOVELTY_THRESHOLD
from aidanbench.core.scores import declared


class Thresholds(Mapping[str, float | None]):
    """The thresholds of one run, keyed by score name (``core.scores``); None: that score
    is off. Immutable and hashable, so rows that share a rule are found by equality.

    Built from a mapping or keywords (``Thresholds(coherence=20)``); a declared score not
    given has its default when always on, and is off when a setting switches it. A name the
    table does not declare (a score of another version's run) is kept as given, after the
    declared ones, so a report of that run still says what decided it.
    """

    __slots__ = ("_limits",)

    def __init__(self, limits: Mapping[str, float | None] | None = None, /, **named: Any) -> None:
        given = {**(limits or {}), **named}
        found: dict[str, float | None] = {}
        for score in declared():
            value = given.pop(score.name, score.threshold if score.switch is None else None)
            found[score.name] = None if value is None else float(value)
        for name, value in given.items():
            found[name] = None if value is None else float(value)
        self._limits = found

    def __getitem__(self, name: str) -> float | None:
        return self._limits[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._limits)

    def __len__(self) -> int:
        return len(self._limits)

    def __hash__(self) -> int:
        return hash(tuple(self._limits.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Thresholds):
            return self._limits == other._limits
        return NotImplemented

    def __repr__(self) -> str:
        return f"Thresholds({self._limits!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Thresholds, (self._limits,)

    @property
    def coherence(self) -> float:
        """The judge's coherence threshold: always on, and the one a judge panel's first
        judge is held to (each other judge keeps its own calibrated one)."""
        value = self._limits["coherence"]
        if value is None:
            raise ValueError("coherence is always on; its threshold cannot be None")
        return value

    @property
    def on(self) -> dict[str, float]:
        """The scores that decide an answer, with their thresholds, in the table's order."""
        return {name: limit for name, limit in self._limits.items() if limit is not None}

    def record(self) -> dict[str, float | None]:
        """As a record keeps them: each score that is on, and each of the original schema's
        even when off (null), so records keep the shape they always had."""
        kept = {s.name for s in declared() if s.always_recorded}
        return {
            name: limit for name, limit in self._limits.items() if limit is not None or name in kept
        }

    def settings(self) -> dict[str, Any]:
        """The ``Settings`` fields that give these thresholds: each set score's threshold
        field (``<name>_threshold``: a score without a setting always has its default), and
        each switch, on when its score has a threshold."""
        fields: dict[str, Any] = {}
        for score in declared():
            limit = self._limits.get(score.name)
            if score.switch is not None:
                fields[score.switch] = limit is not None
            if score.setting is not None and limit is not None:
                fields[score.measured_key] = limit
        return fields

    def failure(
        self, values: Mapping[str, float | None], coherent: bool | None = None
    ) -> str | None:
        """The first score of ``values`` (each score's by name) that fails, or None when
        the answer is valid. ``coherent`` is a judge panel's decision (``panel_verdict``),
        which takes the place of ``coherence > self.coherence`` (the coherence itself may then
        be unknown: the panel's first judge gave none). Raises ``ValueError`` when a score
        that is on has no value: a missing score is never a pass or a fail."""
        on = self.on
        decided = {"coherence"} if coherent is not None else set()
        missing = next(
            (name for name in on if values.get(name) is None and name not in decided), None
        )
        if missing is not None:
            label = label_of(missing)
            raise ValueError(f"{label} is on but the answer has no {label} score")
        for name, limit in on.items():
            passes = coherent if name == "coherence" and coherent is not None else None
            if passes is None:
                passes = values[name] > limit  # type: ignore[operator]
            if not passes:
                return name
        return None

    def passes(self, name: str, value: float) -> bool:
        """Whether one score is strictly above its threshold (or its check is off)."""
        limit = self._limits.get(name)
        return limit is None or value > limit


def label_of(name: str) -> str:
    """A score's heading (``Score.label``), or its name when the table does not declare it."""
    return next((s.label for s in declared() if s.name == name), name)


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
