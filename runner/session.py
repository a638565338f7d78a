"""What a session may do to a run directory, and what it adds to the run's metadata.

``metadata.json`` records the run as it has grown: the grid ever asked for (``spec``), each
model's scoring settings (fixed once the model is in the run) and one entry per session with
the operational settings it applied. This module decides those records (``grown_metadata``)
and refuses a session that would change how a model in the run is measured; the recorder
(``record.recorder``) writes them.
"""

from __future__ import annotations

import platform
import sqlite3
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import closing
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from aidanbench.core.errors import UsageError, printable
from aidanbench.core.setting_kinds import (
    OPERATIONAL_FIELDS,
    PER_THREAD_FIELDS,
    SCORING_FIELDS,
    operational_settings,
    scoring_settings,
)
from aidanbench.core.settings import ROLES, Settings, variant_label
from aidanbench.nodes.prompts import prompts_sha256
from aidanbench.record import files
from aidanbench.record.lines import normal_text, read_lines
from aidanbench.record.metadata import (
    Grid,
    Judging,
    Metadata,
    RunSettings,
    Session,
    ThresholdSource,
    question_set_hash,
)
from aidanbench.record.recorder import now
from aidanbench.runner.campaign import redacted
from aidanbench.runner.spec import RunSpec
from aidanbench.runner.tasks import Task
from aidanbench.services.pricing import price_table

RESCORE_FIELDS = frozenset(
    {"coherence_threshold", "novelty_threshold", "llm_novelty_threshold", "max_answers"}
)
"""Scoring settings ``aidanbench rescore`` can apply to stored answers when stricter."""


def stored_scoring(stored: Metadata | None) -> dict[str, dict[str, Any]]:
    """Each model's recorded scoring settings; an older directory without them is read from
    its ``spec``, and without a readable one each thread's ``measured`` is checked instead."""
    if stored is None:
        return {}
    if stored.scoring_settings is not None:
        return dict(stored.scoring_settings)
    spec = stored.spec
    if spec is None or spec.settings is None:
        return {}
    fields = {
        k: v
        for k, v in spec.settings.items()
        if k in Settings.model_fields and k not in PER_THREAD_FIELDS
    }
    if spec.reward_mode is not None:
        fields["reward_mode"] = spec.reward_mode
    found: dict[str, dict[str, Any]] = {}
    for model in spec.models:
        try:
            settings = Settings(model=model, **fields)
        except ValueError:
            return {}
        found[model] = {**scoring_settings(settings), "prompts_sha256": stored.prompts_sha256}
    return found


def stored_operational(stored: Metadata | None) -> dict[str, Any]:
    """The operational settings of the run's latest session (or of its ``spec``)."""
    if stored is None:
        return {}
    if stored.sessions and stored.sessions[-1].operational is not None:
        operational = stored.sessions[-1].operational
        return {k: v for k, v in operational.items() if k in OPERATIONAL_FIELDS}
    settings = stored.spec.settings if stored.spec else None
    if settings is None:
        return {}
    names = {"max_concurrency", *OPERATIONAL_FIELDS}
    return {k: v for k, v in settings.items() if k in names and k in Settings.model_fields}


def model_fields(spec: RunSpec, stored: Metadata | None) -> dict[str, dict[str, Any]]:
    """The settings fields of each model; with ``use_stored_settings`` a field the session
    leaves out takes the run's recorded value. A field given is always used (and checked)."""
    scoring = stored_scoring(stored)
    operational = stored_operational(stored) if spec.use_stored_settings else {}
    operational.pop("cache_path", None)
    fields: dict[str, dict[str, Any]] = {}
    for model in spec.models:
        base = dict(operational)
        if spec.use_stored_settings and model in scoring:
            record = scoring[model]
            base |= {k: v for k, v in record.items() if k in SCORING_FIELDS}
        fields[model] = base | spec.settings
    return fields


def refuse_scoring_changes(spec: RunSpec, stored: Metadata | None, tasks: Sequence[Task]) -> None:
    """One line naming the first scoring setting this session changes for a model already
    in the run: its threads would mix two measurements."""
    scoring = stored_scoring(stored)
    seen: set[str] = set()
    for task in tasks:
        model = task.settings.model
        if model in seen or model not in scoring:
            continue
        seen.add(model)
        record = scoring[model]
        current = measurement(task.settings)
        for name in sorted(current):
            if name in record and record[name] != current[name]:
                raise UsageError(
                    scoring_change_line(spec.run_dir, model, name, record[name], current[name])
                )


def measurement(settings: Settings) -> dict[str, Any]:
    """How a model is measured: its scoring settings and the prompts' hash."""
    return {**scoring_settings(settings), "prompts_sha256": prompts_sha256()}


def scoring_change_line(run_dir: Path, model: str, name: str, stored: Any, given: Any) -> str:
    """The refusal of a scoring change, naming the setting and what to do instead."""
    flag = "--" + name.replace("_", "-")
    if name == "variant_fields":
        flag = f"--variant {variant_label(model) or 'LABEL'}=JSON"
    if name == "prompts_sha256":
        what = "with other prompt texts (prompts_sha256 differs)"
    else:
        shown, asked = printable(repr(stored)), printable(repr(given))
        what = f"with {name} = {shown}; this command gives {asked} ({flag})"
    rescore = (
        "; to apply a stricter threshold or cap to the stored answers, use aidanbench rescore"
        if name in RESCORE_FIELDS
        else ""
    )
    keep = (
        ""
        if name == "prompts_sha256"
        else f"; to continue with the recorded value, leave {flag} out and add "
        "--use-stored-settings"
    )
    return (
        f"run directory {printable(str(run_dir))} measured {printable(model)} {what}: a "
        f"scoring setting cannot change within a run; start a new --run-dir for it{rescore}"
        f"{keep}"
    )


def stored_spellings(run_dir: Path) -> dict[str, str]:
    """How the run directory's lines spell each question, by its normal form: an older
    run's thread ids may hash an unnormalised spelling its answers were generated with, so
    the run goes on asking it. Where two lines differ, the normal spelling wins, else the
    first."""
    if not (run_dir / files.QUESTIONS).exists():
        return {}
    try:
        lines = read_lines(run_dir)
    except (ValueError, OSError):
        return {}
    found: dict[str, str] = {}
    for line in lines:
        key = normal_text(line.question)
        if key not in found or line.question == key:
            found[key] = line.question
    return found


def spelled(questions: Sequence[str], spellings: dict[str, str]) -> list[str]:
    """``questions`` (normal forms) as the run directory already spells them."""
    return [spellings.get(q, q) for q in questions]


def session_record(
    spec: RunSpec,
    tasks: Sequence[Task],
    in_flight: int,
    sources: Mapping[str, str] | None = None,
) -> Session:
    """What this session asked for and the operational settings it applied (``in_flight``:
    ``runner.admission``; ``sources``: roles whose URL came from ``OPENAI_BASE_URL``)."""
    first = tasks[0].settings
    questions = spec.questions_list
    source = spec.coherence_threshold_source
    return Session(
        started_at=now(),
        finished_at=None,
        status="running",
        models=list(spec.models),
        temperatures=list(spec.temperatures),
        repeats=spec.repeats,
        questions=len(questions),
        questions_sha256=question_set_hash(sorted(questions)),
        questions_source=spec.questions_source,
        operational=operational_settings(first),
        coherence_threshold_source=None if source is None else ThresholdSource(**source),
        endpoints={role: first.endpoint(role).host for role in ROLES},
        base_urls={role: first.endpoint(role).url for role in ROLES},
        endpoint_sources=dict(sources or {}),
        concurrency=in_flight,
        concurrency_automatic=spec.concurrency is None,
        server=spec.server,
        store=None if spec.store is None else redacted(spec.store),
        package_version=importlib_metadata.version("aidanbench"),
        git_commit=git_commit(),
    )


def grown_metadata(
    stored: Metadata | None,
    spec: RunSpec,
    tasks: Sequence[Task],
    in_flight: int,
    sources: Mapping[str, str] | None = None,
) -> Metadata:
    """The run's metadata with this session added: the grid grows, nothing is dropped."""
    meta = stored.model_copy(deep=True) if stored is not None else Metadata()
    old = meta.spec or Grid()
    first = tasks[0].settings
    temperatures = list(dict.fromkeys([*old.temperatures, *spec.temperatures]))
    meta.spec = Grid.model_validate(
        {**old.model_dump(exclude_unset=True), **_grid_fields(old, spec, first, temperatures)}
    )
    scoring, judging = stored_scoring(stored), dict(meta.judging or {})
    for task in tasks:
        scoring.setdefault(task.settings.model, measurement(task.settings))
        judging.setdefault(task.settings.model, judging_record(task.settings, spec))
    meta.scoring_settings, meta.judging = scoring, judging
    record = session_record(spec, tasks, in_flight, sources)
    first_seen = {
        "package_version": record.package_version,
        "git_commit": record.git_commit,
        "python": platform.python_version(),
        "prompts_sha256": prompts_sha256(),
        "questions_source": spec.questions_source,
    }
    for name, value in first_seen.items():
        if name not in meta.model_fields_set:
            setattr(meta, name, value)
    meta.endpoints = record.endpoints
    meta.settings = run_settings(first, temperatures)
    if spec.categories:
        meta.categories = {**(meta.categories or {}), **spec.categories}
    if spec.server is not None:
        meta.server = spec.server
    meta.started_at = meta.started_at or record.started_at
    for session in meta.sessions:
        # the lock is ours: a session still marked running was killed before its end
        if session.status == "running":
            session.status = "killed"
    meta.sessions = [*meta.sessions, record]
    return meta


def _grid_fields(
    old: Grid, spec: RunSpec, first: Settings, temperatures: list[float]
) -> dict[str, Any]:
    return {
        "models": list(dict.fromkeys([*old.models, *spec.models])),
        "temperatures": temperatures,
        "repeats": max(old.repeats or 1, spec.repeats),
        "reward_mode": old.reward_mode or first.reward_mode,
        "settings": {
            **(old.settings or {}),
            **{
                k: v
                for k, v in first.model_dump(mode="json").items()
                if k not in ("model", "temperature", "variant_fields", "cache_path")
            },
        },
        "variants": {**(old.variants or {}), **spec.variants},
    }


def run_settings(first: Settings, temperatures: Sequence[float]) -> RunSettings:
    """The settings record of an early run's metadata, kept for readers of lines that do
    not record their own."""
    return RunSettings(
        embedding_model=first.embedding_model,
        judge_model=first.judge_model,
        thresholds=first.thresholds.record(),
        rule="valid iff every score that is on is strictly greater than its threshold",
        temperatures_sent=list(temperatures),
        pipeline=first.pipeline,
    )


def judging_record(settings: Settings, spec: RunSpec) -> Judging:
    """How a model's answers are judged and where each judge's coherence threshold came
    from (``ThresholdSource``)."""
    source = spec.coherence_threshold_source
    record = Judging(
        judge_model=settings.judge_model,
        coherence_threshold=settings.coherence_threshold,
        coherence_threshold_source=ThresholdSource.of(settings.coherence_threshold, source),
        judge_samples=settings.judge_samples,
    )
    if settings.judge_panel:
        sources = [*spec.panel_threshold_sources, *[None] * len(settings.judge_panel)]
        record.panel = [
            {
                "judge_model": seat.model,
                "coherence_threshold": seat.coherence_threshold,
                "coherence_threshold_source": ThresholdSource.of(
                    seat.coherence_threshold, given
                ).model_dump(exclude_none=True),
            }
            for seat, given in zip(settings.judge_panel, sources, strict=False)
        ]
    return record


def sqlite_problem(path: Path) -> str | None:
    """What is wrong with the SQLite file at ``path`` (None: sound), read-only and
    immutable, so checking writes nothing beside it."""
    try:
        with closing(sqlite3.connect(files.read_only_uri(path), uri=True)) as db:
            db.execute("SELECT name FROM sqlite_master").fetchall()
            status = db.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.Error as exc:
        return str(exc)
    if status is None:
        return "?"
    return None if status[0] == "ok" else str(status[0])


def check_checkpoints(path: Path) -> None:
    """Refuse a damaged ``checkpoints.sqlite`` before anything runs, saying what it means."""
    if not path.exists():
        return
    problem = sqlite_problem(path)
    if problem is not None:
        raise UsageError(
            f"{printable(str(path))} is damaged ({printable(problem)}): "
            "the saved progress of this run's questions cannot be read; the results files "
            "keep what finished. Move it away to run the unfinished questions again from "
            "the start, or use another --run-dir"
        )


def git_commit() -> str | None:
    """The checkout's commit, when the package runs from one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def spending(spec: RunSpec, limits: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a finished session records beside what it spent: the price table, its caps, and
    each endpoint's adaptive limit when known."""
    prices = spec.settings.get("prices_path")
    recorded: dict[str, Any] = {
        "prices": {**price_table(prices).describe(), "file": prices},
        "caps": {
            "max_cost": spec.max_cost,
            "max_question_cost": spec.settings.get("max_question_cost"),
            "max_question_seconds": spec.settings.get("max_question_seconds"),
        },
    }
    if limits is not None:
        recorded["endpoint_limits"] = dict(limits)
    return recorded
