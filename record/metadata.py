"""``metadata.json``: what a run is, as it has grown over its sessions.

Every field is optional, so metadata of any earlier version reads, and unknown fields are
kept when it is written again. A value of the wrong kind (a ``spec`` that is a string) is a
damaged file, refused with one line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aidanbench.core.thresholds import Thresholds
from aidanbench.record import files
from aidanbench.record.lines import LineThresholds
from aidanbench.record.usage import LedgerSummary

Open = ConfigDict(extra="allow")
"""Every record here keeps the fields it does not declare (a later version's, another tool's)."""


class Grid(BaseModel):
    """``spec``: every model, temperature and repeat the run was ever asked for, and the
    settings of its latest session."""

    model_config = Open

    models: list[str] = []
    temperatures: list[float] = []
    repeats: int | None = None
    reward_mode: str | None = None
    """``count`` or ``novelty_sum``: what the headline is (a scoring setting)."""
    settings: dict[str, Any] | None = None
    """The latest session's ``Settings`` fields (model and temperature apart)."""
    variants: dict[str, dict[str, Any]] | None = None
    """Each variant label's request fields."""


class ThresholdSource(BaseModel):
    """Where a model's coherence threshold came from."""

    model_config = Open

    kind: str | None = None
    """``benchmark`` (the published 15, on o1-mini's scale), ``given`` or ``calibration``."""
    file: str | None = None
    """The calibration file, for ``calibration``."""
    sha256: str | None = None
    """Its sha256."""
    judge_model: str | None = None
    """The judge it calibrated."""
    note: str | None = None
    """What the calibration could not test (``fitted on passes only …``: its reference held
    too few failures), shown beside it."""

    @classmethod
    def of(cls, coherence: float, given: Mapping[str, Any] | None) -> ThresholdSource:
        """``given`` (a calibration file's record), else ``benchmark`` for the published 15
        and ``given`` for any other number."""
        if given is not None:
            return cls(**given)
        return cls(kind="benchmark" if coherence == Thresholds().coherence else "given")


class Judging(BaseModel):
    """How one model's answers are judged."""

    model_config = Open

    judge_model: str | None = None
    coherence_threshold: float | None = None
    coherence_threshold_source: ThresholdSource | None = None
    judge_samples: int | None = None
    panel: list[dict[str, Any]] | None = None
    """A judge panel's other judges: each one's model, coherence threshold and source."""
    served: dict[str, int] | None = None
    """Replies of the judge by the model the provider said served them."""


class RunSettings(BaseModel):
    """``settings``: scoring settings shared by an early run's lines that record none."""

    model_config = Open

    embedding_model: str | None = None
    judge_model: str | None = None
    thresholds: LineThresholds | None = None
    rule: str | None = None
    temperatures_sent: list[float] | None = None
    pipeline: bool | None = None


class Session(BaseModel):
    """One session: what it asked for, the operational settings it applied, how it ended."""

    model_config = Open

    started_at: str | None = None
    finished_at: str | None = None
    status: str | None = None
    """``running``, ``finished``, ``interrupted``, ``refused``, ``failed: ERROR``,
    ``killed`` (found running by a later session), ``rejudged``."""
    refusal: str | None = None
    """The endpoint's refusal that ended a ``refused`` session."""
    models: list[str] | None = None
    temperatures: list[float] | None = None
    repeats: int | None = None
    questions: int | None = None
    questions_sha256: str | None = None
    questions_source: dict[str, Any] | None = None
    operational: dict[str, Any] | None = None
    """The operational settings this session applied (``core.setting_kinds``)."""
    coherence_threshold_source: ThresholdSource | None = None
    endpoints: dict[str, str] | None = None
    """Host of each role's endpoint."""
    base_urls: dict[str, str] | None = None
    """Base URL each role reached."""
    endpoint_sources: dict[str, str] | None = None
    """Roles whose base URL came from an environment variable (role: the variable)."""
    concurrency: int | None = None
    """Questions kept in flight."""
    concurrency_automatic: bool | None = None
    workers: int | None = None
    """Worker processes the session ran its questions in (``runner.workers``)."""
    server: str | None = None
    store: str | None = None
    """The campaign store (``run --store``), its password removed."""
    package_version: str | None = None
    git_commit: str | None = None


class RunTotals(BaseModel):
    """``totals``: the recorded answers' figures (``record.results.totals``) and, once the
    ledger is summed, what was sent (``record.recorder.record_spending``)."""

    model_config = Open

    questions: int | None = None
    """Question lines."""
    answers: int | None = None
    score: int | None = None
    api_calls: int | None = None
    """Requests: sent (the ledger's) when ``recorded_api_calls`` is present, else recorded."""
    tokens: int | None = None
    dollars: float | None = None
    usage_missing: int | None = None
    errored: int | None = None
    truncated_answers: int | None = None
    recorded_api_calls: int | None = None
    recorded_tokens: int | None = None
    recorded_dollars: float | None = None
    unrecorded: int | None = None
    """Requests sent without a recorded reply (may be billed)."""
    dollars_bound: float | None = None
    """What the run can have cost at most."""


class Forgotten(BaseModel):
    """A model ``aidanbench forget`` took out of the run."""

    model_config = Open

    model: str | None = None
    at: str | None = None
    threads: int | None = None
    lines: int | None = None
    ledger_lines_kept: int | None = None
    dollars_kept: float | None = None


class Metadata(BaseModel):
    """``metadata.json``: the grid, each model's scoring settings (fixed once it is in the
    run) and judging, one ``Session`` per session, provenance and, once a session ends, the
    totals: the recorded answers' and the ledger's (``usage``, what was sent)."""

    model_config = Open

    spec: Grid | None = None
    scoring_settings: dict[str, dict[str, Any]] | None = None
    """Each model's scoring settings and ``prompts_sha256``, fixed once it is in the run."""
    judging: dict[str, Judging] | None = None
    package_version: str | None = None
    git_commit: str | None = None
    python: str | None = None
    prompts_sha256: str | None = None
    endpoints: dict[str, str] | None = None
    questions_source: dict[str, Any] | None = None
    settings: RunSettings | None = None
    server: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    sessions: list[Session] = Field(default_factory=list)
    questions: int | None = None
    """Distinct questions over every line of the run."""
    questions_sha256: str | None = None
    """sha256 of the questions in the run's order."""
    question_set_sha256: str | None = None
    """sha256 of the sorted questions: equal for runs on the same set."""
    categories: dict[str, str] | None = None
    """Each categorised question → its category, as the question sets of the run's sessions
    gave them (a later session's naming wins); reports group scores by them."""
    totals: RunTotals | None = None
    usage: LedgerSummary | None = None
    """The usage ledger's totals: what the run sent, across its sessions."""
    prices: dict[str, Any] | None = None
    caps: dict[str, Any] | None = None
    endpoint_limits: dict[str, Any] | None = None
    forgotten: list[Forgotten] | None = None
    rejudged_from: dict[str, Any] | None = None
    """The run a ``rescore --into`` directory was judged again from."""

    @property
    def reward_mode(self) -> str:
        """The headline the run records (``count`` when it records none)."""
        return (self.spec.reward_mode if self.spec else None) or "count"

    def judging_of(self, model: str) -> Judging | None:
        """How ``model``'s answers are judged, if recorded."""
        return (self.judging or {}).get(model)


REPLAY_KIND = "published run"
"""``questions_source.kind`` of ``aidanbench demo``: the published run replayed by a local
server, so nothing is spent and every dollar shown is what its requests would cost."""


def is_replay(questions_source: Mapping[str, Any] | None) -> bool:
    """Whether a run (its ``questions_source``) is the demo's replay of the published run."""
    return (questions_source or {}).get("kind") == REPLAY_KIND


def question_set_hash(questions: Sequence[str]) -> str:
    """sha256 over the questions (a JSON list), so runs on the same set can be matched."""
    return hashlib.sha256(json.dumps(list(questions)).encode("utf-8")).hexdigest()


def read_metadata(run_dir: Path) -> Metadata | None:
    """``metadata.json`` of a run directory, if present, as the latest commit has it
    (``files.read_outputs``: a ``forget`` writes it with the results files); ``ValueError``
    when damaged."""
    path = run_dir / files.METADATA
    found = files.read_outputs(run_dir, [files.METADATA])[files.METADATA]
    if found is None:
        return None
    try:
        data = json.loads(found.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is damaged (not UTF-8 at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is damaged (not valid JSON: {exc.msg} at line {exc.lineno}; truncated?)"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} is damaged (a JSON {type(data).__name__}, not the object a run writes)"
        )
    try:
        return Metadata.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{path} is damaged ({where!r}: {first['msg']})") from None


def write_metadata(run_dir: Path, metadata: Metadata) -> None:
    """Replace ``metadata.json`` atomically with the fields ``metadata`` was given."""
    files.atomic_write(run_dir / files.METADATA, metadata_text(metadata))


def metadata_text(metadata: Metadata) -> str:
    """``metadata.json``'s text: the fields ``metadata`` was given."""
    return json.dumps(metadata.model_dump(mode="json", exclude_unset=True), indent=2)
