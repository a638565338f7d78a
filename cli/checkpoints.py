"""The run's SQLite checkpointer: LangGraph's own, with writes committed in groups.

``AsyncSqliteSaver`` commits every checkpoint and every task's writes in a transaction
of its own, each taking several hops to its SQLite thread and back under one lock. A
run keeps dozens of questions in flight, each committing about six times per answer,
and in the benchmark's 63-question run that cost more CPU than the graph itself and
made the questions queue behind one another.

``GroupCommitSaver`` keeps the saver's tables, rows and serialisation (it prepares rows
exactly as ``AsyncSqliteSaver.aput`` and ``aput_writes`` of langgraph-checkpoint-sqlite
3.1 do, and everything is read back by the unchanged saver), and changes only when
rows are committed: the first write after a quiet moment is committed at once, and
writes that arrive while a commit is in progress are committed together right after
it, in the order they were made. Every call still returns only once its rows are
committed, so ``durability="sync"`` keeps its promise: a step is on disk before the
next one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
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
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

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


@dataclass
class _Pending:
    sql: str
    rows: list[tuple[Any, ...]]
    done: asyncio.Future[None]


class GroupCommitSaver(AsyncSqliteSaver):
    """``AsyncSqliteSaver`` whose checkpoint and write inserts are committed in groups."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        super().__init__(conn)
        self._pending: list[_Pending] = []
        self._committing: asyncio.Task[None] | None = None
        self.commits = 0
        """Transactions committed so far (for tests and the benchmark)."""

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
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(sql, rows, done))
        if self._committing is None:
            self._committing = asyncio.get_running_loop().create_task(self._commit_groups())
        await done

    async def _commit_groups(self) -> None:
        try:
            while self._pending:
                group, self._pending = self._pending, []
                failure = await self._commit_group(group)
                for item in group:
                    if item.done.done():
                        continue
                    if failure is None:
                        item.done.set_result(None)
                    else:
                        item.done.set_exception(failure)
        finally:
            self._committing = None

    async def _commit_group(self, group: Sequence[_Pending]) -> Exception | None:
        """Insert and commit one group; on failure roll it back (before anyone else uses
        the connection) and return the error for its callers."""
        async with self.lock:
            try:
                for sql, rows in _runs(group):
                    await self.conn.executemany(sql, rows)
                await self.conn.commit()
            except Exception as exc:
                with contextlib.suppress(Exception):  # a dead connection: exc says why
                    await self.conn.rollback()
                return exc
            self.commits += 1
            return None


def _runs(group: Sequence[_Pending]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Consecutive items with the same statement merged, order kept."""
    runs: list[tuple[str, list[tuple[Any, ...]]]] = []
    for item in group:
        if runs and runs[-1][0] == item.sql:
            runs[-1][1].extend(item.rows)
        else:
            runs.append((item.sql, list(item.rows)))
    return runs


@asynccontextmanager
async def open_checkpointer(path: Path) -> AsyncIterator[GroupCommitSaver]:
    """The run's SQLite checkpointer, set up for many writers of small steps.

    Steps are written with ``durability="sync"``: each step's checkpoint is committed
    before the next step starts, so a killed run redoes at most the step in flight (with
    the default ``async`` a loaded machine was seen to redo several finished turns,
    which with a real model means new answers and new costs). SQLite's WAL with
    ``synchronous=NORMAL`` keeps each commit safe from a killed process while skipping
    an fsync per commit; only a power loss can take back the last commits.
    """
    async with aiosqlite.connect(str(path)) as conn:
        saver = GroupCommitSaver(conn)
        await saver.setup()
        await conn.execute("PRAGMA synchronous=NORMAL")
        yield saver
