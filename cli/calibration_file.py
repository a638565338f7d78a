"""The judge calibration file: written by ``calibrate --judge-model``, read by ``run`` and
``rescore`` as ``--coherence-threshold FILE``, which records the file's path, sha256 and judge in
the run's metadata, so the reports can show where the threshold came from."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from aidanbench.core.errors import UsageError
from aidanbench.record import files


class CalibratedThreshold(float):
    """A coherence threshold read from a calibration file, with where it came from."""

    source: dict[str, Any]

    def __new__(cls, value: float, source: dict[str, Any]) -> CalibratedThreshold:
        made = super().__new__(cls, value)
        made.source = source
        return made


def coherence_threshold(text: str) -> float:
    """``--coherence-threshold``'s value: a number, or a file's ``CalibratedThreshold``."""
    try:
        return float(text)
    except ValueError:
        pass
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a number nor a calibration file (aidanbench calibrate "
            "--judge-model writes one)"
        )
    from aidanbench.analysis.judge_calibration import KIND  # numpy: only for a file

    try:
        document = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read calibration file {path}: {' '.join(str(exc).split())}"
        ) from None
    judge = document.get("judge") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or document.get("kind") != KIND
        or not isinstance(judge, dict)
        or not isinstance(judge.get("model"), str)
        or isinstance(judge.get("setting_value"), bool)
        or not isinstance(judge.get("setting_value"), int | float)
    ):
        raise argparse.ArgumentTypeError(
            f"{path} is not a judge calibration file (aidanbench calibrate --judge-model)"
        )
    return CalibratedThreshold(
        float(judge["setting_value"]),
        {
            "kind": "calibration",
            "file": str(path.resolve()),
            "sha256": files.digest(path.read_bytes()),
            "judge_model": judge["model"],
            "reference": document.get("reference"),
            "note": judge.get("note"),
        },
    )


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
