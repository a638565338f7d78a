"""``run(spec)``: one session of a run, from the checks to the summary.

Every check of the specification and of the run directory comes before the first write
(``prepare``). Then, holding the run directory's lock (``record.recorder``), ``execute``
brings every thread to a stop with the drive loop, locally or on a LangGraph server, and
ends the session: earlier sessions' lines kept, totals and spending recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from aidanbench.analysis.summary import SummaryRow, summarise
from aidanbench.core.base_url import environment_base_urls
from aidanbench.core.errors import ConfigError, EndpointRefused, UsageError
from aidanbench.core.settings import Settings
from aidanbench.record import files
from aidanbench.record.lines import QuestionLine
from aidanbench.record.metadata import Metadata, RunTotals, is_replay
from aidanbench.record.recorder import Recorder, stored_metadata
from aidanbench.record.results import QuestionResult
from aidanbench.runner import admission, campaign, forget, preflight, session, workers
from aidanbench.runner.claims import store_outage
from aidanbench.runner.drive import collecting_seldom
from aidanbench.runner.local import (
    check_recorded_measurements,
    lines_from_checkpoints,
)
from aidanbench.runner.preflight import Preflight
from aidanbench.runner.progress import Progress
from aidanbench.runner.spec import RunSpec, build_tasks, run_fields
from aidanbench.runner.tasks import Task
from aidanbench.services import ServicesFactory, clients


@dataclass(frozen=True)
class RunResult:
    """What a session leaves: the run directory's lines and metadata as written, and what
    every view shows of them, computed here (nothing is read back)."""

    run_dir: Path
    lines: list[QuestionLine]
    """Every question line of the run directory, earlier sessions' included."""
    metadata: Metadata
    """``metadata.json`` as written at the end of the session."""
    results: list[QuestionResult]
    """The lines as every report reads them (``record.results``)."""
    notes: list[str]
    """Lines counted once for two spellings of one question (``record.results.distinct``)."""
    summary: list[SummaryRow]
    """One row per (model, temperature), as ``aidanbench report`` shows them."""

    @property
    def totals(self) -> RunTotals:
        """As recorded in ``metadata.json`` (calls, tokens and dollars as the usage ledger
        has them, on a local run)."""
        return self.metadata.totals or RunTotals()

    @property
    def failed(self) -> list[QuestionLine]:
        """Lines that stopped on an error: running the same spec again retries them."""
        return [line for line in self.lines if line.errored]


@dataclass(frozen=True)
class Prepared:
    """A session checked and ready to start: nothing has been written yet."""

    spec: RunSpec
    tasks: list[Task]
    stored: Metadata | None
    sources: dict[str, str] = field(default_factory=dict)
    """Roles whose base URL came from ``OPENAI_BASE_URL`` (role: the variable)."""
    checked: Preflight | None = None
    """What the endpoint checks found (None: skipped, or a server run)."""

    @property
    def in_flight(self) -> int:
        """Questions the session keeps in flight (``runner.admission``)."""
        return admission.chains_in_flight(
            self.spec.concurrency, len(self.tasks), remote=self.spec.server is not None
        )

    @property
    def workers(self) -> int:
        """Worker processes the session's questions are spread over (``runner.workers``)."""
        return workers.worker_count(
            self.spec.workers, len(self.tasks), remote=self.spec.server is not None
        )


async def prepare(
    spec: RunSpec, *, cells: Collection[tuple[str, float, str]] | None = None
) -> Prepared:
    """Every check of the session, before anything is written (a forget cut short after
    its commit is finished first: ``runner.forget.finish``); ``cells`` (model,
    temperature, question) keep only those of the grid's threads. ``UsageError`` (one line):
    a scoring setting changed, a damaged checkpoint file, a thread measured otherwise, a
    missing key, or what ``runner.preflight`` refuses (the checks' only requests)."""
    if spec.store is not None:
        if spec.server is not None:
            raise UsageError("a run uses --store or --server, not both")
        await campaign.check_store(spec.store)
    forget.finish(spec.run_dir)
    stored = stored_metadata(spec.run_dir)
    fields = session.model_fields(spec, stored)
    sources: dict[str, str] = {}
    if spec.server is None:  # a server applies its own environment's OPENAI_BASE_URL
        resolved = {m: environment_base_urls(f, os.environ) for m, f in fields.items()}
        fields = {m: found for m, (found, _) in resolved.items()}
        sources = next(iter(resolved.values()))[1]
    questions = session.spelled(spec.questions_list, session.stored_spellings(spec.run_dir))
    tasks = build_tasks(spec, fields, questions)
    if cells is not None:  # a grid with holes: the published run lacks one question of one model
        tasks = [
            t for t in tasks if (t.settings.model, t.settings.temperature, t.question) in cells
        ]
    session.refuse_scoring_changes(spec, stored, tasks)
    checkpoints = spec.run_dir / files.CHECKPOINTS
    session.check_checkpoints(checkpoints)
    local = spec.server is None and spec.store is None
    if local and checkpoints.exists() and not session.stored_scoring(stored):
        await check_recorded_measurements(tasks, checkpoints)
    checked = None
    if spec.server is None:
        check_keys(tasks[0].settings)  # a server reads the keys from its own environment
        if spec.preflight:
            distinct = {t.settings.model_dump_json(): t.settings for t in tasks}
            checked = await preflight.check(list(distinct.values()), sources=sources)
    return Prepared(spec, tasks, stored, sources, checked)


def check_keys(settings: Settings) -> None:
    """Every role's key variable must be set before anything starts (one line)."""
    try:
        clients.check_keys(settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


async def execute(
    prepared: Prepared,
    *,
    progress: Progress | None = None,
    services: ServicesFactory | None = None,
) -> RunResult:
    """Run a prepared session to the end; interrupted, the session is recorded as such."""
    spec, tasks = prepared.spec, prepared.tasks
    replay = is_replay(spec.questions_source)
    progress = progress if progress is not None else Progress(replay=replay)
    repair: Callable[[Path], list[QuestionLine]] | None = None
    if spec.store is not None:
        repair = functools.partial(campaign.machine_lines, spec.store)
    elif spec.server is None:
        repair = lines_from_checkpoints
    with (
        collecting_seldom(),  # the finish reads every ledger line: millions of objects alive
        Recorder.open(
            spec.run_dir, max_cost=spec.max_cost, repair=repair, damaged=session.sqlite_problem
        ) as recorder,
    ):
        count = prepared.workers if services is None else 1  # a factory stays in this process
        meta = session.grown_metadata(
            recorder.metadata, spec, tasks, prepared.in_flight, prepared.sources
        )
        meta.sessions[-1].workers = count
        recorder.start_session(meta, (task.question for task in tasks))
        if prepared.checked is not None:
            prepared.checked.record(recorder, run_fields(spec)["prices_path"])
        outage = store_outage(spec, progress.store)
        try:
            with progress:
                async with workers.backend(
                    spec, services, progress, count, recorder, outage
                ) as questions:
                    await workers.drive_workers(
                        tasks,
                        questions,
                        recorder,
                        count=count,
                        spec=spec,
                        meta=meta,
                        progress=progress,
                        budget=recorder,
                        outage=outage,
                    )
        except BaseException as exc:
            refusal = str(exc) if isinstance(exc, EndpointRefused) else None
            recorder.end_session(ended_by(exc), refusal=refusal)
            raise
        limits = None
        if progress.endpoints is not None:
            limits = {host: dataclasses.asdict(s) for host, s in progress.endpoints().items()}
        ended = recorder.finish_session(session.spending(spec, limits))
        if spec.store is not None:
            await campaign.record_machine(spec.store, spec.run_dir, ended.metadata, outage)
    summary = summarise(ended.results, ended.metadata.reward_mode)
    return RunResult(spec.run_dir, ended.lines, ended.metadata, ended.results, ended.notes, summary)


def ended_by(exc: BaseException) -> str:
    """A session's status when ``exc`` ended it."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, EndpointRefused):
        return "refused"
    return f"failed: {type(exc).__name__}"


async def run(
    spec: RunSpec,
    *,
    progress: Progress | None = None,
    services: ServicesFactory | None = None,
) -> RunResult:
    """Run (or resume, or grow) the run directory of ``spec``; ``progress`` defaults to a live table
    on a terminal (log lines otherwise), ``services`` to OpenAI-compatible clients closed at the
    end."""
    return await execute(await prepare(spec), progress=progress, services=services)


def run_sync(
    spec: RunSpec,
    *,
    progress: Progress | None = None,
    services: ServicesFactory | None = None,
) -> RunResult:
    """``run`` for code without an event loop (scripts); notebooks ``await run(spec)``."""
    return asyncio.run(run(spec, progress=progress, services=services))
