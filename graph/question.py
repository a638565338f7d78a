"""The per-question AidanBench loop as a LangGraph state graph.

    START → prepare ─┬→ generate ──┬→ judge ─────────┐
                     │             ├→ embed_novelty ─┤
                     │             ├→ llm_novelty ───┼→ decide ─→ (loop: scorers, generate) | END
                     │             └→ generate_next ─┘
                     ├→ (resume: the missing scorers, or decide)
                     └→ END (thread already finished)

``prepare``, ``generate`` and ``decide`` each have their own router (``nodes.routing``)
over the one state-only rule: score the candidate in parallel, generate the next answer
meanwhile when pipelining, then decide. ``decide`` loops back to the scorers of the
look-ahead answer (pipelined) or to ``generate``, or ends at the first invalid answer, an
error or a cap. Each router's destinations are only those its source can lead to, so the
drawn graph is the graph that runs.
"""

from __future__ import annotations

import types
from functools import partial
from importlib import import_module
from typing import Annotated, Any, get_type_hints

from langgraph.graph import START, StateGraph
from pydantic import Field

from aidanbench.core.schema_docs import documented
from aidanbench.core.scores import Score, declared
from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionInput, QuestionOutput, QuestionState, ScoreOutcome
from aidanbench.nodes.caps import Budget
from aidanbench.nodes.decide import decide
from aidanbench.nodes.generate import generate, generate_next
from aidanbench.nodes.prepare import prepare
from aidanbench.nodes.routing import destinations, on_event_loop, router
from aidanbench.services import ServicesFactory, default_services


def build_question_graph(
    services: ServicesFactory = default_services, *, budget: Budget | None = None
) -> StateGraph[QuestionState, Settings, QuestionInput, QuestionOutput]:
    """The uncompiled per-question graph; compile it with the checkpointer you want.

    ``services`` turns settings into clients (pass another factory for other chat model
    classes or fakes). ``budget`` is a run's spending cap (``nodes.caps.Budget``): once it is
    spent, each question stops at its next turn. Each declared score (``core.scores``) is a
    node between ``generate`` and ``decide``.
    """
    graph = StateGraph(
        with_scores(QuestionState, declared(), outcomes=True),
        context_schema=Settings,
        input_schema=QuestionInput,
        output_schema=with_scores(QuestionOutput, declared()),
    )
    graph.add_node("prepare", partial(prepare, budget=budget))
    graph.add_node("generate", partial(generate, services=services))
    for score in declared():
        graph.add_node(score.node, partial(score_node(score), services=services))
    graph.add_node("generate_next", partial(generate_next, services=services))
    graph.add_node("decide", partial(decide, budget=budget), defer=True)

    graph.add_edge(START, "prepare")
    for source in ("prepare", "generate", "decide"):
        graph.add_conditional_edges(source, on_event_loop(router(source)), destinations(source))
    for branch in (*(score.node for score in declared()), "generate_next"):
        graph.add_edge(branch, "decide")
    return graph


def score_node(score: Score) -> Any:
    """The node function a score declares (``module:attribute``)."""
    module, _, name = score.function.partition(":")
    return getattr(import_module(module), name)


def with_scores(schema: Any, scores: tuple[Score, ...], *, outcomes: bool = False) -> Any:
    """``schema`` with the keys of each score it does not declare: its mean and that mean's
    environment name, and with ``outcomes`` its branch's outcome. LangGraph drops a node's
    write to a key its state lacks, and returns only the output schema's keys. The new
    schema subclasses ``schema`` (documented), so Studio keeps every field's description."""
    fields = get_type_hints(schema, include_extras=True)
    more: dict[str, Any] = {}
    for score in scores:
        mean = f"Mean {score.label} over valid answers (None: none, or the score is off)."
        more[score.mean] = Annotated[float | None, Field(description=mean)]
        alias = f"The verifiers environment's name for ``{score.mean}`` (same value)."
        more[score.metric] = Annotated[float | None, Field(description=alias)]
        if outcomes:
            outcome = f"{score.label} branch outcome for ``candidate``."
            more[score.outcome_key] = Annotated[ScoreOutcome | None, Field(description=outcome)]
    more = {key: kind for key, kind in more.items() if key not in fields}
    if not more:
        return schema
    body = {"__annotations__": more, "__module__": schema.__module__, "__doc__": schema.__doc__}
    extended = types.new_class(schema.__name__, (schema,), {}, lambda ns: ns.update(body))
    return documented(extended)
