"""The judge calibration file ``calibrate --judge-model`` writes, and its one reading.

``run`` and ``rescore`` (``--coherence-threshold FILE``) and both verifiers environments
(``thresholds.coherence_score``) take a successor judge's threshold from it, each through
``read_calibration``: a file one refuses, all refuse, with the same line. The file states its
threshold twice, ``judge.threshold`` (the calibrated cut) and ``judge.setting_value`` (rounded
without changing a decision, what a run takes), and ``judge.equivalent_interval``, the cuts that
decide every reference answer as the threshold does. A file whose two values fall outside that
interval was edited, not calibrated: it is refused rather than half believed. The file is read
once, so the sha256 a run records is of the bytes whose threshold it took.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIND = "aidanbench judge calibration"
"""The ``kind`` of a calibration file."""

WRITTEN_BY = "aidanbench calibrate --judge-model writes one"
"""What makes a calibration file, for messages."""


class CalibrationFileError(ValueError):
    """A calibration file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class CalibrationFile:
    """What a calibration file gives a run: the judge it calibrated and its threshold."""

    path: Path
    """The file, resolved."""
    sha256: str
    """Of the bytes read."""
    judge_model: str
    threshold: float
    """``judge.setting_value``: the threshold a run takes."""
    reference: str | None
    """The reference results file it was calibrated against."""
    note: str | None
    """What the calibration could not test (``JudgeCalibration.note``)."""

    def source(self) -> dict[str, Any]:
        """Where a threshold from this file came from, as a run records it
        (``record.metadata.ThresholdSource``)."""
        return {
            "kind": "calibration",
            "file": str(self.path),
            "sha256": self.sha256,
            "judge_model": self.judge_model,
            "reference": self.reference,
            "note": self.note,
        }

    def other_judge(self, judge_model: str | None) -> str | None:
        """Why this file's threshold cannot be a cut on ``judge_model``'s scores (None when it
        calibrated that judge): every judge scores on its own scale."""
        if judge_model == self.judge_model:
            return None
        judged = "an unrecorded judge" if judge_model is None else f"the judge {judge_model}"
        return f"{self.path} calibrates the judge {self.judge_model}, not {judged}"


def read_calibration(path: str | Path) -> CalibrationFile:
    """The calibration file at ``path``, checked; ``CalibrationFileError`` (one line) when it
    cannot be read, is not a calibration file, or its threshold is missing, not a number, out
    of [0, 100] or disagrees with the rest of the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
        document = json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationFileError(
            f"cannot read calibration file {path}: {' '.join(str(exc).split())}"
        ) from None
    judge = document.get("judge") if isinstance(document, dict) else None
    if not isinstance(judge, dict) or document.get("kind") != KIND:
        raise CalibrationFileError(f"{path} is not a judge calibration file ({WRITTEN_BY})")
    model = judge.get("model")
    if not isinstance(model, str) or not model.strip():
        raise CalibrationFileError(f"{path}: judge.model must name the judge, got {_shown(model)}")
    threshold = _cut(path, judge, "threshold")
    setting = _cut(path, judge, "setting_value")
    low, high = _interval(path, judge.get("equivalent_interval"))
    for name, value in (("setting_value", setting), ("threshold", threshold)):
        if not low <= value < high:
            raise CalibrationFileError(
                f"{path}: judge.{name} {value:g} disagrees with the file's own calibration "
                f"(judge.threshold {threshold:g}, judge.setting_value {setting:g}, every cut in "
                f"[{low:g}, {high:g}) deciding alike): the file was edited; calibrate again"
            )
    note = judge.get("note")
    reference = document.get("reference")
    return CalibrationFile(
        path=path.resolve(),
        sha256=hashlib.sha256(data).hexdigest(),
        judge_model=model,
        threshold=setting,
        reference=reference if isinstance(reference, str) else None,
        note=note if isinstance(note, str) else None,
    )


def _cut(path: Path, judge: dict[str, Any], name: str) -> float:
    """``judge[name]``: a finite number in [0, 100], a coherence threshold."""
    if name not in judge:
        raise CalibrationFileError(f"{path}: judge.{name} is missing ({WRITTEN_BY})")
    value = judge[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalibrationFileError(f"{path}: judge.{name} must be a number, got {_shown(value)}")
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise CalibrationFileError(
            f"{path}: judge.{name} must be a coherence threshold between 0 and 100, got "
            f"{_shown(value)}"
        )
    return float(value)


def _interval(path: Path, found: Any) -> tuple[float, float]:
    """``judge.equivalent_interval``: [low, high), finite, low below high."""
    if (
        isinstance(found, list)
        and len(found) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in found)
        and all(math.isfinite(x) for x in found)
        and found[0] < found[1]
    ):
        return float(found[0]), float(found[1])
    raise CalibrationFileError(
        f"{path}: judge.equivalent_interval must be [low, high] with low below high, got "
        f"{_shown(found)} ({WRITTEN_BY})"
    )


def _shown(value: Any) -> str:
    """A value from the file, short, on one line (the caller's ``printable`` escapes it)."""
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:60] + "…"
