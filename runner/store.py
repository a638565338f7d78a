"""The run directory as the engine keeps it: metadata, sessions, carried lines, spending.

``metadata.json`` records the run as it has grown: every model, temperature and repeat
ever asked for (``spec``), each model's scoring settings (``scoring_settings``, fixed
once the model is in the run) and one entry per session in ``sessions`` with the
operational settings that session applied (endpoints, limits, timeouts, server…),
when it started and ended and how.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
from aidanbench.graph.questions import question_set_hash
from aidanbench.nodes.prompts import prompts_sha256
from aidanbench.record import files
from aidanbench.record.lines import LineThresholds, QuestionLine, normal_question, read_lines
from aidanbench.record.metadata import (
    Grid,
    Judging,
    Metadata,
    RunSettings,
    RunTotals,
    Session,
    ThresholdSource,
    read_metadata,
)
from aidanbench.record.usage import summarise_ledger
from aidanbench.runner.campaign import redacted
from aidanbench.runner.spec import RunSpec, base_urls
from aidanbench.runner.tasks import Task
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import forget_ledger

RESCORE_FIELDS = frozenset(
    {"coherence_threshold", "novelty_threshold", "llm_novelty_threshold", "max_answers"}
)
"""Scoring settings ``aidanbench rescore`` can apply to stored answers when stricter."""


def stored_metadata(run_dir: Path) -> Metadata | None:
    """The run directory's ``metadata.json``; a damaged one is a one-line ``UsageError``."""
    if not run_dir.is_dir():
        return None
    try:
        return read_metadata(run_dir)
    except ValueError as exc:
        raise UsageError(
            f"{printable(str(exc))}; restore it from a backup, or move it away to continue "
            "(each question thread records its own settings)"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {run_dir / files.METADATA}: {exc.strerror}") from None


def stored_scoring(stored: Metadata | None) -> dict[str, dict[str, Any]]:
    """Each model's recorded scoring settings.

    Directories written before the record existed are read from their ``spec`` (one set
    of settings for every model); without a readable ``spec`` there is no record and
    each thread's own (``measured``) is what a resumed thread is checked against.
    """
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
    """The settings fields of each model of the session, stored ones filled in when asked.

    With ``use_stored_settings`` a field the session leaves out takes the run's value: a
    model's recorded scoring setting, or the latest session's operational one. A field
    the session gives is always used (and checked, when it is a scoring one).
    """
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
        current = {**scoring_settings(task.settings), "prompts_sha256": prompts_sha256()}
        for name in sorted(current):
            if name in record and record[name] != current[name]:
                raise UsageError(
                    scoring_change_line(spec.run_dir, model, name, record[name], current[name])
                )


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


def carried_lines(run_dir: Path) -> list[QuestionLine]:
    """The question lines already in the run directory (with their answers), in order.

    A later session that leaves a model, temperature, question or repeat out keeps these
    lines in its outputs: leaving something out never deletes its results. Files from an
    interrupted write cannot be trusted line by line; they are left for the threads of
    this session to rewrite, with a warning.
    """
    if not (run_dir / files.QUESTIONS).exists():
        return []
    try:
        return read_lines(run_dir)
    except ValueError as exc:
        print(f"{printable(str(exc))}; only this session's questions are written", file=sys.stderr)
        return []


def stored_spellings(run_dir: Path) -> dict[str, str]:
    """How the run directory's question lines spell each question, by its normal form.

    A run made before questions were normalised may have threads for a question with a
    trailing space or in another Unicode form; their ids hash that spelling, so the run
    goes on asking it under that spelling (its earlier answers were generated with it).
    Where two lines spell one question differently, the normal spelling wins, else the
    first.
    """
    if not (run_dir / files.QUESTIONS).exists():
        return {}
    try:
        lines = read_lines(run_dir)
    except (ValueError, OSError):
        return {}
    found: dict[str, str] = {}
    for line in lines:
        key = normal_question(line.question)
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
    """What this session asked for and the operational settings it applied, with the
    questions it keeps in flight (``in_flight``: ``runner.admission``), the base URL each
    role reached and which roles took theirs from ``OPENAI_BASE_URL``."""
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
        endpoints=endpoints(first),
        base_urls=base_urls(first),
        endpoint_sources=dict(sources or {}),
        concurrency=in_flight,
        concurrency_automatic=spec.concurrency is None,
        server=spec.server,
        store=None if spec.store is None else redacted(spec.store),
        package_version=importlib_metadata.version("aidanbench"),
        git_commit=git_commit(),
    )


def endpoints(settings: Settings) -> dict[str, str]:
    """Host of each role's endpoint."""
    return {role: settings.endpoint(role).host for role in ROLES}


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
    scoring = stored_scoring(stored)
    for task in tasks:
        scoring.setdefault(
            task.settings.model,
            {**scoring_settings(task.settings), "prompts_sha256": prompts_sha256()},
        )
    meta.scoring_settings = scoring
    judging = dict(meta.judging or {})
    for task in tasks:
        judging.setdefault(
            task.settings.model, judging_record(task.settings, spec.coherence_threshold_source)
        )
    meta.judging = judging
    given = set(meta.model_fields_set)
    if "package_version" not in given:
        meta.package_version = importlib_metadata.version("aidanbench")
    if "git_commit" not in given:
        meta.git_commit = git_commit()
    if "python" not in given:
        meta.python = platform.python_version()
    if "prompts_sha256" not in given:
        meta.prompts_sha256 = prompts_sha256()
    meta.endpoints = endpoints(first)
    if "questions_source" not in given:
        meta.questions_source = spec.questions_source
    meta.settings = run_settings(first, temperatures)
    if spec.server is not None:
        meta.server = spec.server
    meta.started_at = meta.started_at or now()
    for session in meta.sessions:
        # the lock is ours: a session still marked running was killed before its end
        if session.status == "running":
            session.status = "killed"
    meta.sessions = [*meta.sessions, session_record(spec, tasks, in_flight, sources)]
    return meta


def _grid_fields(
    old: Grid, spec: RunSpec, first: Settings, temperatures: list[float]
) -> dict[str, Any]:
    """What a session makes of the run's grid: its models, temperatures and repeats
    added, its settings over the earlier ones, its variants added."""
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
        thresholds=LineThresholds(
            coherence=first.thresholds.coherence,
            novelty=first.thresholds.novelty,
            llm_novelty=first.thresholds.llm_novelty,
        ),
        rule="valid iff coherence > coherence threshold and novelty > novelty threshold "
        "(and llm novelty > its threshold when on); strictly greater",
        temperatures_sent=list(temperatures),
        pipeline=first.pipeline,
    )


def judging_record(settings: Settings, source: Mapping[str, Any] | None) -> Judging:
    """How a model's answers are judged, and where its coherence threshold came from: a
    calibration file (its path and sha256), ``given`` on the command line, or
    ``benchmark``, the published 15 (a cut on o1-mini's scale)."""
    if source is None:
        default = Settings.model_fields["coherence_threshold"].default
        source = {"kind": "benchmark" if settings.coherence_threshold == default else "given"}
    return Judging(
        judge_model=settings.judge_model,
        coherence_threshold=settings.coherence_threshold,
        coherence_threshold_source=ThresholdSource(**source),
        judge_samples=settings.judge_samples,
    )


def drop_models_without_lines(
    meta: Metadata, models: Sequence[str], lines: Sequence[QuestionLine]
) -> list[str]:
    """Take each of ``models`` that has no question line out of the run's model lists
    (``spec.models``, ``scoring_settings``, ``judging``); return them.

    Such a model never produced an answer or a stop (a mistyped name stopped by its
    endpoint's refusal, a run interrupted before its first answer): it is not part of the
    run, and a later session may bring it in with other scoring settings. Its threads
    are left as they are (``aidanbench forget`` removes them); a thread's own record
    (``measured``) still guards what it continues. The sessions' own records keep what
    each session asked for.
    """
    present = {line.model for line in lines}
    gone = [model for model in dict.fromkeys(models) if model not in present]
    if meta.spec is not None and "models" in meta.spec.model_fields_set:
        meta.spec.models = [m for m in meta.spec.models if m not in gone]
    if meta.scoring_settings is not None:
        meta.scoring_settings = {m: s for m, s in meta.scoring_settings.items() if m not in gone}
    if meta.judging is not None:
        meta.judging = {m: j for m, j in meta.judging.items() if m not in gone}
    return gone


def question_counts(meta: Metadata, questions: Iterable[str]) -> None:
    """Record the run's question set (every line's, all sessions) in ``meta``."""
    found = list(dict.fromkeys(normal_question(question) for question in questions))
    meta.questions = len(found)
    meta.questions_sha256 = question_set_hash(found)
    meta.question_set_sha256 = question_set_hash(sorted(found))


def record_spending(meta: Metadata, spec: RunSpec) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; ``api_calls``
    and ``tokens`` become what was actually sent, across sessions, redone calls
    included, ``dollars`` the run's cost (null when a model has no price or a reply no
    usage), ``unrecorded`` the requests sent without a recorded reply and
    ``dollars_bound`` what the run can have cost at most (``record.usage``).
    """
    path = spec.run_dir / files.LEDGER
    forget_ledger(path)
    if not path.exists():
        return
    usage = summarise_ledger(path)
    recorded = meta.totals or RunTotals()
    meta.totals = RunTotals.model_validate(
        {
            **recorded.model_dump(exclude_unset=True),
            "recorded_api_calls": recorded.api_calls,
            "recorded_tokens": recorded.tokens,
            "recorded_dollars": recorded.dollars,
            "api_calls": usage.api_calls,
            "unrecorded": usage.unrecorded,
            "tokens": usage.tokens,
            "dollars": usage.dollars,
            "dollars_bound": usage.dollars_bound,
        }
    )
    meta.usage = usage
    for judging in (meta.judging or {}).values():
        judging.served = (usage.served_models or {}).get(f"judge:{judging.judge_model}", {})
    prices = spec.settings.get("prices_path")
    meta.prices = {**price_table(prices).describe(), "file": prices}
    meta.caps = {
        "max_cost": spec.max_cost,
        "max_question_cost": spec.settings.get("max_question_cost"),
        "max_question_seconds": spec.settings.get("max_question_seconds"),
    }


def sqlite_problem(path: Path) -> str | None:
    """What is wrong with the SQLite file at ``path`` (None when it reads as sound).

    Opened read-only and immutable, so checking it writes nothing beside it.
    """
    try:
        with closing_db(sqlite3.connect(files.read_only_uri(path), uri=True)) as db:
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


def set_aside_damaged_cache(path: Path) -> None:
    """``cache.sqlite`` only saves recomputation: a damaged one is moved aside and rebuilt."""
    if not path.exists() or sqlite_problem(path) is None:
        return
    aside = path.with_name(f"{path.name}.damaged")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    print(
        f"{printable(str(path))} was damaged and is only a cache: moved to {aside.name}, "
        "rebuilt as the run goes",
        file=sys.stderr,
    )


@contextmanager
def closing_db(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A sqlite3 connection closed on exit (its own context manager only commits)."""
    try:
        yield db
    finally:
        db.close()


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


def now() -> str:
    """The local time, as metadata records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
