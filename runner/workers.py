"""Worker processes: one session's questions spread over the machine's cores.

A run with thousands of chains in flight is bound by the CPU of its event loop, not by the
providers, and one Python process uses one core. So a session of many chains
(``worker_count``) runs in several processes, each with its own event loop, graph and HTTP
pools: the session's own process, which also keeps what the session has once (the lock, the
metadata, the output files, the live table), and ``N - 1`` workers.

* **Shares.** The tasks, in the drive loop's order, are dealt out in turn, so each process
  gets the same mix of models and of questions started before. Each runs ``runner.drive``
  on the run directory's one checkpoint file (WAL mode) and one usage ledger (``O_APPEND``).
* **Limits.** Each process holds ``1/N`` of every endpoint's ceiling and rate and of the
  memory budget (``OpenAIServices(share=N)``, ``runner.admission``); its adaptive limits
  halve on their own 429s, so together they settle at fair shares, as TCP flows sharing a
  link do. The ``--max-cost`` budget is shared through the ledger (``FOLLOW_S``).
* **Progress.** Workers send what the drive loop reports in batches; this process applies
  them (``Relay``), so the table, the files and the summary are made here once.
* **Stopping.** Ctrl-C reaches this process; it sends each worker ``SIGTERM`` (workers
  ignore ``SIGINT``), which cancels its drive loop as Ctrl-C does a single process's, waits
  up to ``STOP_S`` for their last reports and kills what is left: every completed step is
  committed (``durability="sync"``), so nothing is lost.
* **A killed worker** loses nothing either: its share starts again in a new worker (at most
  ``RESTARTS`` times), which resumes from the checkpoints. A worker that fails (a refused
  endpoint, a full disk) stops the others, and its error ends the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from aidanbench.record.lines import QuestionLine
from aidanbench.record.metadata import Metadata
from aidanbench.record.recorder import QuestionLog, RunLines, worker_ledger
from aidanbench.record.usage import UsageBook
from aidanbench.runner import campaign
from aidanbench.runner.admission import Admission, admission
from aidanbench.runner.callbacks import quiet_chain_ends, quiet_node_runs
from aidanbench.runner.claims import claims_of, store_outage
from aidanbench.runner.drive import Questions, drive, run_group
from aidanbench.runner.local import local_questions
from aidanbench.runner.progress import Progress
from aidanbench.runner.spec import RunSpec
from aidanbench.runner.tasks import Task
from aidanbench.services import OpenAIServices, ServicesFactory, clients
from aidanbench.services.limits import EndpointStats

CHAINS_PER_WORKER = 256
"""Chains per worker process a session starts by itself: below this one event loop keeps up
with the providers, and a worker costs start-up time and its own memory."""

SEND_EVERY_S = 0.2
"""How often a worker sends what it has to report."""

FOLLOW_S = 0.5
"""How often a worker reads the others' ledger lines (the budget they share)."""

STOP_S = 1.0
"""How long workers told to stop get to send their last reports before they are killed."""

RESTARTS = 3
"""How many times one share is started again after its worker died."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_count(requested: int | None, chains: int, *, remote: bool = False) -> int:
    """``requested`` (at most one per chain), else one per ``CHAINS_PER_WORKER`` chains up to
    the cores; one for a run on a LangGraph server (its workers run the chains)."""
    if remote or chains <= 1:
        return 1
    if requested is not None:
        return max(1, min(requested, chains))
    return max(1, min(cores(), math.ceil(chains / CHAINS_PER_WORKER)))


@dataclass(frozen=True)
class Job:
    """What one worker runs: its share of the session's tasks and how."""

    index: int
    count: int
    spec: RunSpec
    """The session's specification (its store URL's password is never shown: ``RunSpec.store``)."""
    tasks: list[Task]


def process_gate(spec: RunSpec, chains: int, count: int) -> Admission:
    """One of ``count`` processes' gate: its share of ``--concurrency`` (``runner.admission``)."""
    requested = None if spec.concurrency is None else math.ceil(spec.concurrency / count)
    return admission(requested, chains, remote=spec.server is not None, share=count)


def shares(tasks: Sequence[Task], count: int) -> list[list[Task]]:
    """``tasks`` dealt out in turn to ``count`` workers (order kept in each share)."""
    return [list(tasks[index::count]) for index in range(count)]


# ---------------------------------------------------------------- in the worker


class Reporter:
    """A worker's progress: what the drive loop reports, sent to the parent in batches."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pending: list[tuple[Any, ...]] = []
        self.endpoints: Callable[[], Mapping[str, EndpointStats]] = dict

    def queued(self, label: str, count: int = 1) -> None:
        """The parent counts the queue itself."""

    def started_question(self, label: str, key: str | None = None) -> None:
        self.pending.append(("started", key))

    def finished_question(
        self, label: str, question: str, line: QuestionLine, key: str | None = None
    ) -> None:
        self.pending.append(("finished", key, line))

    def skipped(
        self, label: str, line: QuestionLine, key: str | None = None, keep: bool = True
    ) -> None:
        self.pending.append(("skipped", key, line, keep))

    def stored(self, label: str, line: QuestionLine, key: str | None = None) -> None:
        self.pending.append(("stored", key, line))

    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None:
        self.pending.append(("answer", key, event))

    def elsewhere(self, count: int) -> None:
        self.pending.append(("elsewhere", count))

    def store(self, outage: str | None) -> None:
        self.pending.append(("store", outage))

    def note(self, text: str) -> None:
        self.pending.append(("note", text))

    def send(self, *extra: tuple[Any, ...]) -> None:
        """Send everything pending (and ``extra``) as one message."""
        batch, self.pending = [*self.pending, *extra], []
        if batch:
            self.conn.send(batch)


def work(job: Job, conn: Connection) -> None:
    """A worker process's entry point: run the job, report how it ended, exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops workers (SIGTERM)
    _die_with_parent()
    try:
        asyncio.run(_work(job, conn))
    finally:
        conn.close()
        gc.freeze()  # left to the exit, not walked by its last collections (cli.main.entry)


async def _work(job: Job, conn: Connection) -> None:
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    reporter = Reporter(conn)
    spec = job.spec
    book = worker_ledger(spec.run_dir, spec.max_cost)
    gate = process_gate(spec, len(job.tasks), job.count)
    outage = store_outage(spec, reporter.store)

    async def send_every() -> None:
        while True:
            await asyncio.sleep(SEND_EVERY_S)
            try:
                reporter.send(("endpoints", reporter.endpoints()))
            except OSError:  # the parent is gone: nobody keeps what this worker does
                main.cancel()
                return

    outcome: tuple[Any, ...] = ("done",)
    helpers = [asyncio.create_task(send_every()), asyncio.create_task(follow(book))]
    try:
        async with (
            backend(spec, None, reporter, job.count, book, outage) as questions,
            claims_of(spec, reporter, outage) as claims,
        ):
            await drive(
                job.tasks,
                questions,
                RunLines(None),
                admission=gate,
                progress=reporter,
                claims=claims,
                budget=book,
            )
    except asyncio.CancelledError:
        outcome = ("stopped",)
    except Exception as exc:
        outcome = ("failed", _picklable(exc))
    finally:
        for helper in helpers:
            helper.cancel()
        book.close()
        with contextlib.suppress(OSError):
            reporter.send(("endpoints", reporter.endpoints()), outcome)


@asynccontextmanager
async def backend(
    spec: RunSpec,
    services: ServicesFactory | None,
    progress: Progress | Reporter,
    share: int = 1,
    budget: UsageBook | None = None,
    outage: campaign.Outage | None = None,
) -> AsyncIterator[Questions]:
    """The spec's server, or its threads run on this machine, on the store's checkpointer or
    the run directory's: the local graph's HTTP pools hold ``share`` of each endpoint, every
    request goes into the ledger ``budget``, which stops questions once spent."""
    if spec.server is not None:
        from aidanbench.runner.remote import remote_questions

        async with remote_questions(spec.server) as remote:
            yield remote
        return
    quiet_chain_ends()
    quiet_node_runs()
    owned = None
    if services is None:
        services = owned = OpenAIServices(
            clients.RUN_TRANSPORT, chat=clients.RUN_CHAT, share=share, ledger=budget
        )
    if isinstance(services, OpenAIServices):
        progress.endpoints = services.endpoint_stats
    here = (
        local_questions(spec.run_dir, services, budget)
        if spec.store is None
        else campaign.store_questions(spec.store, services, budget, outage)
    )
    try:
        async with here as local:
            yield local
    finally:
        if owned is not None:
            await owned.aclose()


async def follow(ledger: UsageBook) -> None:
    """Read the other processes' ledger lines every ``FOLLOW_S``, until cancelled; at once
    done without a ``--max-cost``, the one thing they are read for (every line would be
    parsed again in every process, for nothing)."""
    if ledger.max_cost is None:
        return
    while True:
        await asyncio.sleep(FOLLOW_S)
        ledger.catch_up()


def _die_with_parent() -> None:
    """Be killed when the session's process dies, however it dies (``PR_SET_PDEATHSIG``): a
    worker left running would write threads that the next session, holding the lock, runs
    too. Its completed steps are committed, so the kill loses nothing."""
    parent = multiprocessing.parent_process()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM is all there is
        return
    if parent is not None and os.getppid() != parent.pid:  # it died before the prctl
        os._exit(1)


PR_SET_PDEATHSIG = 1


def _picklable(exc: Exception) -> Exception:
    """``exc``, or a ``RuntimeError`` naming it when it cannot cross to the parent."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


# ---------------------------------------------------------------- in the parent


@dataclass
class Relay:
    """Applies the workers' reports to the live table and the run's lines."""

    progress: Progress
    lines: QuestionLog
    tasks: Mapping[str, Task]
    state: dict[str, str] = field(default_factory=dict)
    """Each thread reported on: ``running`` or ``done``."""
    owner: dict[str, int] = field(default_factory=dict)
    stats: dict[int, Mapping[str, EndpointStats]] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)
    """Per process (0: this one), its questions running on other machines' workers."""

    def elsewhere(self, worker: int, count: int) -> None:
        self.waiting[worker] = count
        self.progress.elsewhere(sum(self.waiting.values()))

    async def apply(self, worker: int, event: tuple[Any, ...], *, write: bool = True) -> None:
        """Apply one report; a finished question rewrites the files when due, unless
        ``write`` is off (the session is ending: they are written once after)."""
        kind = event[0]
        if kind == "endpoints":
            self.stats[worker] = event[1]
            return
        if kind == "elsewhere":
            self.elsewhere(worker, event[1])
            return
        if kind == "store":
            self.progress.store(event[1])
            return
        if kind == "note":
            self.progress.note(event[1])
            return
        key = event[1]
        task = self.tasks[key]
        if kind == "started":
            if self.state.get(key) != "running":
                self.progress.started_question(task.label)
            self.state[key], self.owner[key] = "running", worker
        elif kind == "answer":
            self.progress.answer(task.label, event[2], key)
        elif kind == "stored":
            self.lines.keep(event[2])
            self.progress.stored(task.label, event[2], key)
        elif kind == "skipped":
            if self.state.get(key) != "done":  # a share started again skips it once more
                if event[3]:
                    self.lines.keep(event[2], found=True)
                self.progress.skipped(task.label, event[2], key, event[3])
            self.state[key] = "done"
        elif kind == "finished":
            if write:
                self.lines.finished(event[2])
            else:
                self.lines.keep(event[2])
            self.progress.finished_question(task.label, task.question, event[2], key)
            self.state[key] = "done"

    def died(self, worker: int) -> None:
        """A worker died: its running questions go back to the queue."""
        for key, owner in self.owner.items():
            if owner == worker and self.state.get(key) == "running":
                self.progress.requeued(self.tasks[key].label, key)
                del self.state[key]
        self.stats.pop(worker, None)

    def endpoint_stats(self, own: Mapping[str, EndpointStats]) -> dict[str, EndpointStats]:
        """Each endpoint's limits summed over this process's (``own``) and the workers'."""
        merged: dict[str, EndpointStats] = {}
        for stats in [own, *self.stats.values()]:
            for host, one in stats.items():
                seen = merged.get(host)
                merged[host] = one if seen is None else _plus(seen, one)
        return merged


def _plus(a: EndpointStats, b: EndpointStats) -> EndpointStats:
    waits = [w for w in (a.waiting, b.waiting) if w is not None]
    return dataclasses.replace(
        a,
        limit=a.limit + b.limit,
        ceiling=None if a.ceiling is None or b.ceiling is None else a.ceiling + b.ceiling,
        peak_limit=a.peak_limit + b.peak_limit,
        in_flight=a.in_flight + b.in_flight,
        requests=a.requests + b.requests,
        rate_limited=a.rate_limited + b.rate_limited,
        backoffs=a.backoffs + b.backoffs,
        per_minute=None if a.per_minute is None else a.per_minute + (b.per_minute or 0.0),
        long_waits=a.long_waits + b.long_waits,
        waiting=max(waits, key=lambda w: w.left) if waits else None,
        retry_after_capped=a.retry_after_capped or b.retry_after_capped,
        timed_out=a.timed_out + b.timed_out,
        stalled=a.stalled + b.stalled,
    )


@dataclass
class _Own:
    """This process's count of questions running elsewhere, told to the relay."""

    relay: Relay

    def elsewhere(self, count: int) -> None:
        self.relay.elsewhere(0, count)

    def store(self, outage: str | None) -> None:
        self.relay.progress.store(outage)

    def note(self, text: str) -> None:
        self.relay.progress.note(text)


class WorkerDied(RuntimeError):
    """A share's worker died more often than ``RESTARTS``."""


@dataclass
class _Slot:
    job: Job
    process: multiprocessing.process.BaseProcess
    ended: tuple[Any, ...] | None = None
    restarts: int = 0
    told: bool = False
    """Sent ``SIGTERM``."""


async def drive_workers(
    tasks: Sequence[Task],
    questions: Questions,
    lines: QuestionLog,
    *,
    count: int,
    spec: RunSpec,
    meta: Metadata,
    progress: Progress,
    budget: UsageBook,
    outage: campaign.Outage | None = None,
) -> list[QuestionLine]:
    """``runner.drive.drive`` over ``count`` processes: this one, on ``questions`` (built
    with ``OpenAIServices(share=count)``), and ``count - 1`` workers, every one keeping the
    run's ``budget`` and catching up with what the others spent. With ``count`` 1 (a
    session's own process alone) it is the drive loop, with this machine's claims."""
    ordered = sorted(tasks, key=lambda task: lines.stopped_before(task.thread_id))
    mine, *theirs = shares(ordered, count)
    relay = Relay(progress, lines, {task.thread_id: task for task in tasks})
    own = progress.endpoints
    if own is not None:
        progress.endpoints = lambda: relay.endpoint_stats(own())
    for share in theirs:
        for task in share:
            progress.queued(task.label)
    if theirs and budget.max_cost is not None:
        budget.follow()  # before the workers write
    workers = Workers(relay, progress)
    for index, share in enumerate(theirs, start=1):
        workers.start(Job(index, count, spec, share))

    async def here() -> None:
        gate = process_gate(spec, len(mine), count)
        async with claims_of(spec, _Own(relay), outage) as claims:
            if spec.store is not None:
                await campaign.record_machine(spec.store, spec.run_dir, meta, outage)
            await drive(
                mine,
                questions,
                lines,
                admission=gate,
                progress=progress,
                claims=claims,
                budget=budget if spec.server is None else None,  # a server keeps no ledger
            )

    async def start(group: asyncio.TaskGroup) -> None:
        following = asyncio.ensure_future(follow(budget))
        try:
            group.create_task(here())
            await workers.watch()
        finally:
            following.cancel()
            workers.terminate()  # Ctrl-C or a failure: the workers stop while this one does

    try:
        await run_group(start)
    finally:
        await workers.stop()
        lines.flush()
    return lines.lines()


class Workers:
    """The worker processes of a session, and what they report."""

    def __init__(self, relay: Relay, progress: Progress) -> None:
        self.relay = relay
        self.progress = progress
        self.loop = asyncio.get_running_loop()
        self.inbox: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.slots: dict[int, _Slot] = {}
        self.context = multiprocessing.get_context("spawn")

    def start(self, job: Job) -> None:
        """Start ``job``'s worker and a thread passing its reports to the inbox."""
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=work, args=(job, send), name=f"aidanbench-worker-{job.index}", daemon=True
        )
        process.start()
        send.close()  # the worker holds the only sending end: its exit ends the pipe
        slot = self.slots.get(job.index)
        if slot is None:
            self.slots[job.index] = _Slot(job, process)
        else:
            slot.process, slot.ended, slot.told = process, None, False

        def pump() -> None:
            while True:
                try:
                    message = receive.recv()
                except (EOFError, OSError):
                    break
                self.loop.call_soon_threadsafe(self.inbox.put_nowait, (job.index, message))
            receive.close()
            self.loop.call_soon_threadsafe(self.inbox.put_nowait, (job.index, None))

        threading.Thread(target=pump, name=f"{process.name}-reports", daemon=True).start()

    async def watch(self) -> None:
        """Apply reports until every share has ended; restart a killed worker's share; raise
        a worker's failure."""
        running = len(self.slots)
        while running:
            index, message = await self.inbox.get()
            slot = self.slots[index]
            if message is not None:
                for event in message:
                    if event[0] in ENDINGS:
                        slot.ended = event
                    else:
                        await self.relay.apply(index, event)
                continue
            await asyncio.to_thread(slot.process.join)
            if slot.ended is None:  # killed: start its share again
                self.relay.died(index)
                if slot.restarts >= RESTARTS:
                    raise WorkerDied(
                        f"worker {index} died {RESTARTS + 1} times (exit code "
                        f"{slot.process.exitcode}); run the same command again to continue"
                    )
                slot.restarts += 1
                self.progress.note(
                    f"worker {index} ended with exit code {slot.process.exitcode}; "
                    "its questions continue in a new worker"
                )
                self.start(slot.job)
                continue
            if slot.ended[0] == "failed":
                raise slot.ended[1]
            running -= 1

    def terminate(self) -> None:
        """Tell every worker still running to stop (``SIGTERM``), once."""
        for slot in self.slots.values():
            if slot.process.is_alive() and not slot.told:
                slot.told = True
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(slot.process.pid or 0, signal.SIGTERM)

    async def stop(self) -> None:
        """``SIGTERM``, their last reports for up to ``STOP_S``, then ``SIGKILL``."""
        alive = [slot for slot in self.slots.values() if slot.process.is_alive()]
        self.terminate()
        deadline = time.monotonic() + STOP_S
        open_pipes = {slot.job.index for slot in alive}
        while open_pipes and (left := deadline - time.monotonic()) > 0:
            try:
                index, message = await asyncio.wait_for(self.inbox.get(), left)
            except TimeoutError:
                break
            if message is None:
                open_pipes.discard(index)
                continue
            for event in message:
                if event[0] not in ENDINGS:
                    with contextlib.suppress(Exception):
                        await self.relay.apply(index, event, write=False)
        for slot in self.slots.values():
            if slot.process.is_alive():
                slot.process.kill()
            slot.process.join(timeout=1.0)


ENDINGS = ("done", "stopped", "failed")
"""How a worker's last report says its share ended."""
