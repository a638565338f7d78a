"""``run(spec)``: one session of a run, from the checks to the summary.

Every check of the specification and of the run directory comes before the first
write. Then, holding the directory's lock, the session is added to the metadata, every
thread of the session is brought to a stop (skipped when finished, continued, retried)
by the drive loop on the local graph or on a LangGraph server, the outputs are rewritten
with the lines of earlier sessions kept, and the totals are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aidanbench.analysis.summary import SummaryRow, summarise
from aidanbench.core.base_url import environment_base_urls
from aidanbench.core.errors import ConfigError, EndpointRefused, UsageError
from aidanbench.core.settings import Settings
from aidanbench.record import files
from aidanbench.record.lines import QuestionLine
from aidanbench.record.metadata import Metadata, RunTotals, write_metadata
from aidanbench.record.results import QuestionResult, results_of, run_totals, totals
from aidanbench.runner import admission, campaign, preflight, store, workers
from aidanbench.runner.claims import shared_claims
from aidanbench.runner.drive import Questions, drive
from aidanbench.runner.local import check_recorded_measurements, local_questions
from aidanbench.runner.preflight import Preflight
from aidanbench.runner.progress import Progress
from aidanbench.runner.spec import RunSpec, build_tasks, run_fields
from aidanbench.runner.tasks import RunLines, Task
from aidanbench.services import OpenAIServices, ServicesFactory, clients
from aidanbench.services.usage import ledger


@dataclass(frozen=True)
class RunResult:
    """What a session leaves: the run directory's lines and metadata, as written, and
    what every view shows of them, computed from them here (nothing is read back)."""

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
        """As recorded in ``metadata.json``: questions, answers, score; API calls, tokens
        and dollars as sent (the usage ledger's) on a local run."""
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
    """Every check of the session, before anything is written.

    ``cells`` (model, temperature, question) keep only those of the grid's threads (every
    one by default).

    Raises ``UsageError`` with one line: a scoring setting changed for a model already in
    the run, a damaged checkpoint file, a thread measured otherwise, a missing key, or
    what the endpoint checks refuse (``runner.preflight``: an unreachable endpoint, an
    unknown or retired model, a refused key). The checks' only requests are ``GET
    /models`` and, where that does not name a model, one minimal request of its role.
    """
    if spec.store is not None:
        if spec.server is not None:
            raise UsageError("a run uses --store or --server, not both")
        await campaign.check_store(spec.store)
    stored = store.stored_metadata(spec.run_dir)
    fields = store.model_fields(spec, stored)
    sources: dict[str, str] = {}
    if spec.server is None:  # a server applies its own environment's OPENAI_BASE_URL
        resolved = {m: environment_base_urls(f, os.environ) for m, f in fields.items()}
        fields = {m: found for m, (found, _) in resolved.items()}
        sources = next(iter(resolved.values()))[1]
    questions = store.spelled(spec.questions_list, store.stored_spellings(spec.run_dir))
    tasks = build_tasks(spec, fields, questions)
    if cells is not None:  # a grid with holes: the published run lacks one question of one model
        tasks = [
            t for t in tasks if (t.settings.model, t.settings.temperature, t.question) in cells
        ]
    store.refuse_scoring_changes(spec, stored, tasks)
    checkpoints = spec.run_dir / files.CHECKPOINTS
    store.check_checkpoints(checkpoints)
    local = spec.server is None and spec.store is None
    if local and checkpoints.exists() and not store.stored_scoring(stored):
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
    run_dir = spec.run_dir
    progress = progress if progress is not None else Progress()
    with files.run_lock(run_dir):
        files.remove_leftovers(run_dir)
        store.set_aside_damaged_cache(run_dir / files.CACHE)
        carried = store.carried_lines(run_dir)
        in_flight = prepared.in_flight
        meta = store.grown_metadata(prepared.stored, spec, tasks, in_flight, prepared.sources)
        session = meta.sessions[-1]
        count = prepared.workers if services is None else 1  # a factory stays in this process
        session.workers = count
        asked = dict.fromkeys(task.question for task in tasks)
        store.question_counts(meta, [*(line.question for line in carried), *asked])
        write_metadata(run_dir, meta)
        if prepared.checked is not None:
            ledger_path = run_dir / files.LEDGER
            prepared.checked.record(ledger(ledger_path), run_fields(spec)["prices_path"])
        lines = RunLines(run_dir, carried=carried)
        if spec.server is None:  # the run-wide budget: earlier sessions' spending counts
            ledger(run_dir / files.LEDGER).max_cost = spec.max_cost
        try:
            with progress:
                async with backend(spec, services, progress, share=count) as questions:
                    if count > 1:
                        all_lines = await workers.drive_workers(
                            tasks,
                            questions,
                            lines,
                            count=count,
                            spec=spec,
                            meta=meta,
                            progress=progress,
                        )
                    else:
                        async with shared_claims(spec, meta, progress) as claims:
                            gate = admission.admission(
                                spec.concurrency, len(tasks), remote=spec.server is not None
                            )
                            all_lines = await drive(
                                tasks,
                                questions,
                                lines,
                                admission=gate,
                                progress=progress,
                                claims=claims,
                            )
        except BaseException as exc:
            session.status = ended_by(exc)
            if isinstance(exc, EndpointRefused):
                session.refusal = str(exc)
            session.finished_at = store.now()
            store.drop_models_without_lines(meta, spec.models, lines.all())
            with contextlib.suppress(OSError):  # a full disk: the first error is the one to tell
                write_metadata(run_dir, meta)
            raise
        session.status = "finished"
        session.finished_at = meta.finished_at = store.now()
        store.drop_models_without_lines(meta, spec.models, all_lines)
        results, notes = results_of(all_lines, meta)
        meta.totals = run_totals(totals(results))
        store.record_spending(meta, spec)
        if progress.endpoints is not None:
            meta.endpoint_limits = {
                host: dataclasses.asdict(stats) for host, stats in progress.endpoints().items()
            }
        store.question_counts(meta, (line.question for line in all_lines))
        write_metadata(run_dir, meta)
        if spec.store is not None:
            await campaign.record_machine_once(spec.store, campaign.machine_name(run_dir), meta)
    summary = summarise(results, meta.reward_mode)
    return RunResult(run_dir, all_lines, meta, results, notes, summary)


def ended_by(exc: BaseException) -> str:
    """A session's status when ``exc`` ended it."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, EndpointRefused):
        return "refused"
    return f"failed: {type(exc).__name__}"


@asynccontextmanager
async def backend(
    spec: RunSpec, services: ServicesFactory | None, progress: Progress, *, share: int = 1
) -> AsyncIterator[Questions]:
    """The local graph (HTTP pools closed at the end, holding ``share`` of each
    endpoint: ``runner.workers``) or the server named by the spec; the live table shows
    the local endpoints' adaptive limits."""
    if spec.server is not None:
        from aidanbench.runner.remote import remote_questions

        async with remote_questions(spec.server) as remote:
            yield remote
        return
    if services is not None:
        if isinstance(services, OpenAIServices):
            progress.endpoints = services.endpoint_stats
        async with here(spec, services) as local:
            yield local
        return
    pools = OpenAIServices(clients.RUN_TRANSPORT, chat=clients.RUN_CHAT, share=share)
    progress.endpoints = pools.endpoint_stats
    try:
        async with here(spec, pools) as local:
            yield local
    finally:
        await pools.aclose()


def here(spec: RunSpec, services: ServicesFactory) -> contextlib.AbstractAsyncContextManager[Any]:
    """Threads run on this machine: on the store's checkpointer, or the run directory's."""
    if spec.store is not None:
        return campaign.store_questions(spec.store, services)
    return local_questions(spec.run_dir, services)


async def run(
    spec: RunSpec,
    *,
    progress: Progress | None = None,
    services: ServicesFactory | None = None,
) -> RunResult:
    """Run (or resume, or grow) the run directory of ``spec``; returns its summary.

    ``progress`` defaults to a live table on a terminal and log lines otherwise;
    ``services`` to OpenAI-compatible clients on aiohttp pools, closed when the run ends.
    """
    return await execute(await prepare(spec), progress=progress, services=services)


def run_sync(
    spec: RunSpec,
    *,
    progress: Progress | None = None,
    services: ServicesFactory | None = None,
) -> RunResult:
    """``run`` for code without an event loop (scripts); notebooks ``await run(spec)``."""
    return asyncio.run(run(spec, progress=progress, services=services))
