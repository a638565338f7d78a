"""AidanBench as LangGraph graphs: the public API for using it inside other graphs.

Builders return *uncompiled* graphs, so the caller chooses persistence::

    from aidanbench.graph import Settings, build_question_graph

    question = build_question_graph().compile()        # as a subgraph: no checkpointer
    parent.add_node("creativity_check", question)       # reads/writes parent keys
                                                        # ``question``, ``score``, ``answers``…
    out = await question.ainvoke({"question": "What is art?"}, context=Settings(...))

- ``build_question_graph(services)``: one question, answered until an answer fails. Input
  ``QuestionInput`` (``question``), output ``QuestionOutput`` (``score``, ``answers``,
  ``stop_reason``, metrics), settings ``Settings`` in the run's ``context``. Added directly
  as a node it shares the parent's context, so the parent should declare
  ``context_schema=Settings``; from a wrapper node, pass ``context=`` yourself (see
  ``aidanbench.graph.examples``).
- ``build_benchmark_graph(services)``: a question set fanned out with ``Send``, totalled in
  ``summary``.
- ``services`` turns settings into model clients; the default reaches OpenAI-compatible
  endpoints with keys read from the environment variables the settings name (never from
  state or context). ``aidanbench.testing.fakes`` has in-process fakes for tests.

Either graph checkpoints under the parent's checkpointer in its own namespace, so a killed
parent resumes without repeating the child's finished steps, and an ``interrupt()`` in the
child (``Settings.interrupt_on_reject`` / ``interrupt_every``) surfaces at the parent.

Names are imported on first use: ``aidanbench.core.thresholds`` and ``settings`` are read by
the analysis code, which should not pay for loading LangGraph and the model clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aidanbench.core.errors import QuestionSourceError
    from aidanbench.core.settings import Settings
    from aidanbench.core.state import (
        AnswerRecord,
        CallStats,
        ErrorInfo,
        QuestionInput,
        QuestionOutput,
        QuestionState,
    )
    from aidanbench.core.thresholds import Thresholds
    from aidanbench.core.vocabulary import StopReason
    from aidanbench.graph.benchmark import (
        BenchmarkInput,
        BenchmarkOutput,
        BenchmarkState,
        build_benchmark_graph,
    )
    from aidanbench.graph.question import build_question_graph
    from aidanbench.graph.questions import QuestionSet, load_question_set, load_questions
    from aidanbench.services import Services, ServicesFactory, default_services

_EXPORTS = {
    "build_question_graph": "aidanbench.graph.question",
    "build_benchmark_graph": "aidanbench.graph.benchmark",
    "BenchmarkInput": "aidanbench.graph.benchmark",
    "BenchmarkOutput": "aidanbench.graph.benchmark",
    "BenchmarkState": "aidanbench.graph.benchmark",
    "Settings": "aidanbench.core.settings",
    "QuestionSet": "aidanbench.graph.questions",
    "QuestionSourceError": "aidanbench.core.errors",
    "load_questions": "aidanbench.graph.questions",
    "load_question_set": "aidanbench.graph.questions",
    "StopReason": "aidanbench.core.vocabulary",
    "Thresholds": "aidanbench.core.thresholds",
    "QuestionInput": "aidanbench.core.state",
    "QuestionOutput": "aidanbench.core.state",
    "QuestionState": "aidanbench.core.state",
    "AnswerRecord": "aidanbench.core.state",
    "CallStats": "aidanbench.core.state",
    "ErrorInfo": "aidanbench.core.state",
    "Services": "aidanbench.services",
    "ServicesFactory": "aidanbench.services",
    "default_services": "aidanbench.services",
}

__all__ = [
    "AnswerRecord",
    "BenchmarkInput",
    "BenchmarkOutput",
    "BenchmarkState",
    "CallStats",
    "ErrorInfo",
    "QuestionInput",
    "QuestionOutput",
    "QuestionSet",
    "QuestionSourceError",
    "QuestionState",
    "Services",
    "ServicesFactory",
    "Settings",
    "StopReason",
    "Thresholds",
    "build_benchmark_graph",
    "build_question_graph",
    "default_services",
    "load_question_set",
    "load_questions",
]


def __getattr__(name: str) -> Any:
    """Import an exported name from its module on first access (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
