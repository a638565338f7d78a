"""One campaign from several machines: a shared store on PostgreSQL.

``aidanbench run --store postgresql://USER@HOST:PORT/DB`` keeps the question threads'
checkpoints in that database through LangGraph's ``AsyncPostgresSaver``; the run directory
stays on each machine (its lock, metadata, usage ledger and output files). A campaign is one
database (two campaigns need two): the saver's tables and our three hold its threads:

- ``aidanbench_claims``: which worker runs which thread (``runner.claims``);
- ``aidanbench_lines``: each stopped thread's line, so ``report --store`` reads the campaign;
- ``aidanbench_machines``: each run directory's ``metadata.json`` (what that machine sent).

The URL's password is used to connect and nowhere else; what is recorded or printed is
``redacted``. A store that stops answering (a restart, a fail-over, a network blip) is waited
for (``Outage``): a step of a question waits with it, so nothing is asked twice; only an
outage longer than ``OUTAGE_S`` (``--store-outage``) ends the run, in one line.

What the store acknowledged is durable: every commit waits for its WAL to reach the disk
(``CONNECTION``), so a worker that waited out a crash of the database goes on from what the
store holds, and a request the crash cut off is sent again (each is idempotent). A thread
whose stored steps are not whole anyway (a campaign an older version ran with commits that
did not wait, a fail-over to a standby that lagged) is found when it is planned
(``lost_steps``) and run again from its start. Every string reaches the store's JSON whole,
NUL included (``ESCAPE``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from aidanbench.core.errors import UsageError, install_hint, printable
from aidanbench.record.lines import QuestionLine
from aidanbench.record.metadata import Metadata

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.abc import AdaptContext
    from psycopg_pool import AsyncConnectionPool

    from aidanbench.nodes.caps import Budget
    from aidanbench.runner.drive import Answers, Plan
    from aidanbench.runner.local import LocalQuestions
    from aidanbench.runner.tasks import Task
    from aidanbench.services import ServicesFactory

SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT_S = 10
"""Seconds to wait for the database before refusing the store."""
OUTAGE_S = 60.0
"""Seconds a store that stops answering during a run is waited for (``Outage``)."""
RETRY_S = (0.2, 5.0)
"""The first and the longest wait between two tries of a request to a silent store (each wait
doubles)."""

T = TypeVar("T")

CHECKPOINT_CONNECTIONS = 4
"""Connections a process's checkpoints may use at once: each commit waits for the disk, and
commits sent together share one flush of it, so the steps of several questions are saved
in the time of one (docs/performance.md). The claims take ``CLAIM_CONNECTIONS`` more."""
CLAIM_CONNECTIONS = 3

SETUP_LOCK = 0x41494442
"""Advisory lock held while the tables are made, so two workers starting together do not
race on ``CREATE TABLE`` and on the saver's migration rows."""
SETUP_RETRY_S = 0.1

TABLES = (
    """CREATE TABLE IF NOT EXISTS aidanbench_claims (
        thread_id text PRIMARY KEY,
        owner text NOT NULL,
        heartbeat timestamptz NOT NULL,
        released boolean NOT NULL DEFAULT false)""",
    """CREATE TABLE IF NOT EXISTS aidanbench_lines (
        thread_id text PRIMARY KEY,
        line jsonb NOT NULL,
        machine text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE IF NOT EXISTS aidanbench_machines (
        machine text PRIMARY KEY,
        metadata jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now())""",
)

CONNECTION: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "options": "-c synchronous_commit=on",
}
"""How every connection to the store is made. A commit is acknowledged once its WAL is on
the database's disk (and on its synchronous standbys), whatever the server's own default:
a worker goes on from what it holds in memory, so a commit a crash could take back would
leave a hole in its thread (docs/reliability.md, "The store")."""

ESCAPE = "\ufdd0"
"""PostgreSQL text cannot hold NUL, and jsonb refuses ``\\u0000``: in the store's JSON (ours
and the saver's checkpoints) a NUL is ``ESCAPE`` then ``0``, and ``ESCAPE`` itself is
doubled (``store_dumps``, ``store_loads``). It is a Unicode noncharacter, set aside for a
program's own use, so a string holding neither (nearly every one) is stored as it is."""
_ESCAPED = re.compile(ESCAPE + "([" + ESCAPE + "0])")
_ESCAPE_IN_JSON = re.compile(rb"\\u[fF][dD][dD]0|\xef\xb7\x90")
"""``ESCAPE`` in JSON text as PostgreSQL returns it (UTF-8), written out or escaped."""

EXTRA_MISSING = (
    f"--store needs the postgres extra: {install_hint('postgres')} "
    "(langgraph-checkpoint-postgres, psycopg, psycopg-pool)"
)


def redacted(url: str) -> str:
    """``url`` without its password (in the user part or as a ``password`` parameter)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "postgresql://(unreadable URL)"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def secrets_of(url: str) -> list[str]:
    """The URL's password, each way it may be spelled, to scrub from messages."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""] + [v for k, v in parse_qsl(parts.query) if k == "password"]
        raw = parts.netloc.rpartition("@")[0].partition(":")[2]
    except ValueError:
        return [url]
    return [s for s in {*found, raw} if s]


def scrubbed(text: str, url: str) -> str:
    """``text`` on one line, printable, with the URL's password replaced."""
    for secret in secrets_of(url):
        text = text.replace(secret, "***")
    return printable(" ".join(text.split()))


def store_dumps(value: Any) -> str:
    """``value`` as JSON the store takes whatever its strings hold (``ESCAPE``)."""
    text = json.dumps(value)
    if "\\u0000" in text or "\\ufdd0" in text:
        text = json.dumps(_strings(value, _escaped))
    return text


def store_loads(data: str | bytes) -> Any:
    """JSON the store returns, its strings as they were given to ``store_dumps``."""
    value = json.loads(data)
    raw = data.encode() if isinstance(data, str) else data
    return _strings(value, _unescaped) if _ESCAPE_IN_JSON.search(raw) else value


def _escaped(text: str) -> str:
    if "\0" not in text and ESCAPE not in text:
        return text
    return text.replace(ESCAPE, ESCAPE * 2).replace("\0", ESCAPE + "0")


def _unescaped(text: str) -> str:
    if ESCAPE not in text:
        return text
    return _ESCAPED.sub(lambda m: ESCAPE if m.group(1) == ESCAPE else "\0", text)


def _strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (JSON data) with ``change`` applied to every string, keys included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {
            change(k) if isinstance(k, str) else k: _strings(v, change) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_strings(v, change) for v in value]
    return value


def store_json(context: AdaptContext) -> None:
    """Read and write JSON on ``context`` (a connection to the store) through ``store_dumps``
    and ``store_loads``."""
    from psycopg.types.json import set_json_dumps, set_json_loads

    set_json_dumps(store_dumps, context)
    set_json_loads(store_loads, context)


def check_url(url: str) -> str:
    """The store URL checked for form (no connection yet), redacted; ``UsageError`` (one
    line) for a URL that is not ``postgresql://``, names no database, or libpq cannot read."""
    shown = redacted(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        raise UsageError(f"--store {shown}: {scrubbed(str(exc), url)}") from None
    if parts.scheme not in SCHEMES:
        raise UsageError(
            f"--store must be a postgresql://USER@HOST:PORT/DATABASE URL, got {printable(shown)}"
        )
    if not parts.path.strip("/"):
        raise UsageError(
            f"--store {printable(shown)} names no database; a campaign is one database: "
            "postgresql://USER@HOST:PORT/DATABASE"
        )
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise UsageError(EXTRA_MISSING) from None
    try:
        conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
        raise UsageError(f"--store {printable(shown)}: {scrubbed(str(exc), url)}") from None
    return shown


async def check_store(url: str) -> str:
    """``check_url``, then one connection; ``UsageError`` (one line, password scrubbed)
    when the extra is missing or the database cannot be reached. Nothing is written."""
    shown = check_url(url)
    try:
        import langgraph.checkpoint.postgres.aio  # noqa: F401
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise UsageError(EXTRA_MISSING) from None
    try:
        async with await psycopg.AsyncConnection.connect(
            url, connect_timeout=CONNECT_TIMEOUT_S
        ) as conn:
            await conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot reach the store {printable(shown)}: {scrubbed(str(exc), url)}"
        ) from None
    return shown


class Outage:
    """How long the store has not answered, for every request of one process to it: ``ride``
    retries a request with backoff until the store answers or ``limit_s`` have
    passed since the first failure of any request. Requests are idempotent (upserts, reads),
    so a retry after a lost answer is safe. ``tell`` gets a line when the outage starts and
    None when it ends. Past the limit the store is lost: its ``pools`` are closed, so every
    request still waiting for a connection (or the saver's lock) fails at once.
    """

    def __init__(
        self,
        shown: str,
        tell: Callable[[str | None], None] | None = None,
        limit_s: float = OUTAGE_S,
    ) -> None:
        self.shown = shown
        self.tell = tell or (lambda _: None)
        self.limit_s = limit_s
        self.since: float | None = None
        """When the store stopped answering (None: it answers)."""
        self.lost = False
        self.pools: list[AsyncConnectionPool[Any]] = []
        """The pools of this process's requests to the store (``connected``)."""

    async def ride(self, request: Callable[[], Awaitable[T]]) -> T:
        """``request()``, waiting out an outage of the store (class docstring)."""
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout

        wait, longest = RETRY_S
        while True:
            try:
                answer = await request()
            except (OperationalError, PoolTimeout):
                now = time.monotonic()
                if self.lost:
                    raise
                if self.since is None:
                    self.since = now
                    self.tell(
                        f"the store {self.shown} does not answer: waiting up to "
                        f"{self.limit_s:g} s for it (the questions wait with it)"
                    )
                left = self.since + self.limit_s - now
                if left <= 0:
                    self.lost = True
                    for pool in self.pools:
                        asyncio.get_running_loop().create_task(pool.close(timeout=0))
                    raise
                await asyncio.sleep(min(wait, left))
                wait = min(wait * 2, longest)
                continue
            if self.since is not None:
                self.tell(None)
                self.since = None
            return answer


def machine_name(run_dir: Path) -> str:
    """This machine's run directory, as the campaign tables name it: host and path."""
    return f"{socket.gethostname()}:{run_dir.resolve()}"


@asynccontextmanager
async def connected(
    url: str, size: int = 2, outage: Outage | None = None
) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """A small pool of autocommit connections to the store (as the saver wants them), made
    as ``CONNECTION`` says and speaking ``store_json``. The pool reconnects for as long as
    ``outage`` waits (a request waits ``CONNECT_TIMEOUT_S`` at most for a connection,
    then its ``Outage`` tries again); its log stays out of the terminal, where the live
    table says what the run waits for."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    for name in ("psycopg.pool", "psycopg"):
        logging.getLogger(name).propagate = False
        logging.getLogger(name).addHandler(logging.NullHandler())

    async def configure(conn: AsyncConnection[Any]) -> None:
        store_json(conn)

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=size,
        open=False,
        timeout=CONNECT_TIMEOUT_S,
        reconnect_timeout=outage.limit_s if outage is not None else CONNECT_TIMEOUT_S,
        configure=configure,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, **CONNECTION},
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    if outage is not None:
        outage.pools.append(pool)
    try:
        yield pool
    finally:
        await pool.close()


async def setup(pool: AsyncConnectionPool[Any]) -> None:
    """The saver's tables and ours, made once whoever starts first. The lock is tried, not
    waited for: the saver's migrations create indexes ``CONCURRENTLY``, which wait for every
    open transaction, a worker waiting in ``pg_advisory_lock`` included, so two workers
    starting together would wait for each other for ever."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with pool.connection() as conn:
        while not await _try_lock(conn):  # noqa: ASYNC110 (the lock is the database's)
            await asyncio.sleep(SETUP_RETRY_S)
        try:
            await AsyncPostgresSaver(pool).setup()
            for statement in TABLES:
                await conn.execute(statement)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK,))


async def _try_lock(conn: AsyncConnection[Any]) -> bool:
    row = await (
        await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (SETUP_LOCK,))
    ).fetchone()
    return bool(row and row["got"])


@asynccontextmanager
async def store_questions(
    url: str, services: ServicesFactory, budget: Budget | None = None, outage: Outage | None = None
) -> AsyncIterator[StoreQuestions]:
    """The store's backend (``budget`` stops the questions; ``outage`` waits out the store),
    closed when the block ends."""
    from aidanbench.graph.question import build_question_graph
    from aidanbench.runner.local import LocalQuestions

    outage = outage or Outage(redacted(url))
    async with connected(url, CHECKPOINT_CONNECTIONS, outage) as pool:
        await outage.ride(lambda: setup(pool))
        saver = riding_saver(pool, outage)
        graph = build_question_graph(services, budget=budget).compile(checkpointer=saver)
        yield StoreQuestions(LocalQuestions(graph, services), pool, outage)


class StoreQuestions:
    """``runner.local``'s backend on the store's saver, checking every thread it plans: one
    whose stored steps are not whole (``lost_steps``) is planned ``restart``, and once
    claimed it is forgotten (its checkpoints and its line) and run again from its start."""

    def __init__(self, local: LocalQuestions, pool: AsyncConnectionPool[Any], outage: Outage):
        self.local = local
        self.graph = local.graph
        self.pool = pool
        self.outage = outage

    async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
        from aidanbench.runner.drive import Plan
        from aidanbench.runner.tasks import start_input

        plans = await self.local.plan(tasks)
        return [
            Plan("restart", step.values, start=start_input(task, pending=False))
            if lost_steps(step.values) is not None
            else step
            for task, step in zip(tasks, plans, strict=True)
        ]

    def warm(self, tasks: Sequence[Task]) -> None:
        self.local.warm(tasks)

    def backlog(self) -> float:
        return self.local.backlog()

    async def execute(self, task: Task, step: Plan, progress: Answers) -> dict[str, Any]:
        if step.action == "restart":
            await self.forget(task.thread_id)
        return await self.local.execute(task, step, progress)

    async def forget(self, thread: str) -> None:
        """Delete ``thread``'s line, then its checkpoints: killed in between, the thread is
        still found lacking and forgotten again."""

        async def delete_line() -> None:
            async with self.pool.connection() as conn:
                await conn.execute("DELETE FROM aidanbench_lines WHERE thread_id = %s", (thread,))

        await self.outage.ride(delete_line)
        await self.graph.checkpointer.adelete_thread(thread)  # type: ignore[union-attr]


def lost_steps(values: Mapping[str, Any]) -> str | None:
    """What a thread's stored state lacks, or None when it is whole: its answers numbered
    from 1 without a gap, its score the count of its valid answers. A thread that lost a
    step the store had acknowledged reads as the steps after the hole alone (LangGraph
    rebuilds its answers from each checkpoint's parent, and the chain stops at the hole)."""
    answers = values.get("answers") or []
    numbers = [answer.get("index") for answer in answers]
    if numbers != list(range(1, len(numbers) + 1)):
        top = max((n for n in numbers if isinstance(n, int)), default=0)
        lost = sorted(set(range(1, top + 1)) - set(numbers))
        return f"answer(s) {_spans(lost)} of {top} lost"
    valid = sum(1 for answer in answers if answer.get("valid"))
    score = values.get("score")
    if isinstance(score, int) and score != valid:
        return f"score {score} with {valid} valid answer(s) kept"
    return None


def _spans(numbers: Sequence[int]) -> str:
    """Sorted numbers as runs: ``1-3, 7``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def riding_saver(pool: AsyncConnectionPool[Any], outage: Outage) -> Any:
    """LangGraph's ``AsyncPostgresSaver`` on ``pool`` whose reads and writes wait out an
    outage of the store (``Outage.ride``), reading only safe types (``checkpoint_serde``).

    Its lock is not taken: it keeps one shared connection to one request at a time, and
    here each request has a connection of the pool to itself, so the questions' steps are
    saved side by side and their commits share the disk's flushes. LangGraph orders what
    must be: a checkpoint is saved after the previous one and after its answers' writes."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from aidanbench.runner.checkpoints import checkpoint_serde

    saver = AsyncPostgresSaver

    class RidingSaver(AsyncPostgresSaver):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.lock = contextlib.nullcontext()  # type: ignore[assignment]

        async def aget_tuple(self, config: Any) -> Any:
            return await outage.ride(lambda: saver.aget_tuple(self, config))

        async def aget_delta_channel_history(self, **kwargs: Any) -> Mapping[str, Any]:
            return await outage.ride(lambda: saver.aget_delta_channel_history(self, **kwargs))

        async def aput(self, *args: Any) -> Any:
            return await outage.ride(lambda: saver.aput(self, *args))

        async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
            await outage.ride(lambda: saver.aput_writes(self, *args, **kwargs))

        async def adelete_thread(self, thread_id: str) -> None:
            await outage.ride(lambda: saver.adelete_thread(self, thread_id))

    return RidingSaver(pool, serde=checkpoint_serde())


async def record_machine(
    url: str, run_dir: Path, metadata: Metadata, outage: Outage | None = None
) -> None:
    """Upsert the metadata of ``run_dir`` (``machine_name``) into ``aidanbench_machines``, on
    a connection of its own, waiting out an outage of the store."""
    import psycopg
    from psycopg.types.json import Jsonb

    row = (machine_name(run_dir), Jsonb(metadata.model_dump(mode="json", exclude_none=True)))

    async def record() -> None:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, **CONNECTION
        ) as conn:
            store_json(conn)
            await conn.execute(
                "INSERT INTO aidanbench_machines (machine, metadata) VALUES (%s, %s) ON "
                "CONFLICT (machine) DO UPDATE SET metadata = EXCLUDED.metadata, updated_at = now()",
                row,
            )

    await (outage or Outage(redacted(url))).ride(record)


@dataclass(frozen=True)
class Campaign:
    """What the store holds of a campaign, as the reports read it."""

    lines: list[QuestionLine]
    """Every stopped thread's line, in thread order."""
    machines: dict[str, Metadata]
    """Each run directory's metadata (host:path), oldest update first."""

    @property
    def metadata(self) -> Metadata:
        """The last machine's metadata with every machine's scoring settings and judging; no
        usage (that is per machine: ``machines``)."""
        last = list(self.machines.values())[-1] if self.machines else Metadata()
        merged = last.model_copy(deep=True)
        merged.usage = None
        merged.scoring_settings = {
            k: v for m in self.machines.values() for k, v in (m.scoring_settings or {}).items()
        } or None
        merged.judging = {
            k: v for m in self.machines.values() for k, v in (m.judging or {}).items()
        } or None
        return merged


async def read_campaign(url: str) -> Campaign:
    """The campaign in the store at ``url``; ``UsageError`` with one line when it cannot
    be read or holds no campaign."""
    import psycopg
    from psycopg.rows import dict_row

    shown = await check_store(url)
    try:
        async with await psycopg.AsyncConnection.connect(
            url, row_factory=dict_row, **CONNECTION
        ) as conn:
            store_json(conn)
            found = await conn.execute("SELECT to_regclass('aidanbench_lines') AS t")
            row = await found.fetchone()
            if row is None or row["t"] is None:
                raise UsageError(f"no campaign in the store {printable(shown)}")
            lines = await (
                await conn.execute("SELECT line FROM aidanbench_lines ORDER BY thread_id")
            ).fetchall()
            machines = await (
                await conn.execute(
                    "SELECT machine, metadata FROM aidanbench_machines ORDER BY updated_at"
                )
            ).fetchall()
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot read the store {printable(shown)}: {scrubbed(str(exc), url)}"
        ) from None
    return Campaign(
        [QuestionLine.model_validate(_json(r["line"])) for r in lines],
        {r["machine"]: Metadata.model_validate(_json(r["metadata"])) for r in machines},
    )


def machine_lines(url: str, run_dir: Path) -> list[QuestionLine]:
    """The lines of threads this machine's ``run_dir`` stopped, to rebuild its line files
    (``record.recorder.stored_lines``)."""
    import psycopg
    from psycopg.rows import dict_row

    query = "SELECT line FROM aidanbench_lines WHERE machine = %s ORDER BY updated_at"
    try:
        with psycopg.connect(url, row_factory=dict_row, **CONNECTION) as conn:
            store_json(conn)
            rows = conn.execute(query, (machine_name(run_dir),)).fetchall()
    except psycopg.Error as exc:
        shown = printable(redacted(url))
        raise UsageError(f"cannot read the store {shown}: {scrubbed(str(exc), url)}") from None
    return [QuestionLine.model_validate(_json(row["line"])) for row in rows]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def lines_rows(lines: Sequence[tuple[str, QuestionLine]], machine: str) -> list[tuple[Any, ...]]:
    """Rows of ``aidanbench_lines`` for (thread id, line) pairs stopped by ``machine``: each
    line's record with its answers' (read back by ``QuestionLine.model_validate``)."""
    from psycopg.types.json import Jsonb

    return [
        (thread, Jsonb({**line.record(), "answers": [a.record() for a in line.answers]}), machine)
        for thread, line in lines
    ]
