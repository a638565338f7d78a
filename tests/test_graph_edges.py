"""The drawn graph is the graph that runs: exactly the possible transitions, as README says."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from aidanbench.core.settings import Settings
from aidanbench.graph.question import build_question_graph
from aidanbench.nodes.routing import next_steps, router
from aidanbench.testing import ScriptedBrain
from aidanbench.testing.fakes import brain_services

from .conftest import REPO

SCORERS = {"judge", "embed_novelty", "llm_novelty", "lexical_novelty", "generate_next"}
EDGES = (
    {("__start__", "prepare")}
    | {("prepare", d) for d in {"generate", *SCORERS, "decide", "__end__"}}
    | {("generate", d) for d in {*SCORERS, "decide"}}
    | {(s, "decide") for s in SCORERS}
    | {("decide", d) for d in {"generate", *SCORERS, "__end__"}}
)


def drawn_edges() -> set[tuple[str, str]]:
    drawn = build_question_graph().compile().get_graph()
    return {(e.source, e.target) for e in drawn.edges}


def test_the_compiled_graph_draws_exactly_the_possible_edges() -> None:
    edges = drawn_edges()
    assert edges == EDGES
    assert len(edges) == 27
    for impossible in [("generate", "generate"), ("decide", "decide"), ("generate", "__end__")]:
        assert impossible not in edges


def test_readme_lists_the_drawn_edges() -> None:
    """README's edge list (the block after its diagram) is the compiled graph's."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```\n(START → prepare\n.*?)```", readme, re.S)
    assert block is not None, "README has the edge list"
    listed = set()
    for line in block.group(1).splitlines():
        sources, targets = line.split(" → ")
        for source in sources.split(", "):
            for target in targets.split(" | "):
                name = {"START": "__start__", "END": "__end__"}.get(target, target)
                listed.add(({"START": "__start__"}.get(source, source), name))
    assert listed == drawn_edges()


def transitions(events: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Edges a run took, from the ``debug`` stream's task events, step by step."""
    steps: dict[int, set[str]] = {}
    for event in events:
        if event["type"] == "task":
            steps.setdefault(event["step"], set()).add(event["payload"]["name"])
    ordered = [steps[s] for s in sorted(steps)]
    taken = set()
    for before, after in itertools.pairwise(ordered):
        for source in before:
            for target in after:
                if source in SCORERS and target != "decide":
                    continue  # scorers only lead to decide; the router of their peer ran
                taken.add((source, target))
    return taken


@pytest.mark.parametrize("llm_novelty", [False, True])
@pytest.mark.parametrize("pipeline", [False, True])
async def test_every_transition_of_a_run_is_drawn(llm_novelty: bool, pipeline: bool) -> None:
    graph = build_question_graph(brain_services(ScriptedBrain({"Q?": 3}))).compile(
        checkpointer=InMemorySaver()
    )
    settings = Settings(llm_novelty=llm_novelty, pipeline=pipeline)
    events = [
        e
        async for e in graph.astream(
            {"question": "Q?"},
            {"configurable": {"thread_id": "t"}},
            context=settings,
            stream_mode="debug",
        )
    ]
    taken = transitions(events)
    assert taken <= EDGES
    assert ("decide", "generate" if not pipeline else "judge") in taken
    assert ("llm_novelty", "decide") in taken if llm_novelty else "llm_novelty" not in str(taken)


def candidate(index: int, **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "answer": f"a{index}",
        "raw_reply": "r",
        "used_answer_tag": True,
        **extra,
    }


def outcome(index: int) -> dict[str, Any]:
    return {"index": index, "value": 1.0}


class Ctx:
    def __init__(self, settings: Settings) -> None:
        self.context = settings


def test_a_router_refuses_a_step_its_source_cannot_lead_to() -> None:
    """``decide`` never leads to ``decide``: a state that asks for it is a bug, named."""
    state: Any = {
        "question": "Q?",
        "candidate": candidate(2),
        "coherence_result": outcome(2),
        "novelty_result": outcome(2),
        "lookahead": candidate(3),
    }
    settings = Settings()
    assert next_steps(state, settings) == ["decide"]
    assert router("prepare")(state, Ctx(settings)) == ["decide"]  # type: ignore[arg-type]
    assert router("generate")(state, Ctx(settings)) == ["decide"]  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"after decide: impossible next steps \['decide'\]"):
        router("decide")(state, Ctx(settings))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"after generate: .*'__end__'"):
        router("generate")({**state, "stop_reason": "novelty"}, Ctx(settings))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"after generate: .*'generate'"):
        router("generate")({"question": "Q?"}, Ctx(settings))  # type: ignore[arg-type]
