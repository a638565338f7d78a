"""AidanBench as one step of a larger workflow: a "creativity check" in a brainstorm agent.

The agent frames a topic as an open-ended question, asks the question graph how many
distinct, coherent ideas the model finds, and turns that score into a verdict, wired in the
two ways LangGraph offers::

    START → frame_question → creativity_check (AidanBench) → give_verdict → END   (direct)
    START → creativity_check (frame, AidanBench, map back) → give_verdict → END   (wrapped)

- ``build_direct_agent``: the compiled question graph *is* the node. Parent and child share
  keys (``question`` in; ``score``, ``stop_reason``, ``answers`` out) and the parent's
  context, so the parent declares ``context_schema=Settings``.
- ``build_wrapped_agent``: a node maps the parent's state and context to the graph's input
  and settings, and its output back: for parents that do not look like AidanBench.

Either way the child checkpoints in its own namespace (``creativity_check:<task id>``), so
a parent killed mid-check resumes the check where it stopped, and a pause in the child
(``Settings.interrupt_every``) pauses the parent.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from aidanbench.core.schema_docs import documented
from aidanbench.core.settings import Settings
from aidanbench.core.state import AnswerRecord
from aidanbench.core.vocabulary import ERROR_KINDS
from aidanbench.graph.question import build_question_graph
from aidanbench.services import ServicesFactory, default_services

QUESTION_TEMPLATE = "What is an original idea for {topic}?"
"""How the agent turns its topic into an open-ended AidanBench question."""


@documented
class BrainstormInput(TypedDict):
    """What the brainstorm agent starts from."""

    topic: str
    """What to brainstorm about, e.g. ``a city park``."""
    min_ideas: int
    """Distinct, coherent ideas the model must find for the verdict ``creative``."""


def frame(topic: str) -> str:
    """The AidanBench question asked about ``topic``."""
    return QUESTION_TEMPLATE.format(topic=topic)


def verdict(score: int, stop_reason: str | None, min_ideas: int) -> str:
    """``creative``, ``repetitive`` or, when the check itself failed, ``unknown``: an API
    error says nothing about the model."""
    if stop_reason is None or stop_reason in ERROR_KINDS:
        return "unknown"
    return "creative" if score >= min_ideas else "repetitive"


@documented
class DirectAgentState(BrainstormInput):
    """Brainstorm agent whose state shares the question graph's keys."""

    question: str
    """The question asked (the question graph's input key)."""
    score: int
    """Valid answers (written by the question graph)."""
    stop_reason: str | None
    """Why the question graph stopped (written by it)."""
    answers: list[AnswerRecord]
    """Every scored answer (written by the question graph)."""
    verdict: str
    """``creative``, ``repetitive`` or ``unknown``."""


@documented
class DirectAgentOutput(TypedDict):
    """What the direct agent returns."""

    verdict: str
    """``creative``, ``repetitive`` or ``unknown``."""
    score: int
    """Valid answers."""
    answers: list[AnswerRecord]
    """Every scored answer."""


async def frame_question(state: DirectAgentState) -> dict[str, Any]:
    """Turn the topic into the question the creativity check asks."""
    return {"question": frame(state["topic"])}


async def give_direct_verdict(state: DirectAgentState) -> dict[str, Any]:
    """Judge the check's score against the agent's bar."""
    return {"verdict": verdict(state["score"], state["stop_reason"], state["min_ideas"])}


def build_direct_agent(
    services: ServicesFactory = default_services,
) -> StateGraph[DirectAgentState, Settings, BrainstormInput, DirectAgentOutput]:
    """The brainstorm agent with the compiled question graph added as a node."""
    graph = StateGraph(
        DirectAgentState,
        context_schema=Settings,
        input_schema=BrainstormInput,
        output_schema=DirectAgentOutput,
    )
    graph.add_node("frame_question", frame_question)
    graph.add_node("creativity_check", build_question_graph(services).compile())
    graph.add_node("give_verdict", give_direct_verdict)
    graph.add_edge(START, "frame_question")
    graph.add_edge("frame_question", "creativity_check")
    graph.add_edge("creativity_check", "give_verdict")
    graph.add_edge("give_verdict", END)
    return graph


class BrainstormContext(BaseModel):
    """The wrapped agent's own settings; AidanBench's are one field of them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    creativity: Settings = Field(
        default_factory=Settings, description="How the creativity check is run and scored."
    )


@documented
class WrappedAgentState(BrainstormInput):
    """Brainstorm agent with its own vocabulary, mapped to and from the question graph."""

    ideas: list[str]
    """The valid answers, in order: the ideas worth keeping."""
    creativity: int
    """The check's score (valid answers)."""
    check_stopped: str | None
    """Why the check stopped (its ``stop_reason``)."""
    verdict: str
    """``creative``, ``repetitive`` or ``unknown``."""


@documented
class WrappedAgentOutput(TypedDict):
    """What the wrapped agent returns."""

    verdict: str
    """``creative``, ``repetitive`` or ``unknown``."""
    creativity: int
    """The check's score."""
    ideas: list[str]
    """The valid answers."""


def build_wrapped_agent(
    services: ServicesFactory = default_services,
) -> StateGraph[WrappedAgentState, BrainstormContext, BrainstormInput, WrappedAgentOutput]:
    """The brainstorm agent calling the question graph from a mapping node."""
    question_graph = build_question_graph(services).compile()

    async def creativity_check(
        state: WrappedAgentState, runtime: Runtime[BrainstormContext]
    ) -> dict[str, Any]:
        """Map the topic to a question, run AidanBench on it, map the result back."""
        context = runtime.context if runtime.context is not None else BrainstormContext()
        output = await question_graph.ainvoke(
            {"question": frame(state["topic"])}, context=context.creativity
        )
        return {
            "ideas": [a["answer"] for a in output["answers"] if a["valid"]],
            "creativity": output["score"],
            "check_stopped": output["stop_reason"],
        }

    async def give_verdict(state: WrappedAgentState) -> dict[str, Any]:
        return {"verdict": verdict(state["creativity"], state["check_stopped"], state["min_ideas"])}

    graph = StateGraph(
        WrappedAgentState,
        context_schema=BrainstormContext,
        input_schema=BrainstormInput,
        output_schema=WrappedAgentOutput,
    )
    graph.add_node("creativity_check", creativity_check)
    graph.add_node("give_verdict", give_verdict)
    graph.add_edge(START, "creativity_check")
    graph.add_edge("creativity_check", "give_verdict")
    graph.add_edge("give_verdict", END)
    return graph
