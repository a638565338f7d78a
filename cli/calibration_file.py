"""``--coherence-threshold FILE``: a judge calibration file (``core.calibration``, read there as
every command and environment reads it) as ``run``'s and ``rescore``'s threshold, with the file's
path, sha256 and judge recorded in the run's metadata, so the reports can show where the
threshold came from."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aidanbench.core.calibration import WRITTEN_BY, CalibrationFileError, read_calibration
from aidanbench.core.errors import UsageError, printable


class CalibratedThreshold(float):
    """A coherence threshold read from a calibration file, with where it came from."""

    source: dict[str, Any]

    def __new__(cls, value: float, source: dict[str, Any]) -> CalibratedThreshold:
        made = super().__new__(cls, value)
        made.source = source
        return made


def coherence_threshold(text: str) -> float:
    """``--coherence-threshold``'s value: a number, or a file's ``CalibratedThreshold`` read and
    checked by ``core.calibration.read_calibration`` (as every command and environment reads
    it)."""
    try:
        return float(text)
    except ValueError:
        pass
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a number nor a calibration file ({WRITTEN_BY})"
        )
    try:
        found = read_calibration(path)
    except CalibrationFileError as exc:
        raise argparse.ArgumentTypeError(printable(str(exc))) from None
    return CalibratedThreshold(found.threshold, found.source())


def threshold_source(value: Any, judge_model: str) -> dict[str, Any] | None:
    """The source a ``--coherence-threshold`` value records (None: a number); ``ValueError`` when
    the file calibrated another judge."""
    if not isinstance(value, CalibratedThreshold):
        return None
    calibrated = value.source["judge_model"]
    if calibrated != judge_model:
        raise ValueError(
            f"--coherence-threshold {value.source['file']} calibrates the judge {calibrated}, "
            f"but the judge here is {judge_model} (give --judge-model {calibrated})"
        )
    return dict(value.source)


OTHER_JUDGE_FLAG = "--other-judge-calibration"
"""``rescore``'s flag asking for a calibration file's threshold on another judge's scores."""


def check_judged_by(value: Any, judges: Iterable[str | None], allowed: bool) -> None:
    """Refuse (``UsageError``) a calibration file's threshold as the cut on scores another judge
    gave (``judges``: the recorded ones, None when a line records none), unless ``allowed``
    (``OTHER_JUDGE_FLAG``): each judge scores on its own scale."""
    if not isinstance(value, CalibratedThreshold) or allowed:
        return
    calibrated = value.source["judge_model"]
    others = sorted({judge or "an unrecorded judge" for judge in judges if judge != calibrated})
    if others:
        raise UsageError(
            printable(
                f"--coherence-threshold {value.source['file']} calibrates the judge "
                f"{calibrated}, but these answers were judged by {', '.join(others)}: give "
                f"--judge-model {calibrated} to judge them again with it, or "
                f"{OTHER_JUDGE_FLAG} to cut their scores at its threshold all the same"
            )
        )


def threshold_value(text: str, option: str, upper: float) -> float:
    """``text`` as a finite number in ``[0, upper]`` (novelty's is 2: cosines can be negative)."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{option} must be a number, got {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= upper:
        raise UsageError(f"{option} must be between 0 and {upper:g}, got {text!r}")
    return value


def coherence_value(text: str) -> float:
    """``--coherence-threshold``: a number in [0, 100], or a calibration file's threshold."""
    try:
        value = coherence_threshold(text)
    except argparse.ArgumentTypeError as exc:
        if Path(text).exists():
            raise UsageError(f"--coherence-threshold: {exc}") from None
        raise UsageError(
            f"--coherence-threshold must be a number or a judge calibration file, got {text!r}"
        ) from None
    if isinstance(value, CalibratedThreshold):
        return value
    return threshold_value(text, "--coherence-threshold", 100)
