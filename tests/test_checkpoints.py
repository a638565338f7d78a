"""The run's checkpointer: LangGraph's SQLite saver, committing on the event loop's thread."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from aidanbench.core.settings import Settings
from aidanbench.graph.question import build_question_graph
from aidanbench.runner.checkpoints import InlineCommitSaver, open_checkpointer
from aidanbench.runner.drive import Plan
from aidanbench.runner.local import local_questions
from aidanbench.runner.tasks import Task, is_finished, start_input
from aidanbench.testing import ScriptedBrain
from aidanbench.testing.fakes import brain_services

from .graphs import TIMING_KEYS

QUESTIONS = [f"Name a use for object number {i}." for i in range(8)]


def table_shape(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Per table, the rows without ids and values (values hold wall-clock latencies)."""
    with sqlite3.connect(path) as db:
        writes = db.execute(
            "SELECT thread_id, task_path, idx, channel, type FROM writes "
            "ORDER BY thread_id, checkpoint_id, task_path, idx"
        ).fetchall()
        checkpoints = db.execute(
            "SELECT thread_id, type, parent_checkpoint_id IS NULL FROM checkpoints "
            "ORDER BY thread_id, checkpoint_id"
        ).fetchall()
    return {"writes": writes, "checkpoints": checkpoints}


def untimed(value: Any) -> Any:
    """``value`` without wall-clock fields, which differ between any two runs."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in {*TIMING_KEYS, "latency_s"}}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


async def run_all(saver: AsyncSqliteSaver) -> list[dict[str, Any]]:
    services = brain_services(ScriptedBrain({q: 3 for q in QUESTIONS}))
    graph = build_question_graph(services).compile(checkpointer=saver)

    async def one(i: int, question: str) -> dict[str, Any]:
        config: RunnableConfig = {"configurable": {"thread_id": f"q{i}"}}
        out: dict[str, Any] = await graph.ainvoke(
            {"question": question}, config, context=Settings(), durability="sync"
        )
        return out

    return await asyncio.gather(*(one(i, q) for i, q in enumerate(QUESTIONS)))


async def test_inline_commits_store_what_the_stock_saver_stores(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "stock.sqlite")) as stock:
        expected = await run_all(stock)
    async with open_checkpointer(tmp_path / "inline.sqlite") as inline:
        got = await run_all(inline)
        assert inline.commits > 0, "every insert went through the inline connection"
    assert [untimed(o) for o in got] == [untimed(o) for o in expected]
    assert table_shape(tmp_path / "inline.sqlite") == table_shape(tmp_path / "stock.sqlite")


class NoAnswers:
    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None:
        pass


async def test_planning_reads_the_state_of_stored_threads_only(tmp_path: Path) -> None:
    """A new run's plan asks the store once which threads it has, not once per thread:
    a per-thread read waits behind the running chains' store calls, and fed 630 chains
    at about 25 a second (docs/performance.md)."""
    tasks = [Task(Settings(model="m"), q, 1) for q in QUESTIONS]
    services = brain_services(ScriptedBrain({q: 2 for q in QUESTIONS}))
    async with local_questions(tmp_path, services) as questions:
        for task in tasks[:3]:  # an earlier session ran these
            await questions.execute(task, (await questions.plan([task]))[0], NoAnswers())
        graph = questions.graph
        expected = []
        for task in tasks:
            snapshot = await graph.aget_state({"configurable": {"thread_id": task.thread_id}})
            values, pending = dict(snapshot.values), bool(snapshot.next)
            expected.append(
                Plan("skip", values)
                if is_finished(values, pending)
                else Plan("run", values, start=start_input(task, pending))
            )
        read: list[str] = []
        whole = graph.aget_state

        async def counted(config: RunnableConfig, *args: Any, **kwargs: Any) -> Any:
            read.append(config["configurable"]["thread_id"])
            return await whole(config, *args, **kwargs)

        graph.aget_state = counted  # type: ignore[method-assign]
        assert await questions.plan(tasks) == expected
    assert [p.action for p in expected] == ["skip"] * 3 + ["run"] * 5
    assert read == [t.thread_id for t in tasks[:3]], "the new threads' state is not read"


async def test_a_checkpoint_is_read_without_waiting_for_the_aiosqlite_connection(
    tmp_path: Path,
) -> None:
    """Reads of one thread's checkpoint go on the loop's thread, not through aiosqlite's
    lock (hundreds of questions starting together queued on it for seconds), and give
    what the stock saver gives: the checkpoint and its pending writes."""
    async with open_checkpointer(tmp_path / "c.sqlite") as saver:
        await run_all(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "q3"}}
        stock = await AsyncSqliteSaver.aget_tuple(saver, config)
        await saver.aput_writes(stock.config if stock else config, [("judge", 1)], "task-9")
        expected = await AsyncSqliteSaver.aget_tuple(saver, config)
        graph = build_question_graph(brain_services(ScriptedBrain({}))).compile(checkpointer=saver)
        async with saver.lock:  # as while another read holds the connection
            got = await asyncio.wait_for(saver.aget_tuple(config), timeout=5)
            state = await asyncio.wait_for(graph.aget_state(config), timeout=5)
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as stock_saver:
        stock_state = await graph.copy(update={"checkpointer": stock_saver}).aget_state(config)
    assert expected is not None and expected.pending_writes
    assert got == expected
    assert len(state.values["answers"]) == 4, "the answers, rebuilt from their deltas"
    assert state == stock_state


async def test_a_write_is_committed_when_the_call_returns(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    config: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
    }
    async with open_checkpointer(path) as saver:
        await saver.aput_writes(config, [("judge", 1), ("embed", 2)], "task-1")
        with sqlite3.connect(path) as other:  # another connection, as after a SIGKILL
            rows = other.execute("SELECT task_id, channel FROM writes ORDER BY idx").fetchall()
        assert rows == [("task-1", "judge"), ("task-1", "embed")]


async def test_the_stock_saver_reads_inline_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "inline.sqlite"
    async with open_checkpointer(path) as inline:
        outputs = await run_all(inline)
    services = brain_services(ScriptedBrain({q: 3 for q in QUESTIONS}))
    async with AsyncSqliteSaver.from_conn_string(str(path)) as stock:
        graph = build_question_graph(services).compile(checkpointer=stock)
        for i, out in enumerate(outputs):
            config: RunnableConfig = {"configurable": {"thread_id": f"q{i}"}}
            snapshot = await graph.aget_state(config)
            assert snapshot.next == ()
            assert snapshot.values["answers"] == out["answers"]
            history = [s async for s in graph.aget_state_history(config)]
            assert len(history) > 8, "every step is kept for Studio's history"


async def test_a_failed_commit_reaches_its_callers_and_the_saver_goes_on(tmp_path: Path) -> None:
    async with open_checkpointer(tmp_path / "c.sqlite") as saver:
        assert isinstance(saver, InlineCommitSaver)
        config: RunnableConfig = {
            "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}
        }
        await saver.conn.execute("ALTER TABLE writes RENAME TO writes_elsewhere")
        with pytest.raises(sqlite3.OperationalError):
            await saver.aput_writes(config, [("judge", 1)], "task-1")
        await saver.conn.execute("ALTER TABLE writes_elsewhere RENAME TO writes")
        await saver.aput_writes(config, [("judge", 2)], "task-2")
        rows = await (await saver.conn.execute("SELECT task_id FROM writes")).fetchall()
        assert [r[0] for r in rows] == ["task-2"], "the failed write was rolled back"


async def test_writes_of_one_loop_turn_share_a_transaction(tmp_path: Path) -> None:
    async with open_checkpointer(tmp_path / "c.sqlite") as saver:
        configs: list[RunnableConfig] = [
            {"configurable": {"thread_id": f"t{i}", "checkpoint_ns": "", "checkpoint_id": "1"}}
            for i in range(5)
        ]
        before = saver.commits
        await asyncio.gather(*(saver.aput_writes(c, [("judge", 1)], "task") for c in configs))
        assert saver.commits == before + 1
        await saver.aput_writes(configs[0], [("judge", 2)], "later")
        assert saver.commits == before + 2, "a write after the turn gets its own"


async def test_a_failed_commit_answers_every_waiter(tmp_path: Path) -> None:
    """When the connection is gone underneath the saver (a crashing run closed it), the
    waiters get the error instead of waiting forever, which kept a crashed run from ever
    exiting."""
    async with open_checkpointer(tmp_path / "checkpoints.sqlite") as saver:
        saver._writer.close()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*three_writes(saver), return_exceptions=True), timeout=5
        )
    assert all(isinstance(o, sqlite3.ProgrammingError) for o in outcomes), outcomes


async def test_writes_after_the_saver_closed_are_cancelled(tmp_path: Path) -> None:
    """Steps still unwinding after the run closed its saver (Ctrl-C) are cancelled, not
    answered with a closed-database error that would be printed as a traceback."""
    async with open_checkpointer(tmp_path / "checkpoints.sqlite") as saver:
        saver.close_writer()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*three_writes(saver), return_exceptions=True), timeout=5
        )
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes


def three_writes(saver: InlineCommitSaver) -> list[Coroutine[Any, Any, None]]:
    config: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}
    }
    return [saver.aput_writes(config, [("x", i)], f"task-{i}") for i in range(3)]


# --- checkpoint bytes per answer are flat (the answers DeltaChannel) -----------------------


async def checkpoint_bytes(tmp_path: Path, answers: int) -> int:
    """Payload bytes (checkpoints and writes) of one question of ``answers`` answers."""
    question = f"Checkpoint size at {answers}?"
    services = brain_services(ScriptedBrain({question: answers}, answer_size=1500))
    path = tmp_path / f"{answers}.sqlite"
    async with open_checkpointer(path) as saver:
        graph = build_question_graph(services).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "size"}}
        out = await graph.ainvoke(
            {"question": question}, config, context=Settings(max_answers=answers)
        )
        assert out["score"] == answers
    with sqlite3.connect(path) as db:
        (checkpoints,) = db.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
        ).fetchone()
        (writes,) = db.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes").fetchone()
    return int(checkpoints) + int(writes)


async def test_checkpoint_bytes_per_answer_are_flat_from_10_to_50(tmp_path: Path) -> None:
    per_answer = {n: await checkpoint_bytes(tmp_path, n) / n for n in (10, 50)}
    # A list re-serialised in every checkpoint makes the 50-answer figure about 3x the
    # 10-answer one; stored as deltas they agree within a few percent.
    assert per_answer[50] <= 1.1 * per_answer[10], per_answer
    assert per_answer[50] <= 20 * 1500, "at most 20x the answer's size"


@dataclass
class Gadget:
    """A type of someone else's, as a checkpoint written elsewhere could hold."""

    command: str


async def put_gadget(saver: Any) -> RunnableConfig:
    """A checkpoint holding a ``Gadget``, written by ``saver``; its config."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"gadget": Gadget("rm -rf /")}
    checkpoint["channel_versions"] = {"gadget": 1}
    config: RunnableConfig = {"configurable": {"thread_id": "elsewhere", "checkpoint_ns": ""}}
    return await saver.aput(config, checkpoint, {}, {"gadget": 1})


async def test_a_checkpoint_rebuilds_no_foreign_type(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "checkpoints.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as permissive:
        config = await put_gadget(permissive)
        found = await permissive.aget_tuple(config)
        assert found is not None and isinstance(
            found.checkpoint["channel_values"]["gadget"], Gadget
        )
    async with open_checkpointer(path) as saver:
        found = await saver.aget_tuple(config)
    assert found is not None
    value = found.checkpoint["channel_values"]["gadget"]
    assert not isinstance(value, Gadget) and value == {"command": "rm -rf /"}, "its data only"
    assert "Blocked deserialization" in caplog.text


async def test_a_question_thread_needs_no_type_beyond_the_safe_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_checkpointer(tmp_path / "inline.sqlite") as saver:
        got = await run_all(saver)
        graph = build_question_graph(brain_services(ScriptedBrain())).compile(checkpointer=saver)
        state = await graph.aget_state({"configurable": {"thread_id": "q0"}})
    assert state.values["answers"] == got[0]["answers"], "read back whole"
    assert "Blocked" not in caplog.text and "unregistered" not in caplog.text
