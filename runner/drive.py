"""The drive loop: bring every question thread of a run to a stop, whoever runs it.

The loop is the same on this machine and on a LangGraph server; what runs one thread is a
``Questions`` backend: ``runner.local`` (a local checkpointer) or ``runner.remote`` (a
server).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aidanbench.core.errors import UsageError, printable
from aidanbench.nodes.caps import Budget, spent
from aidanbench.nodes.prepare import measurement_differences
from aidanbench.record.lines import QuestionLine
from aidanbench.record.recorder import QuestionLog
from aidanbench.runner.admission import Admission
from aidanbench.runner.progress import Events
from aidanbench.runner.tasks import Task


@dataclass(frozen=True)
class Plan:
    """What to do with one task's thread, decided from its stored state: ``skip`` a
    finished one, ``join`` a run in progress on a server, ``run`` it (from ``start``), or
    ``restart`` it from ``start`` once what it holds is forgotten (a shared store's thread
    that lost steps: ``runner.campaign.lost_steps``)."""

    action: Literal["skip", "join", "run", "restart"]
    values: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    start: dict[str, Any] | None = None


class Answers(Protocol):
    """Where a question's answer events go: the progress display (``Events``)."""

    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None: ...


class Questions(Protocol):
    """Runs question threads: the local graph or a LangGraph server."""

    async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
        """Each task's thread as stored, and what bringing it to a stop takes."""
        ...

    def warm(self, tasks: Sequence[Task]) -> None:
        """Prepare what the tasks about to run need (clients, local models)."""
        ...

    def backlog(self) -> float:
        """Requests waiting for an endpoint slot, in units of its limit
        (``OpenAIServices.backlog``): more questions started would only wait longer."""
        ...

    async def execute(self, task: Task, step: Plan, progress: Answers) -> dict[str, Any]:
        """Bring one thread to a stop, passing its answer events on; its final values."""
        ...


class Claims(Protocol):
    """Which threads this worker may run, when several share a store (``runner.claims``)."""

    async def take(self, task: Task, questions: Questions, waited: bool) -> Plan | None:
        """Claim the thread and plan it again; None when a live worker holds it (``freed``)."""
        ...

    async def stopped(self, task: Task, line: QuestionLine) -> bool:
        """The question stopped here: record its line in the store and release the claim;
        False when the claim was taken over (the thread is the new holder's, ``freed``)."""
        ...

    async def found_finished(self, stopped: Sequence[tuple[Task, QuestionLine]]) -> dict[str, bool]:
        """Record finished threads' lines a store lacks; whether each thread's line is this
        machine's (a thread left out runs elsewhere yet: ``freed``)."""
        ...

    def freed(self, busy: Callable[[], bool]) -> AsyncIterator[Task]:
        """The threads running elsewhere, each as its claim is released or expires."""
        ...


PLAN_CHUNK = 64
"""Threads looked up at once: a resumed run of thousands starts after one chunk's look-ups,
not after all of them."""


YOUNG_OBJECTS = 100_000
"""Net allocations between two of Python's youngest garbage collections while a run goes
on (default 700). Each collection walks every object made since the last one that is still
alive, and thousands of chains in flight keep their requests' objects alive for seconds:
at 10,000 a 5,040-chain run spent a sixth of its CPU collecting (docs/performance.md).
Reference counting frees the states; the collector only finds cycles (a failed request's
traceback), so it may run seldom."""


_entered: list[tuple[int, int, int]] = []
"""The thresholds each ``collecting_seldom`` inside found, the first of them Python's own."""


@contextlib.contextmanager
def collecting_seldom() -> Iterator[None]:
    """Python's youngest generation collected every ``YOUNG_OBJECTS`` net allocations
    inside, the thresholds put back when the last one entered is left: sessions running
    side by side on one event loop may leave in any order."""
    _entered.append(gc.get_threshold())
    gc.set_threshold(YOUNG_OBJECTS, *_entered[0][1:])
    try:
        yield
    finally:
        found = _entered.pop()  # the last one left holds the first entry: Python's own
        if not _entered:
            gc.set_threshold(*found)


async def drive(
    tasks: Sequence[Task],
    questions: Questions,
    lines: QuestionLog,
    *,
    admission: Admission,
    progress: Events,
    claims: Claims | None = None,
    budget: Budget | None = None,
) -> list[QuestionLine]:
    """Run every task to a stop, writing outputs as questions finish; once ``budget`` is
    spent, no question starts. Tasks are looked up ``PLAN_CHUNK`` at a time, those the files
    show stopped for good last, and start in that order as ``admission`` lets them in; one
    found finished is counted and skipped. Returns every line of the run directory, those
    carried from earlier sessions included. Cancellation (Ctrl-C) writes what is known and
    re-raises: the checkpoints hold every completed step. With ``claims`` (``runner.claims``)
    a thread runs here only once claimed, those claimed elsewhere are waited for at the end,
    and the files hold the lines of the threads this worker stopped (the store holds them
    all)."""
    for task in tasks:
        progress.queued(task.label)
    running = 0  # questions spawned and not ended: each may yet find its thread claimed elsewhere

    def busy() -> bool:
        return running > 0

    async def run_one(task: Task, step: Plan, waited: bool = False) -> None:
        nonlocal running
        held = HeldAnswers(progress, admission, held_answers(step))
        try:
            if spent(budget):  # --max-cost reached: start nothing new
                return
            if claims is not None:
                taken = await claims.take(task, questions, waited)
                if taken is None:  # running elsewhere: waited for at the end
                    return
                if taken.action == "skip":
                    await skip([(task, task.line(taken.values))])
                    return
                step = taken
            progress.started_question(task.label, task.thread_id)
            values = await questions.execute(task, step, held)
            line = task.line(values)
            if claims is not None and not await claims.stopped(task, line):
                return  # taken over as it ran: the new holder's, waited for (``freed``)
            lines.finished(line)
            progress.finished_question(task.label, task.question, line, task.thread_id)
        finally:
            running -= 1
            admission.leave(held.answers)

    async def skip(found: Sequence[tuple[Task, QuestionLine]]) -> None:
        """Count threads found finished. The run directory keeps their lines: all without a
        store; with one, those the store says are this machine's (one it lacked, as after
        an outage, is restored). One whose worker elsewhere is recording its line waits."""
        settled = None if claims is None else await claims.found_finished(found)
        for task, line in found:
            if settled is not None and task.thread_id not in settled:
                continue  # waited for (``claims.freed``), then skipped once its line is in
            keep = settled is None or settled[task.thread_id]
            if settled is not None and keep:
                lines.keep(line, found=True)
            progress.skipped(task.label, line, task.thread_id, keep)

    planned: asyncio.Queue[tuple[Task, Plan] | None] = asyncio.Queue()

    async def plan_all() -> None:
        # Questions the files show stopped for good are looked up last: on resume the
        # first chunks hold questions to run, not thousands of finished ones.
        for first in range(0, len(tasks), PLAN_CHUNK):
            chunk = ordered[first : first + PLAN_CHUNK]
            todo, finished = [], []
            for task, step in zip(chunk, await questions.plan(chunk), strict=True):
                refuse_other_measurement(task, step.values)
                line = task.line(step.values)
                if claims is None:
                    lines.keep(line)
                if step.action == "skip":
                    finished.append((task, line))
                    continue
                progress.stored(task.label, line, task.thread_id)
                todo.append((task, step))
            await skip(finished)
            questions.warm([task for task, _ in todo])
            for pair in todo:
                planned.put_nowait(pair)
            await asyncio.sleep(0)  # the questions planned so far may start
        planned.put_nowait(None)

    async def start_all(group: asyncio.TaskGroup) -> None:
        nonlocal running
        _spawn(group, plan_all)
        while (pair := await planned.get()) is not None:
            await admission.enter(held_answers(pair[1]))  # the questions already started go first
            running += 1
            _spawn(group, functools.partial(run_one, *pair))
        if claims is None:
            return
        async for task in claims.freed(busy):
            await admission.enter()
            running += 1
            _spawn(group, functools.partial(run_one, task, Plan("run"), True))

    ordered = sorted(tasks, key=lambda task: lines.stopped_before(task.thread_id))
    watching = asyncio.ensure_future(admission.watch(questions.backlog))
    try:
        with collecting_seldom():
            await run_group(start_all)
    finally:
        watching.cancel()
        # Steps of cancelled questions may still be queued for this turn's commit
        # (the saver commits once per loop turn): let it run before the saver closes.
        await asyncio.sleep(0)
        lines.flush()
    return lines.lines()


def held_answers(step: Plan) -> int:
    """Answers a thread holds as looked up (a resumed one), for the memory it takes."""
    return len(step.values.get("answers") or ())


@dataclass
class HeldAnswers:
    """A running question's answer events, passed on to the progress display and counted
    against the memory budget (``Admission.answered``)."""

    progress: Events
    admission: Admission
    answers: int

    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None:
        self.answers += 1
        self.admission.answered()
        self.progress.answer(label, event, key)


def report(progress: Answers, task: Task, event: Any) -> None:
    """Feed one custom-stream event of a question to the progress display."""
    if isinstance(event, dict) and event.get("event") == "answer":
        progress.answer(task.label, event, task.thread_id)


async def run_group(start: Callable[[asyncio.TaskGroup], Coroutine[Any, Any, None]]) -> None:
    """Run ``start``, and every job it adds, in a ``TaskGroup``, which ends every job before
    it returns (``asyncio.gather`` would leave them running while the caller closes the
    checkpointer); the first failure is re-raised alone, since callers name one. A job that
    fails while cancelled counts as cancelled, so Ctrl-C ends the run as an interruption."""
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_cancelled_stays_cancelled(start(group)))
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None


def _spawn(group: asyncio.TaskGroup, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Start ``job()`` in ``group``, making the coroutine when the task first runs, so a task
    cancelled before that leaves no coroutine that was never awaited."""

    async def started() -> None:
        await _cancelled_stays_cancelled(job())

    group.create_task(started())


async def _cancelled_stays_cancelled(job: Coroutine[Any, Any, None]) -> None:
    try:
        await job
    except Exception:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise


def refuse_other_measurement(task: Task, values: dict[str, Any]) -> None:
    """A ``UsageError`` when the task's settings disagree with what its thread recorded."""
    differences = measurement_differences(values.get("measured"), task.settings)
    if differences:
        raise UsageError(
            f"{printable(task.label)} on {printable(task.question[:40])!r} was measured "
            f"with other settings (differs in: {', '.join(differences)}); use another "
            "--run-dir, or rerun with the settings it was started with"
        )
