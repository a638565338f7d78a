"""Atomic claims on a campaign's question threads, so several workers share one store.

A worker claims an unfinished thread with one atomic upsert in ``aidanbench_claims``, taking
the row when there is none, when it was released, or when its heartbeat is older than the
lease (its worker died). A thread a live worker holds waits in ``deferred`` until the end of
this worker's list, then is taken over once released (Ctrl-C) or expired (a killed worker).
The taker resumes from the thread's checkpoints, so a killed worker loses at most the step it
was in.

A heartbeat keeps running threads' claims alive. A worker that finds a claim taken from it
(it was paused for longer than the lease) cancels that question at once; it may have written
one step after losing the claim. Times are the database's (``now()``), so machines' clocks
need not agree, and a lease counts from the database's start at the earliest: a worker that
waited out a restart of the database longer than the lease keeps its threads (its heartbeat
comes back with the store) instead of seeing them taken over while it still runs them.

A question's line goes to ``aidanbench_lines`` and its claim is released in one transaction,
unless the claim was taken over (the line is then the new worker's).
A thread another worker stopped on an error is left as it stopped: a later ``run`` retries
it, as on one machine. What a worker finds wrong in the store it says as it repairs it: a
finished thread's missing line (``found_finished``), a thread that lost steps
(``runner.campaign.lost_steps``, run again from its start).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aidanbench.core.errors import UsageError, printable
from aidanbench.record.lines import QuestionLine
from aidanbench.runner import campaign
from aidanbench.runner.drive import Plan, Questions
from aidanbench.runner.spec import RunSpec
from aidanbench.runner.tasks import Task

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

LEASE_S = 60.0
"""Seconds a claim lives without a heartbeat: how long a killed worker's threads wait
before another worker takes them over."""
POLL_S = 5.0
"""Seconds between two looks at the claims of threads running elsewhere."""
RELEASE_TIMEOUT_S = 2.0
"""At most this long to release the claims held when the drive loop ends (Ctrl-C)."""

_CLAIM = """
INSERT INTO aidanbench_claims AS c (thread_id, owner, heartbeat, released)
VALUES (%(thread)s, %(owner)s, now(), false)
ON CONFLICT (thread_id) DO UPDATE SET owner = EXCLUDED.owner, heartbeat = now(), released = false
WHERE c.released OR c.owner = EXCLUDED.owner
   OR greatest(c.heartbeat, pg_postmaster_start_time()) < now() - make_interval(secs => %(lease)s)
RETURNING thread_id"""
_BEAT = """
UPDATE aidanbench_claims SET heartbeat = now()
WHERE owner = %s AND NOT released AND thread_id = ANY(%s) RETURNING thread_id"""
_RELEASE = "UPDATE aidanbench_claims SET released = true WHERE thread_id = %s AND owner = %s"
_RELEASE_MINE = _RELEASE + " RETURNING thread_id"
_RELEASE_ALL = "UPDATE aidanbench_claims SET released = true WHERE owner = %s AND NOT released"
_LIVE = """
SELECT thread_id FROM aidanbench_claims
WHERE thread_id = ANY(%s) AND NOT released
  AND greatest(heartbeat, pg_postmaster_start_time()) >= now() - make_interval(secs => %s)"""
_PUT_LINE = """
INSERT INTO aidanbench_lines (thread_id, line, machine) VALUES (%s, %s, %s)
ON CONFLICT (thread_id) DO UPDATE
SET line = EXCLUDED.line, machine = EXCLUDED.machine, updated_at = now()"""
_ADD_LINE = """
INSERT INTO aidanbench_lines (thread_id, line, machine) VALUES (%s, %s, %s)
ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id"""
_HAVE = "SELECT thread_id, machine FROM aidanbench_lines WHERE thread_id = ANY(%s)"


@dataclass(frozen=True)
class ClaimTimes:
    """The store's timing: ``--claim-lease``, ``--claim-poll`` and ``--store-outage``."""

    lease_s: float = LEASE_S
    poll_s: float = POLL_S
    outage_s: float = campaign.OUTAGE_S

    @property
    def heartbeat_s(self) -> float:
        """A held claim's heartbeat: four per lease, so one late beat loses nothing."""
        return self.lease_s / 4


def new_owner() -> str:
    """A worker's name in the claims table: host, process and a random part (each drive
    loop is a worker of its own, even several in one process)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Waiting(Protocol):
    """Told how many of this worker's questions run elsewhere, the store's outage and what
    was repaired in it: the live table (``runner.progress.Progress``) or a worker process's
    reports."""

    def elsewhere(self, count: int) -> None: ...

    def store(self, outage: str | None) -> None: ...

    def note(self, text: str) -> None: ...


class Claims:
    """One worker's claims on the store's threads (module docstring)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        machine: str,
        progress: Waiting,
        times: ClaimTimes = ClaimTimes(),
        outage: campaign.Outage | None = None,
    ) -> None:
        self.pool = pool
        self.machine = machine
        self.progress = progress
        self.times = times
        self.outage = outage or campaign.Outage("the store", limit_s=times.outage_s)
        self.owner = new_owner()
        self.held: dict[str, tuple[Task, asyncio.Task[Any] | None]] = {}
        """Threads claimed and running here, with the job running each."""
        self.deferred: dict[str, Task] = {}
        """Threads claimed by a live worker elsewhere, waited for at the end."""
        self.lost = 0
        """Claims the heartbeat found taken by another worker."""
        self.failure: BaseException | None = None
        """Why the heartbeat stopped the worker (the store stopped answering)."""

    async def take(self, task: Task, questions: Questions, waited: bool) -> Plan | None:
        """Claim ``task``'s thread and plan it again; None when a live worker holds it (it is
        deferred). A thread found finished, or (``waited``) stopped on an error by its
        worker, is a ``skip`` plan; one that lost steps is run again from its start,
        saying so."""
        thread = task.thread_id
        claim = {"thread": thread, "owner": self.owner, "lease": self.times.lease_s}
        claimed = bool(await self._rows(_CLAIM, claim))
        if not claimed:
            self.deferred[thread] = task
            self.progress.elsewhere(len(self.deferred))
            return None
        self.held[thread] = (task, asyncio.current_task())
        step = (await questions.plan([task]))[0]
        if step.action == "restart":
            self.progress.note(
                f"{printable(task.label)} on {printable(task.question[:40])!r}: the store's "
                f"thread lost steps it had recorded ({campaign.lost_steps(step.values)}): "
                "run again from its first answer"
            )
            return step
        stopped_on_error = step.start is not None and step.values.get("stop_reason") is not None
        if step.action == "skip" or (waited and stopped_on_error):
            await self.release(task)
            return Plan("skip", step.values)
        return step

    async def stopped(self, task: Task, line: QuestionLine) -> bool:
        """Release the claim and put the line into the store, in one transaction, if the
        claim is still this worker's. False (nothing recorded) when another worker took the
        thread over (this one was paused longer than the lease): the thread is that
        worker's, waited for as a deferred one, so one run directory holds its line."""
        thread = task.thread_id
        self.held.pop(thread, None)
        rows = campaign.lines_rows([(thread, line)], self.machine)

        async def put() -> bool:
            async with self.pool.connection() as conn, conn.transaction():
                mine = await (await conn.execute(_RELEASE_MINE, (thread, self.owner))).fetchall()
                if mine:
                    await conn.execute(_PUT_LINE, rows[0])
                return bool(mine)

        if await self.outage.ride(put):
            return True
        self.lost += 1
        self.deferred[thread] = task
        self.progress.elsewhere(len(self.deferred))
        return False

    async def release(self, task: Task) -> None:
        """Give up the claim on ``task``'s thread without a line."""
        self.held.pop(task.thread_id, None)
        await self._rows(_RELEASE, (task.thread_id, self.owner))

    async def found_finished(self, stopped: Sequence[tuple[Task, QuestionLine]]) -> dict[str, bool]:
        """Whether the line of each thread found finished is this machine's (its run
        directory keeps it). A line the store lacks is recorded from the thread under a
        claim, as this machine's: its worker died, or the store failed, between the last
        checkpoint and the line.
        A thread whose claim a live worker holds is left out and deferred: that worker is
        recording its line now, and its run directory alone is to hold it."""
        if not stopped:
            return {}
        threads = [task.thread_id for task, _ in stopped]
        present = {row["thread_id"]: row["machine"] for row in await self._rows(_HAVE, (threads,))}
        settled = {thread: machine == self.machine for thread, machine in present.items()}
        recorded = 0
        for task, line in stopped:
            if task.thread_id in present:
                continue
            found = await self._record(task.thread_id, line)
            if found is None:
                self.deferred[task.thread_id] = task
                self.progress.elsewhere(len(self.deferred))
                continue
            added, machine = found
            settled[task.thread_id] = machine == self.machine
            recorded += added
        if recorded:
            self.progress.note(
                f"the store lacked the line of {recorded} finished question(s) (a run ended "
                "before it was recorded): recorded from their threads"
            )
        return settled

    async def _record(self, thread: str, line: QuestionLine) -> tuple[bool, str] | None:
        """Claim ``thread``, add its line unless one is there by now, and release it: whether
        this worker added it, and whose machine's the line is; None when a live worker
        holds the claim."""
        claim = {"thread": thread, "owner": self.owner, "lease": self.times.lease_s}
        row = campaign.lines_rows([(thread, line)], self.machine)[0]

        async def record() -> tuple[bool, str] | None:
            async with self.pool.connection() as conn, conn.transaction():
                if not await (await conn.execute(_CLAIM, claim)).fetchall():
                    return None
                added = await (await conn.execute(_ADD_LINE, row)).fetchall()
                await conn.execute(_RELEASE, (thread, self.owner))
                found = await (await conn.execute(_HAVE, ([thread],))).fetchone()
                return bool(added), str(found["machine"]) if found else self.machine

        return await self.outage.ride(record)

    async def _rows(self, sql: str, params: Any) -> list[dict[str, Any]]:
        """The rows of one statement, waiting out an outage (``campaign.Outage``)."""

        async def run() -> list[dict[str, Any]]:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(sql, params)
                return await cursor.fetchall() if cursor.description else []

        return await self.outage.ride(run)

    async def freed(self, busy: Callable[[], bool]) -> AsyncIterator[Task]:
        """The deferred threads, each as its claim is released or expires, until none is
        left and ``busy()`` (jobs here that may still defer one) is false."""
        last, lease = -float("inf"), self.times.lease_s
        while self.deferred or busy():
            await asyncio.sleep(min(0.1, self.times.poll_s))
            if not self.deferred or time.monotonic() - last < self.times.poll_s:
                continue
            last = time.monotonic()
            waiting = list(self.deferred)
            live = {row["thread_id"] for row in await self._rows(_LIVE, (waiting, lease))}
            for thread in waiting:
                if thread not in live:
                    yield self.deferred.pop(thread)
            self.progress.elsewhere(len(self.deferred))

    async def heartbeat(self, worker: asyncio.Task[Any] | None) -> None:
        """Keep the held claims alive; cancel a question whose claim another worker took, and
        the whole ``worker`` once the store is lost (requests to it may never return)."""
        import psycopg

        while True:
            await asyncio.sleep(self.times.heartbeat_s)
            held = list(self.held)
            try:
                rows = await self._rows(_BEAT, (self.owner, held))
            except (psycopg.Error, OSError) as exc:
                if worker is not None:
                    self.failure = exc
                    worker.cancel()
                return
            kept = {row["thread_id"] for row in rows}
            for thread in held:
                if thread not in kept and thread in self.held:
                    task, job = self.held.pop(thread)
                    self.lost += 1
                    self.deferred[thread] = task
                    if job is not None:
                        job.cancel()

    async def release_all(self) -> None:
        """Release every claim this worker holds (its drive loop ended: Ctrl-C, an error)."""
        self.held.clear()
        await self._rows(_RELEASE_ALL, (self.owner,))


@asynccontextmanager
async def open_claims(
    url: str,
    machine: str,
    progress: Waiting,
    times: ClaimTimes = ClaimTimes(),
    outage: campaign.Outage | None = None,
) -> AsyncIterator[Claims]:
    """A worker's claims, with their heartbeat, waiting out an outage through ``outage``
    (shared with the process's checkpointer); held claims are released when the block ends
    (a killed worker's expire after the lease)."""
    import psycopg

    worker = asyncio.current_task()
    outage = outage or campaign.Outage(campaign.redacted(url), progress.store, times.outage_s)
    try:
        async with campaign.connected(url, campaign.CLAIM_CONNECTIONS, outage) as pool:
            await outage.ride(lambda: campaign.setup(pool))
            claims = Claims(pool, machine, progress, times, outage)
            beating = asyncio.ensure_future(claims.heartbeat(worker))
            try:
                yield claims
            except asyncio.CancelledError:
                if claims.failure is None or worker is None:
                    raise
                worker.uncancel()
                raise store_lost(url, claims.failure) from None
            finally:
                beating.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(claims.release_all(), RELEASE_TIMEOUT_S)
    except psycopg.Error as exc:  # the saver's or ours, passing through the drive loop
        raise store_lost(url, exc) from None


def store_lost(url: str, exc: BaseException) -> UsageError:
    """One line: the store failed during the run; nothing completed is lost."""
    shown = printable(campaign.redacted(url))
    return UsageError(
        f"the store {shown} failed: {campaign.scrubbed(str(exc), url)}; every step completed "
        "before is saved: run the same command again when it answers"
    )


def claims_of(
    spec: RunSpec, progress: Waiting, outage: campaign.Outage | None = None
) -> contextlib.AbstractAsyncContextManager[Claims | None]:
    """``open_claims`` as this machine's run directory, with the spec's ``--claim-lease``,
    ``--claim-poll`` and ``--store-outage``; None without a store (``drive`` then runs every
    thread it is given)."""
    if spec.store is None:
        return contextlib.nullcontext(None)
    times = ClaimTimes(spec.claim_lease, spec.claim_poll, spec.store_outage)
    machine = campaign.machine_name(spec.run_dir)
    return open_claims(spec.store, machine, progress, times, outage)


def store_outage(spec: RunSpec, tell: Callable[[str | None], None]) -> campaign.Outage | None:
    """The outage one process waits out, told to ``tell`` (None without a store)."""
    if spec.store is None:
        return None
    return campaign.Outage(campaign.redacted(spec.store), tell, spec.store_outage)
