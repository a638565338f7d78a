"""The run's SQLite checkpointer: LangGraph's own, committing on the event loop's thread.

``AsyncSqliteSaver`` commits through aiosqlite, several hand-offs to its thread a commit,
several commits an answer: with many questions in flight, more CPU than the graph
(docs/performance.md).

``InlineCommitSaver`` keeps the saver's tables, rows and serialisation (rows prepared exactly
as ``AsyncSqliteSaver.aput`` and ``aput_writes`` of langgraph-checkpoint-sqlite 3.1 do) and
writes them through a plain ``sqlite3`` connection on the event loop's thread: in WAL mode
with ``synchronous=NORMAL`` a commit does not wait for the disk (but for a short stall when
SQLite folds the log back into the database). Writes made in one turn of the loop share one
transaction, committed right after it; every call returns after its commit, so ``durability="sync"``
keeps its promise: a step is on disk before the next starts.

Threads are read on that connection too (``SqliteSaver``): through aiosqlite, reads queue
behind one lock when hundreds of questions start together. Listings still go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from aidanbench.record.files import read_only_uri

_PUT_CHECKPOINT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_WRITE_COLUMNS = (
    "INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, "
    "channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_REPLACE_WRITES = "INSERT OR REPLACE " + _WRITE_COLUMNS
_KEEP_WRITES = "INSERT OR IGNORE " + _WRITE_COLUMNS


def checkpoint_serde() -> JsonPlusSerializer:
    """The serialiser of every checkpointer of a run: strict, so a checkpoint rebuilds only
    LangGraph's safe types and plain values, whatever ``LANGGRAPH_STRICT_MSGPACK`` says (a question
    thread's state is plain values, so no type of ours is needed). A shared store's checkpoints come
    from other machines: another type written there (by an attacker who can write to the database)
    is returned as data, not constructed."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@dataclass
class _Pending:
    sql: str
    rows: list[tuple[Any, ...]]
    done: asyncio.Future[None]


class InlineCommitSaver(AsyncSqliteSaver):
    """``AsyncSqliteSaver`` whose checkpoint and write inserts are committed inline."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        super().__init__(conn, serde=checkpoint_serde())
        self._writer = sqlite3.connect(path, timeout=30.0)
        self._writer.execute("PRAGMA synchronous=NORMAL")
        self._reader = SqliteSaver(self._writer, serde=self.serde)
        """LangGraph's synchronous saver on the inline connection, for reads."""
        self._pending: list[_Pending] = []
        self._closed = False
        self.commits = 0
        """Transactions committed so far (for tests and the benchmark)."""

    async def setup(self) -> None:
        """Create the tables once; every read and write calls this, and the saver's own
        version takes an ``asyncio.Lock`` each time, which costs more than the check."""
        if not self.is_setup:
            await super().setup()
            self._reader.is_setup = True  # the same tables, made through aiosqlite

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """A thread's checkpoint, read on the loop's thread as ``SqliteSaver`` reads it."""
        await self.setup()
        return self._reader.get_tuple(config)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """A ``DeltaChannel``'s history (a thread's answers), read as ``SqliteSaver`` does."""
        await self.setup()
        return self._reader.get_delta_channel_history(config=config, channels=channels)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint; returns once it is committed."""
        await self.setup()
        configurable = config["configurable"]
        type_, serialized = self.serde.dumps_typed(checkpoint)
        serialized_metadata = json.dumps(
            get_checkpoint_metadata(config, metadata), ensure_ascii=False
        ).encode("utf-8", "ignore")
        row = (
            str(configurable["thread_id"]),
            configurable["checkpoint_ns"],
            checkpoint["id"],
            configurable.get("checkpoint_id"),
            type_,
            serialized,
            serialized_metadata,
        )
        await self._commit(_PUT_CHECKPOINT, [row])
        return {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": configurable["checkpoint_ns"],
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes; returns once they are committed."""
        await self.setup()
        configurable = config["configurable"]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        rows = [
            (
                str(configurable["thread_id"]),
                str(configurable["checkpoint_ns"]),
                str(configurable["checkpoint_id"]),
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        await self._commit(_REPLACE_WRITES if replace else _KEEP_WRITES, rows)

    async def _commit(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Queue ``rows`` for this loop turn's transaction; return once it is committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if self._closed:
            raise asyncio.CancelledError  # the run is over; see _commit_pending
        if not self._pending:
            loop.call_soon(self._commit_pending)
        self._pending.append(_Pending(sql, rows, done))
        await done

    def _commit_pending(self) -> None:
        """Insert everything queued in one transaction, all or none. Every waiter is answered
        even when the rollback fails: one left unanswered would keep the run from finishing."""
        group, self._pending = self._pending, []
        if self._closed:
            # Steps still unwinding after the run closed the saver (Ctrl-C): their callers
            # are being cancelled; nothing is written, nothing is reported.
            for item in group:
                item.done.cancel()
            return
        failure: BaseException | None = None
        try:
            for item in group:
                self._writer.executemany(item.sql, item.rows)
            self._writer.commit()
            self.commits += 1
        except BaseException as exc:
            failure = exc
            with contextlib.suppress(sqlite3.Error):
                self._writer.rollback()
            if not isinstance(exc, Exception):
                raise
        finally:
            for item in group:
                if item.done.done():  # its caller was cancelled; the rows are written anyway
                    continue
                if failure is None:
                    item.done.set_result(None)
                elif isinstance(failure, Exception):
                    item.done.set_exception(failure)
                else:
                    item.done.cancel()

    def stored_among(self, thread_ids: Sequence[str]) -> set[str]:
        """Which of ``thread_ids`` have a checkpoint, in one query on the loop's thread: a
        run's plan asks before reading any state, since a new run's threads have none."""
        marks = ",".join("?" * len(thread_ids))
        rows = self._writer.execute(
            f"SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id IN ({marks})",
            list(thread_ids),
        ).fetchall()
        return {str(row[0]) for row in rows}

    def close_writer(self) -> None:
        """Close the inline connection (listings keep the aiosqlite one)."""
        self._closed = True
        self._writer.close()


@asynccontextmanager
async def open_checkpointer(path: Path) -> AsyncIterator[InlineCommitSaver]:
    """The run's SQLite checkpointer. Steps are written with ``durability="sync"``, so a
    killed run redoes at most the step in flight (with ``async`` a kill can take back
    finished turns: new answers, new costs); WAL with ``synchronous=NORMAL`` skips an fsync
    per commit, and only a power loss can take back the last commits."""
    async with aiosqlite.connect(str(path)) as conn:
        saver = InlineCommitSaver(conn, path)
        try:
            await saver.setup()
            await conn.execute("PRAGMA synchronous=NORMAL")
            yield saver
        finally:
            saver.close_writer()


def stored_threads(path: Path) -> list[str]:
    """The id of every thread with a checkpoint in ``path`` (read only)."""
    with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as db:
        try:
            rows = db.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
        except sqlite3.OperationalError:  # no table: nothing was ever checkpointed
            return []
    return [str(row[0]) for row in rows]


def delete_threads(path: Path, thread_ids: Sequence[str]) -> int:
    """Delete every checkpoint and write of ``thread_ids`` in one transaction (all or none);
    returns how many checkpoint rows went."""
    if not thread_ids:
        return 0
    with contextlib.closing(sqlite3.connect(path, timeout=30.0)) as db, db:
        marks = ",".join("?" * len(thread_ids))
        gone = db.execute(
            f"DELETE FROM checkpoints WHERE thread_id IN ({marks})", list(thread_ids)
        ).rowcount
        db.execute(f"DELETE FROM writes WHERE thread_id IN ({marks})", list(thread_ids))
    return int(gone)
