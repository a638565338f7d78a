"""Several run directories and results files read as one set of results.

Lines are paired by question text, so a question asked in two runs is one row of the
per-question table and one resampling unit of a comparison. A (model, temperature) two inputs
share is one row when their lines complement each other (a run split over two directories);
when both hold the same line, each becomes ``MODEL [INPUT]`` so neither is silently dropped.
Other disagreements are warnings (``summary.warnings``); the reward mode is resolved here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from aidanbench.analysis.cost import line_key
from aidanbench.analysis.summary import REWARD_MODES
from aidanbench.core.settings import Settings, token_limit_field
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import Metadata, read_metadata
from aidanbench.record.results import QuestionResult, read_results_noted

DEFAULT_REWARD_MODE = "count"
"""The benchmark's headline: the number of valid answers."""


@dataclass(frozen=True)
class Source:
    """Results read from one path, with what its run directory recorded about them."""

    path: Path
    results: list[QuestionResult]
    metadata: Metadata | None
    read_thresholds: Thresholds
    """Thresholds validity was recomputed with where the file does not record them."""
    notes: tuple[str, ...] = ()
    """Lines counted once for two spellings of one question (``records.distinct``)."""

    @property
    def reward_mode(self) -> str | None:
        """``count`` or ``novelty_sum`` as the run directory recorded it; None for a file."""
        spec = self.metadata.spec if self.metadata else None
        return spec.reward_mode if spec and spec.reward_mode in REWARD_MODES else None


def read_input(path: Path, thresholds: Thresholds | None = None) -> Source:
    """The results at ``path``; raises ``ValueError`` (``OSError``, ``KeyError``) naming why."""
    read = thresholds or Thresholds()
    results, notes = read_results_noted(path, read)
    metadata = read_metadata(path) if path.is_dir() else None
    return Source(path, results, metadata, read, tuple(notes))


def token_limit_field_of(model: str, metadata: Metadata | None) -> str:
    """The request field that raises ``model``'s token limit under its run's recorded fields."""
    record = ((metadata.scoring_settings if metadata else None) or {}).get(model)
    fields = {
        name: record[name]
        for name in ("model_kwargs", "variant_fields")
        if isinstance(record, dict) and isinstance(record.get(name), dict)
    }
    try:
        return Settings(model=model, **fields).token_limit_field
    except ValidationError:  # a record this version cannot read: judge by the name
        return token_limit_field(model, {})


def _names(inputs: Sequence[Source]) -> list[str]:
    """Short names of the inputs: the last path part, or the whole path when that repeats."""
    short = [i.path.name or str(i.path) for i in inputs]
    return short if len(set(short)) == len(short) else [str(i.path) for i in inputs]


def combine(inputs: Sequence[Source]) -> list[QuestionResult]:
    """Every input's lines in input order, models that clash named after their input."""
    owners: dict[tuple[str, float, str, int], set[int]] = {}
    for n, source in enumerate(inputs):
        for result in source.results:
            owners.setdefault(line_key(result), set()).add(n)
    clashing = {(key[0], key[1]) for key, found in owners.items() if len(found) > 1}
    names = _names(inputs)
    combined: list[QuestionResult] = []
    for name, source in zip(names, inputs, strict=True):
        for result in source.results:
            if (result.model, result.temperature) in clashing:
                result = dataclasses.replace(result, model=f"{result.model} [{name}]")
            combined.append(result)
    return combined


def reward_mode(inputs: Sequence[Source], chosen: str | None = None) -> tuple[str, list[str]]:
    """The reward mode to report in (``chosen``, else the runs' shared one, else ``count``) and
    the warnings: the inputs' notes, then any disagreement."""
    spelled = [note for i in inputs for note in i.notes]
    recorded = {i.reward_mode for i in inputs if i.reward_mode is not None}
    if chosen is not None:
        return chosen, spelled
    if len(recorded) > 1:
        named = list(zip(_names(inputs), inputs, strict=True))
        detail = "; ".join(
            f"{mode}: {', '.join(name for name, i in named if i.reward_mode == mode)}"
            for mode in sorted(recorded)
        )
        return DEFAULT_REWARD_MODE, [
            *spelled,
            f"inputs were run with different reward modes ({detail}); reporting "
            f"{DEFAULT_REWARD_MODE}, choose with --reward-mode",
        ]
    return (recorded.pop() if recorded else DEFAULT_REWARD_MODE), spelled
