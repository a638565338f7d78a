"""What keeps a turn's CPU down (``bench/lab.py``'s variants measure each), and that each
leaves the question's behaviour as it was.

* The routers run on the event loop, not in LangGraph's worker threads, traced only while
  a callback handler listens; a chain-run end nobody hears makes no task.
* ``decide`` writes only the keys whose value changes: fewer writes to apply, version
  and checkpoint, the same state.
* The checkpointer's steps skip the saver's set-up lock once the tables exist.
* A request's deadline is ``asyncio.timeout`` on the caller's task, not a task of its own.
* The cyclic garbage collector runs seldom while the drive loop runs.
"""

from __future__ import annotations

import asyncio
import gc
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from aidanbench.core.settings import Settings
from aidanbench.graph.question import build_question_graph
from aidanbench.nodes import routing
from aidanbench.nodes.decide import changes
from aidanbench.nodes.metrics import chain_metrics
from aidanbench.runner import Progress, drive
from aidanbench.runner.checkpoints import open_checkpointer
from aidanbench.runner.local import drive_local
from aidanbench.runner.tasks import Task
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.retry import attempt_once
from aidanbench.testing import ScriptedBrain
from aidanbench.testing.fakes import brain_services

Q = "What could a paperclip be used for?"
METRICS = set(chain_metrics([]))


async def test_routers_run_on_the_event_loop(monkeypatch: Any) -> None:
    """A plain function in an async graph is run by LangGraph in a worker thread, a hop
    on every step; the graph gets its routers as coroutine functions instead."""
    threads: list[str] = []
    real = routing.next_steps

    def recording(state: Any, settings: Settings) -> list[str]:
        threads.append(threading.current_thread().name)
        return real(state, settings)

    monkeypatch.setattr(routing, "next_steps", recording)
    graph = build_question_graph(brain_services(ScriptedBrain({Q: 3}))).compile()
    out = await graph.ainvoke({"question": Q}, context=Settings())
    assert out["score"] == 3
    assert len(threads) >= 5, "prepare, generate and every decide route"
    assert set(threads) == {threading.main_thread().name}


async def test_the_collector_runs_seldom_while_questions_are_in_flight(
    monkeypatch: Any, tmp_path: Path
) -> None:
    """Every full collection walks every object the chains in flight hold; while the
    drive loop runs, Python's youngest generation is collected every ``YOUNG_OBJECTS``
    allocations, and the thresholds are put back after it."""
    seen: list[tuple[int, int, int]] = []
    real = routing.next_steps

    def recording(state: Any, settings: Settings) -> list[str]:
        seen.append(gc.get_threshold())
        return real(state, settings)

    monkeypatch.setattr(routing, "next_steps", recording)
    before = gc.get_threshold()
    settings = Settings(cache_path=str(tmp_path / "cache.sqlite"))
    progress = Progress(out=io.StringIO(), live=False)
    services = brain_services(ScriptedBrain({Q: 2}))
    lines = await drive_local(
        [Task(settings, Q, 1)], tmp_path, progress=progress, services=services
    )
    assert [line.score for line in lines] == [2]
    assert seen and {threshold[0] for threshold in seen} == {drive.YOUNG_OBJECTS}
    assert gc.get_threshold() == before


def test_sessions_side_by_side_put_the_thresholds_back_whatever_order_they_end() -> None:
    """Two runs on one event loop enter and leave ``collecting_seldom`` interleaved: the
    first to leave must not put 700 back under the second, nor the second leave 100,000."""
    before = gc.get_threshold()
    first, second = drive.collecting_seldom(), drive.collecting_seldom()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == drive.YOUNG_OBJECTS
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_changes_keeps_only_what_differs() -> None:
    state: Any = {"score": 2, "mean_novelty": 0.5, "candidate": {"index": 3}, "answers": []}
    update = {"answers": [{"index": 3}], "score": 2, "mean_novelty": 0.6, "candidate": None}
    update |= {"reward": 2}  # a key the state does not hold yet (an older thread)
    assert changes(state, update) == {
        "answers": [{"index": 3}],
        "mean_novelty": 0.6,
        "candidate": None,
        "reward": 2,
    }


async def test_decide_writes_only_changed_keys_and_the_state_is_whole() -> None:
    """The failing answer changes no metric, so ``decide`` writes none of them; every
    metric of the final state is still the chain's."""
    graph = build_question_graph(brain_services(ScriptedBrain({Q: 3}))).compile(
        checkpointer=InMemorySaver()
    )
    config: RunnableConfig = {"configurable": {"thread_id": "changes"}}
    decided = []
    async for chunk in graph.astream(
        {"question": Q}, config, context=Settings(), stream_mode="updates"
    ):
        if "decide" in chunk:
            decided.append(chunk["decide"])
    assert len(decided) == 4
    assert {"score", "novelty_sum", "reward"} <= set(decided[0])
    last = decided[-1]
    assert last["stop_reason"] == "novelty" and not METRICS & set(last), sorted(last)
    values = (await graph.aget_state(config)).values
    assert {k: values[k] for k in METRICS} == chain_metrics(values["answers"])
    assert values["score"] == 3


async def test_a_step_does_not_take_the_set_up_lock_once_set_up(tmp_path: Path) -> None:
    """``AsyncSqliteSaver.setup`` takes an ``asyncio.Lock`` on every call, and every
    checkpoint and write calls it; held by someone else, a step would wait for it."""
    async with open_checkpointer(tmp_path / "c.sqlite") as saver:
        config: RunnableConfig = {
            "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}
        }
        async with saver.lock:
            await asyncio.wait_for(saver.aput_writes(config, [("x", 1)], "task-1"), 2.0)
        assert saver.commits == 1


async def test_an_attempt_is_bounded_as_a_whole_on_the_callers_task() -> None:
    """``attempt_once`` bounds the whole request (a reply that trickles in never trips a
    read time-out) with ``asyncio.timeout`` on the caller's task, not a task per request
    as ``asyncio.wait_for`` makes; the slot is given back either way."""
    limiter = EndpointLimiter(8)
    caller = asyncio.current_task()
    ran_on: list[asyncio.Task[Any] | None] = []

    async def slow() -> str:
        ran_on.append(asyncio.current_task())
        await asyncio.sleep(5.0)
        return "late"

    async def quick() -> str:
        ran_on.append(asyncio.current_task())
        return "reply"

    assert await attempt_once(limiter, 1.0, quick) == "reply"
    with pytest.raises(TimeoutError):
        await attempt_once(limiter, 0.05, slow)
    assert ran_on == [caller, caller]
    assert limiter.in_flight == 0


def counting_tasks() -> list[str]:
    """The names of the coroutines of every task the running loop makes from now on."""
    made: list[str] = []
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", type(coro).__name__))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    return made


async def test_routers_are_traced_only_while_someone_listens(monkeypatch: Any) -> None:
    """LangGraph traces a router as a run of its own, awaited in a task of its own: with no
    callback handler that run reaches nobody, so the router is awaited on the node's task;
    with one (LangSmith, Studio) every router run is reported as before."""
    from langchain_core.callbacks import AsyncCallbackHandler

    from aidanbench.graph import question

    async def tasks_of_one_question(callbacks: list[Any]) -> list[str]:
        graph = build_question_graph(brain_services(ScriptedBrain({Q: 3}))).compile()
        made = counting_tasks()
        try:
            out = await graph.ainvoke({"question": Q}, {"callbacks": callbacks}, context=Settings())
        finally:
            asyncio.get_running_loop().set_task_factory(None)
        assert out["score"] == 3
        return made

    quiet = await tasks_of_one_question([])
    traced_routers = question.on_event_loop
    monkeypatch.setattr(question, "on_event_loop", lambda router: routing_coroutine(router))
    traced = await tasks_of_one_question([])
    assert len(quiet) < len(traced), (len(quiet), len(traced))

    monkeypatch.setattr(question, "on_event_loop", traced_routers)
    heard: list[str] = []

    class Ear(AsyncCallbackHandler):
        async def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            heard.append(str(kwargs.get("name")))

    await tasks_of_one_question([Ear()])
    assert heard.count("after_decide") == 4 and "after_prepare" in heard


def routing_coroutine(router: Any) -> Any:
    """A router as a plain coroutine function, which LangGraph traces on every call."""

    async def routed(state: Any, runtime: Any) -> Any:
        return router(state, runtime)

    routed.__name__ = router.__name__
    return routed


async def test_a_chain_end_nobody_hears_makes_no_task() -> None:
    """LangChain shields every chain-run end in a task of its own before it looks for a
    handler; ``quiet_chain_ends`` returns at once when there is none, and a handler still
    hears every end and error."""
    from uuid import uuid4

    from langchain_core.callbacks import AsyncCallbackHandler
    from langchain_core.callbacks.manager import AsyncCallbackManagerForChainRun

    from aidanbench.runner.callbacks import quiet_chain_ends

    quiet_chain_ends()
    quiet_chain_ends()  # installed once however often asked
    heard: list[Any] = []

    class Ear(AsyncCallbackHandler):
        async def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
            heard.append(outputs)

        async def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
            heard.append(type(error).__name__)

    def manager(*handlers: Any) -> AsyncCallbackManagerForChainRun:
        return AsyncCallbackManagerForChainRun(
            run_id=uuid4(), handlers=list(handlers), inheritable_handlers=[]
        )

    made = counting_tasks()
    try:
        await manager().on_chain_end({"x": 1})
        await manager().on_chain_error(ValueError("x"))
        assert made == []
        await manager(Ear()).on_chain_end({"x": 2})
        await manager(Ear()).on_chain_error(KeyError("y"))
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert heard == [{"x": 2}, "KeyError"]
    assert "AsyncCallbackManagerForChainRun.on_chain_end" in made  # LangChain's own, heard


async def test_a_node_run_nobody_hears_starts_no_run_and_makes_no_task(
    monkeypatch: Any,
) -> None:
    """LangGraph reports every node's run to a callback manager and awaits the node in a
    task of its own; ``quiet_node_runs`` awaits it on LangGraph's task when no handler
    listens, its config still the node's (the ledger's thread and node come from it), and
    a handler still hears every node's run start and end."""
    from langchain_core.callbacks import AsyncCallbackHandler
    from langchain_core.callbacks.manager import AsyncCallbackManager
    from langgraph._internal._runnable import RunnableSeq

    from aidanbench.graph import question
    from aidanbench.runner import callbacks
    from aidanbench.services.chat import caller

    seen: list[dict[str, Any]] = []
    real = question.decide

    async def recording(state: Any, runtime: Any, **kwargs: Any) -> Any:
        seen.append(caller())
        return await real(state, runtime, **kwargs)

    async def one_question(listeners: list[Any]) -> list[str]:
        graph = build_question_graph(brain_services(ScriptedBrain({Q: 3}))).compile()
        made = counting_tasks()
        try:
            config: RunnableConfig = {"callbacks": listeners, "configurable": {"thread_id": "t"}}
            out = await graph.ainvoke({"question": Q}, config, context=Settings())
        finally:
            asyncio.get_running_loop().set_task_factory(None)
        assert out["score"] == 3
        return made

    langgraphs = getattr(RunnableSeq.ainvoke, "__wrapped__", RunnableSeq.ainvoke)
    monkeypatch.setattr(RunnableSeq, "ainvoke", langgraphs)
    traced = await one_question([])
    starts = AsyncCallbackManager.on_chain_start
    monkeypatch.setattr(question, "decide", recording)
    callbacks.quiet_node_runs()
    callbacks.quiet_node_runs()  # installed once however often asked

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("name") in ("judge", "decide"):
            raise AssertionError("a node run was started for nobody")
        return await starts(self, *args, **kwargs)

    monkeypatch.setattr(AsyncCallbackManager, "on_chain_start", counted)
    quiet = await one_question([])
    assert len(quiet) < len(traced), (len(quiet), len(traced))
    assert seen == [{"thread": "t", "node": "decide"}] * 4
    monkeypatch.setattr(AsyncCallbackManager, "on_chain_start", starts)

    heard: list[str] = []

    class Ear(AsyncCallbackHandler):
        async def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            heard.append(f"start {kwargs.get('name')}")

        async def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
            heard.append("end")

    await one_question([Ear()])
    assert heard.count("start judge") == 4 and heard.count("start decide") == 4
    assert heard.count("end") == sum(1 for h in heard if h.startswith("start"))
    assert RunnableSeq.ainvoke.__wrapped__ is langgraphs  # type: ignore[attr-defined]


async def test_a_finished_thread_is_not_read_back(tmp_path: Path, monkeypatch: Any) -> None:
    """Reading a thread's state replays every write of its answers; the values a question
    stops with are its last step's, as streamed, and they are what the checkpoint holds."""
    from aidanbench.core.state import QuestionOutput
    from aidanbench.runner.drive import Plan
    from aidanbench.runner.local import local_questions
    from aidanbench.runner.tasks import start_input

    services = brain_services(ScriptedBrain({Q: 3}))
    task = Task(Settings(cache_path=str(tmp_path / "cache.sqlite")), Q, 1)
    async with local_questions(tmp_path, services) as questions:
        reads: list[Any] = []
        real = type(questions.graph).aget_state

        async def reading(self: Any, config: Any, **kwargs: Any) -> Any:
            reads.append(config)
            return await real(self, config, **kwargs)

        monkeypatch.setattr(type(questions.graph), "aget_state", reading)
        plan = Plan("run", {}, start=start_input(task, pending=False))
        values = await questions.execute(task, plan, Progress(out=io.StringIO(), live=False))
        assert reads == []
        monkeypatch.undo()
        stored = (
            await questions.graph.aget_state({"configurable": {"thread_id": task.thread_id}})
        ).values
    assert set(QuestionOutput.__annotations__) <= set(values)
    assert values == dict(stored)
    assert values["score"] == 3 and len(values["answers"]) == 4
    assert task.line(values) == task.line(stored)
