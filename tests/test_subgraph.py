"""AidanBench inside a larger graph: the brainstorm agent of ``aidanbench.graph.examples``.

Both wirings (the question graph as the node; a wrapper node mapping state) must give
the standalone graph's answers, checkpoint the child under the parent's checkpointer in
its own namespace, surface the child's pauses at the parent, and resume a killed parent
without asking the model again for work that had finished.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from aidanbench.graph import Settings
from aidanbench.graph.examples import (
    BrainstormContext,
    build_direct_agent,
    build_wrapped_agent,
    frame,
    verdict,
)
from aidanbench.services import ServicesFactory
from aidanbench.testing import (
    Latency,
    OpenAIStub,
    RecordedRequest,
    ScriptedBrain,
    parse_coherence_prompt,
    parse_generate_prompt,
)
from aidanbench.testing.fakes import brain_services

from .conftest import REPO
from .graphs import comparable, finish, run_question
from .run_agent import run

TOPIC = "a city park"
CHAIN = 4
WIRINGS = ["direct", "wrapped"]


def agent(wiring: str, services: ServicesFactory, saver: InMemorySaver) -> CompiledStateGraph:
    builder = build_direct_agent(services) if wiring == "direct" else build_wrapped_agent(services)
    return builder.compile(checkpointer=saver)


def context(wiring: str, settings: Settings) -> Any:
    return settings if wiring == "direct" else BrainstormContext(creativity=settings)


def check_answers(wiring: str, out: dict[str, Any], standalone: dict[str, Any]) -> None:
    """The agent's view of the check equals the standalone question graph's output."""
    valid = [a["answer"] for a in standalone["answers"] if a["valid"]]
    if wiring == "direct":
        assert comparable(out["answers"]) == comparable(standalone["answers"])
        assert out["score"] == standalone["score"]
    else:
        assert out["ideas"] == valid
        assert out["creativity"] == standalone["score"]


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize(
    ("min_ideas", "expected"), [(CHAIN, "creative"), (CHAIN + 1, "repetitive")]
)
async def test_agent_runs_the_check(wiring: str, min_ideas: int, expected: str) -> None:
    brain = ScriptedBrain({frame(TOPIC): CHAIN})
    standalone = await run_question(brain_services(brain), frame(TOPIC))
    assert standalone["score"] == CHAIN

    graph = agent(wiring, brain_services(brain), InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    out = await graph.ainvoke(
        {"topic": TOPIC, "min_ideas": min_ideas}, config, context=context(wiring, Settings())
    )
    assert out["verdict"] == expected
    check_answers(wiring, out, standalone)


@pytest.mark.parametrize(
    ("score", "stop_reason", "expected"),
    [(3, "novelty", "creative"), (2, "coherence", "repetitive"), (9, "error", "unknown")],
)
def test_a_failed_check_is_no_verdict(score: int, stop_reason: str, expected: str) -> None:
    assert verdict(score, stop_reason, 3) == expected


@pytest.mark.parametrize("wiring", WIRINGS)
async def test_child_pauses_surface_at_the_parent(wiring: str) -> None:
    """Pauses every 2 answers: the child's state is visible in its own namespace, and
    resuming the parent finishes the check with the same calls as an unpaused run."""
    brain = ScriptedBrain({frame(TOPIC): CHAIN})
    calls: list[tuple[str, float, float]] = []
    plain_calls: list[tuple[str, float, float]] = []
    start = {"topic": TOPIC, "min_ideas": 2}
    plain = await agent(wiring, brain_services(brain, events=plain_calls), InMemorySaver()).ainvoke(
        start, {"configurable": {"thread_id": "p"}}, context=context(wiring, Settings())
    )

    saver = InMemorySaver()
    graph = agent(wiring, brain_services(brain, events=calls), saver)
    config = {"configurable": {"thread_id": "t"}}
    paused = context(wiring, Settings(interrupt_every=2))
    out = await graph.ainvoke(start, config, context=paused)
    pauses = 0
    while "__interrupt__" in out:
        pauses += 1
        state = await graph.aget_state(config, subgraphs=True)
        assert state.next == ("creativity_check",)
        (task,) = state.tasks
        child = task.state
        assert child is not None and not isinstance(child, dict)
        namespace = child.config["configurable"]["checkpoint_ns"]
        assert namespace.startswith("creativity_check:")
        assert len(child.values["answers"]) == 2 * pauses - 1, "paused before recording"
        (pause,) = out["__interrupt__"]
        assert pause.value["reason"] == "review"
        assert pause.value["answer"]["index"] == 2 * pauses
        out = await graph.ainvoke(Command(resume="ok"), config, context=paused)
    assert pauses == (CHAIN + 1) // 2
    if wiring == "direct":
        assert comparable(out.pop("answers")) == comparable(plain.pop("answers"))
    assert out == plain
    assert Counter(kind for kind, *_ in calls) == Counter(kind for kind, *_ in plain_calls)

    namespaces = Counter(
        c.config["configurable"]["checkpoint_ns"].split(":")[0]
        for c in saver.list({"configurable": {"thread_id": "t"}})
    )
    assert set(namespaces) == {"", "creativity_check"}
    assert namespaces["creativity_check"] > CHAIN, "the child checkpoints every step"


def run_agent(run_dir: Path, stub: OpenAIStub, wiring: str) -> subprocess.Popen[str]:
    run_dir.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.run_agent", str(run_dir), stub.base_url, TOPIC, wiring],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def asked(request: RecordedRequest) -> tuple[str, str, tuple[str, ...]]:
    """What a request asked: the same key twice means the same work was done twice."""
    return (request.kind, request.prompt, request.texts)


_ANSWER_NUMBER = re.compile(r"(?:Idea|gibberish) (\d+)")


def step_of(request: RecordedRequest) -> int:
    """The turn of the scripted chain a request belongs to.

    Turn k judges and embeds answer k and, pipelined, generates answer k + 1 meanwhile.
    """
    if request.kind == "generate":
        return len(parse_generate_prompt(request.prompt)[1])
    if request.kind == "coherence":
        texts: tuple[str, ...] = (parse_coherence_prompt(request.prompt)[1],)
    else:
        texts = request.texts
    return max(int(m.group(1)) for t in texts if (m := _ANSWER_NUMBER.search(t)))


@pytest.mark.e2e
@pytest.mark.parametrize("wiring", WIRINGS)
def test_killed_parent_resumes_the_check(tmp_path: Path, api_key: str, wiring: str) -> None:
    """Kill the parent mid-check, run it again: only the turn in flight is redone.

    ``tests.run_agent`` checkpoints each step before the next starts (durability
    ``sync``), so everything of earlier turns must come from the child's checkpoints.
    """
    # Ending on gibberish, not on a repeat: a repeated answer is judged again by design.
    brain = ScriptedBrain({frame(TOPIC): 12}, default_ending="coherence")
    latency = Latency(generate=0.05, coherence=0.08, embed=0.03)
    with OpenAIStub(brain, latency=latency) as stub:
        (tmp_path / "clean").mkdir()
        clean = asyncio.run(run(tmp_path / "clean", stub.base_url, TOPIC, wiring))
        clean_keys = [asked(r) for r in stub.requests]
        assert len(clean_keys) == len(set(clean_keys)), "a clean run asks everything once"

        stub.clear()
        proc = run_agent(tmp_path / "killed", stub, wiring)
        deadline = time.monotonic() + 60
        while stub.count("generate") < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(0.3)  # requests in flight at the kill finish and are recorded
        before = stub.requests
        assert 0 < len([r for r in before if r.kind == "coherence"]) < 13, "killed mid-check"

        stub.clear()
        resumed = finish(run_agent(tmp_path / "killed", stub, wiring))
        after = [asked(r) for r in stub.requests]

    last = max(step_of(r) for r in before)
    settled = {asked(r) for r in before if step_of(r) < last}
    repeated = set(after) & {asked(r) for r in before}
    redone = sorted((r.kind, step_of(r)) for r in before if asked(r) in repeated)
    assert len(settled) >= 10
    assert not repeated & settled, f"finished work was asked again: {redone} (last {last})"
    assert len(after) == len(set(after))
    assert sorted({*after, *(asked(r) for r in before)}) == sorted(clean_keys)
    if wiring == "direct":
        assert comparable(resumed.pop("answers")) == comparable(clean.pop("answers"))
    assert resumed == clean
