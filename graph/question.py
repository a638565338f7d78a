"""The per-question AidanBench loop as a LangGraph state graph.

    START → prepare ─┬→ generate ──┬→ judge ─────────┐
                     │             ├→ embed_novelty ─┤
                     │             ├→ llm_novelty ───┼→ decide ─→ (loop: scorers, generate) | END
                     │             └→ generate_next ─┘
                     └→ END (thread already finished)

``prepare``, ``generate`` and ``decide`` route with one rule (``nodes.routing``): score
the candidate in parallel (judge, embedding novelty and, when on, LLM novelty), generate
the next answer meanwhile when pipelining, then decide. ``decide`` loops back to the
scorers of the look-ahead answer (pipelined) or to ``generate`` (not pipelined), or ends
at the first invalid answer, an error or the answer cap.
"""

from __future__ import annotations

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from aidanbench.graph.settings import Settings
from aidanbench.graph.state import QuestionInput, QuestionOutput, QuestionState
from aidanbench.nodes.context import bind, settings_of
from aidanbench.nodes.decide import decide
from aidanbench.nodes.embed_novelty import embed_novelty
from aidanbench.nodes.generate import generate, generate_next
from aidanbench.nodes.judge import judge
from aidanbench.nodes.llm_novelty import llm_novelty
from aidanbench.nodes.prepare import prepare
from aidanbench.nodes.routing import DESTINATIONS, next_steps
from aidanbench.services import ServicesFactory, default_services


def route(state: QuestionState, runtime: Runtime[Settings]) -> list[str]:
    """Conditional edge: the next steps for this state (see ``nodes.routing``)."""
    return next_steps(state, settings_of(runtime))


def build_question_graph(
    services: ServicesFactory = default_services,
) -> StateGraph[QuestionState, Settings, QuestionInput, QuestionOutput]:
    """The uncompiled per-question graph; compile it with the checkpointer you want.

    ``services`` turns settings into clients; the default reaches OpenAI-compatible
    endpoints with keys from the environment. Pass another factory to use other chat
    model classes or fakes.
    """
    graph = StateGraph(
        QuestionState,
        context_schema=Settings,
        input_schema=QuestionInput,
        output_schema=QuestionOutput,
    )
    graph.add_node("prepare", bind(prepare, services))
    graph.add_node("generate", bind(generate, services))
    graph.add_node("judge", bind(judge, services))
    graph.add_node("embed_novelty", bind(embed_novelty, services))
    graph.add_node("llm_novelty", bind(llm_novelty, services))
    graph.add_node("generate_next", bind(generate_next, services))
    graph.add_node("decide", bind(decide, services), defer=True)

    graph.add_edge(START, "prepare")
    for source in ("prepare", "generate", "decide"):
        graph.add_conditional_edges(source, route, DESTINATIONS)
    for branch in ("judge", "embed_novelty", "llm_novelty", "generate_next"):
        graph.add_edge(branch, "decide")
    return graph
