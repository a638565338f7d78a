"""Questions in flight: every question by default, as long as the chains in flight fit the
memory budget; a number given (``--concurrency N``, ``RunSpec.concurrency``) overrides
it.

The witness is the server: each chain has at most one generate request out at a time, so
the most generate requests it saw at once is the number of chains in flight. Generation
is slow here (0.3 s) and the rest fast, so every chain admitted is seen at once.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from aidanbench.cli.main import build_parser, main
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import Progress, RunSpec, admission, run
from aidanbench.runner.local import LocalQuestions, drive_local
from aidanbench.runner.tasks import Task
from aidanbench.services import OpenAIServices
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags, stub_settings

QUESTIONS = bundled_questions(5)
MODELS = ("m1", "m2", "m3")
CHAINS = len(QUESTIONS) * len(MODELS)  # 15: more than the old default of 8


@pytest.fixture
def slow_stub() -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 1 for q in QUESTIONS})
    with OpenAIStub(brain, latency=Latency(generate=0.3, coherence=0.01, embed=0.01)) as stub:
        yield stub


def run_args(stub: OpenAIStub, run_dir: Path, *extra: str) -> list[str]:
    models = [a for m in MODELS for a in ("--model", m)]
    where = ["--run-dir", str(run_dir), *stub_flags(stub.base_url)]
    return ["run", *models, "--questions", str(len(QUESTIONS)), *where, *extra]


def recorded(run_dir: Path) -> tuple[object, object]:
    """What the session's metadata records: questions in flight, and whether the run
    decided it."""
    last = json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]
    return last["concurrency"], last["concurrency_automatic"]


def test_the_command_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    assert main(run_args(slow_stub, tmp_path / "run")) == 0
    assert slow_stub.max_concurrency("generate") == CHAINS
    assert recorded(tmp_path / "run") == (CHAINS, True)


def test_the_default_stops_at_the_memory_budget(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission, "MEMORY_BUDGET_BYTES", 6 * admission.CHAIN_BYTES)
    assert main(run_args(slow_stub, tmp_path / "run")) == 0
    assert slow_stub.max_concurrency("generate") == 6
    assert recorded(tmp_path / "run") == (CHAINS, True), "the most; memory decides as it goes"


def test_a_given_concurrency_overrides_the_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    assert main(run_args(slow_stub, tmp_path / "run", "--concurrency", "3")) == 0
    assert slow_stub.max_concurrency("generate") == 3
    assert recorded(tmp_path / "run") == (3, False)


async def test_the_python_api_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    settings = {f"{role}base_url": slow_stub.base_url for role in ("", "judge_", "embedding_")}
    settings |= {f"{role}api_key_env": TEST_KEY_VARIABLE for role in ("", "judge_", "embedding_")}
    spec = RunSpec(models=list(MODELS), questions=QUESTIONS, run_dir=tmp_path, settings=settings)
    assert spec.concurrency is None
    await run(spec, progress=Progress(out=io.StringIO(), live=False))
    assert slow_stub.max_concurrency("generate") == CHAINS


async def test_the_demo_drive_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    """``aidanbench demo`` leaves ``--concurrency`` unset (a session of the run engine:
    every question in flight); ``drive_local`` alone, without the session, defaults to
    the session's in-flight count too."""
    assert build_parser(only="demo").parse_args(["demo"]).concurrency is None
    tasks = [
        Task(stub_settings(slow_stub.base_url, model=m, cache_path=str(tmp_path / "c")), q, 1)
        for m in MODELS
        for q in QUESTIONS
    ]
    async with OpenAIServices("aiohttp", chat="openai") as factory:
        lines = await drive_local(
            tasks, tmp_path, progress=Progress(out=io.StringIO(), live=False), services=factory
        )
    assert len(lines) == CHAINS
    assert slow_stub.max_concurrency("generate") == CHAINS


def test_every_chain_may_be_in_flight_within_the_memory_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget = admission.MEMORY_BUDGET_BYTES
    monkeypatch.setattr(admission, "physical_memory", lambda: 64 * budget)
    assert admission.chains_in_flight(None, 10**7) == 10**7
    assert admission.chains_in_flight(5, 10**7) == 5, "a number given is not capped"
    assert admission.chains_in_flight(None, 10**7, remote=True) == admission.REMOTE_IN_FLIGHT
    assert admission.admission(None, 100).budget == budget
    assert admission.admission(None, 100, share=4).budget == budget // 4, "a worker's share"
    assert admission.admission(5, 100).budget is None
    monkeypatch.setattr(admission, "physical_memory", lambda: 2 * budget)
    assert admission.memory_budget() == budget // 2, "a quarter of a small machine"
    monkeypatch.setattr(admission, "physical_memory", lambda: None)
    assert admission.memory_budget() == budget


async def test_the_answers_in_flight_count_against_the_budget() -> None:
    """Room for four chains without answers; a chain's answers take the room of new
    ones until it leaves with them; a resumed chain brings its answers."""
    chain, answer = admission.CHAIN_BYTES, admission.ANSWER_BYTES
    gate = admission.Admission(100, budget=4 * chain)
    for _ in range(4):
        await gate.enter()
    fifth = asyncio.ensure_future(gate.enter())
    await asyncio.sleep(0)
    assert not fifth.done()
    for _ in range(chain // answer + 1):  # one chain's answers outgrow a chain's room
        gate.answered()
    gate.leave()  # a chain without answers leaves: still no room
    await asyncio.sleep(0)
    assert not fifth.done() and gate.in_flight == 3
    gate.leave(chain // answer + 1)  # the long one leaves
    await asyncio.sleep(0)
    assert fifth.done() and gate.in_flight == 3 and gate.answers == 0
    await gate.enter(answers=30)  # resumed with 30 answers
    assert gate.held() == 4 * chain + 30 * answer


async def test_one_chain_starts_whatever_it_holds() -> None:
    gate = admission.Admission(100, budget=1)
    await asyncio.wait_for(gate.enter(answers=50), 1)
    assert gate.in_flight == 1


async def test_the_window_grows_only_while_it_is_what_holds_questions_back() -> None:
    """Questions waiting for memory, not for the window, leave the window as it is: a
    window grown past the chains in flight would take many looks to shrink when the loop
    falls behind."""
    gate = admission.Admission(100, adaptive=True, budget=2 * admission.CHAIN_BYTES, start=8)
    entering = [asyncio.ensure_future(gate.enter()) for _ in range(3)]
    await asyncio.sleep(0)
    assert gate.in_flight == 2 and gate.window == 8
    gate.observe(0.0)
    assert gate.window == 8
    for _ in range(2):
        gate.leave()
    await asyncio.gather(*entering)


def test_a_session_adapts_its_window_only_when_no_number_is_given() -> None:
    """No ``--concurrency``: the window follows the event loop; a number given, or a
    LangGraph server running the chains, keeps a fixed one."""
    chosen = admission.admission(None, 100)
    assert chosen.adaptive and chosen.most == 100
    assert chosen.window == admission.START_IN_FLIGHT
    assert not admission.admission(5, 100).adaptive
    assert admission.admission(5, 100).window == 5
    assert not admission.admission(None, 100, remote=True).adaptive


async def test_the_window_holds_while_requests_wait_for_an_endpoint() -> None:
    """More chains than the endpoints serve would only queue, every chain a turn at a
    time: while requests wait for a slot the window holds, and with more than a limit's
    worth waiting it shrinks."""
    gate = admission.Admission(1000, adaptive=True, start=20)
    entering = [asyncio.ensure_future(gate.enter()) for _ in range(40)]
    await asyncio.sleep(0)
    assert gate.in_flight == 20
    gate.observe(0.0, backlog=0.5)
    assert gate.window == 20, "requests wait: hold"
    gate.observe(0.0, backlog=0.0)
    assert gate.window == 20 * admission.GROW + 1, "none waits: grow"
    gate.observe(0.0, backlog=2.0)
    assert gate.window == (20 * admission.GROW + 1) * admission.SHRINK, "shrink"
    for task in entering:
        task.cancel()
    await asyncio.gather(*entering, return_exceptions=True)


async def test_the_backlog_is_the_busiest_endpoints_queue_over_its_limit() -> None:
    async with OpenAIServices("aiohttp", chat="openai") as factory:
        assert factory.backlog() == 0.0
        limiter = factory.limiter("127.0.0.1:1", Settings(max_concurrency=2))
        limiter.limit = 2.0
        slots = [limiter.slot() for _ in range(5)]
        held = [await slot.__aenter__() for slot in slots[:2]]
        waiting = [asyncio.ensure_future(slot.__aenter__()) for slot in slots[2:]]
        await asyncio.sleep(0)
        assert limiter.queued == 3 and held == [None, None]
        assert factory.backlog() == 1.5
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        for slot in slots[:2]:
            await slot.__aexit__(None, None, None)
        assert factory.backlog() == 0.0


def test_the_local_backend_passes_its_endpoints_backlog_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drive loop reads the backlog from the backend: the local one's is its
    OpenAIServices' (another factory keeps no limiters: none)."""
    factory = OpenAIServices("aiohttp")
    monkeypatch.setattr(factory, "backlog", lambda: 2.5)
    assert LocalQuestions(cast(Any, None), factory).backlog() == 2.5
    assert LocalQuestions(cast(Any, None), cast(Any, lambda settings: settings)).backlog() == 0.0
