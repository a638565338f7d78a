"""What keeps a turn's CPU down (``bench/lab.py``'s variants measure each), and that each
leaves the question's behaviour as it was.

* The routers run on the event loop, not in LangGraph's worker threads.
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
