"""The whole benchmark for one model as a LangGraph graph: fan out over questions.

    START → plan ──Send(question)──→ run_question (× N, in parallel) → summarize → END

Each question runs the per-question graph as a subgraph in its own checkpoint namespace,
so an interrupted benchmark resumes without repeating finished answers. Studio shows this
graph; the command line drives question threads directly, for resuming across many models.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from aidanbench.core.schema_docs import documented
from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionOutput
from aidanbench.graph.question import build_question_graph
from aidanbench.graph.questions import bundled_questions, validated
from aidanbench.nodes.context import settings_of
from aidanbench.record.lines import QuestionLine
from aidanbench.record.results import question_result, totals
from aidanbench.services import ServicesFactory, default_services


@documented
class BenchmarkInput(TypedDict, total=False):
    """What starts a benchmark run (settings go in the context)."""

    questions: list[str]
    """Questions to ask; empty or absent: the bundled 63, in the benchmark's order."""
    question_limit: int | None
    """Ask only the first N questions."""


@documented
class QuestionTask(TypedDict):
    """The payload sent to ``run_question``."""

    question: str
    """One question of the set."""


@documented
class BenchmarkOutput(TypedDict):
    """The benchmark's results for one model."""

    results: list[QuestionOutput]
    """Each question's output (answers, stop reason, metrics), in completion order."""
    summary: dict[str, Any]
    """Totals: score, novelty sum, questions, stop reasons, errored questions."""


@documented
class BenchmarkState(TypedDict):
    """State of the benchmark graph."""

    questions: list[str]
    """The question set in force."""
    question_limit: int | None
    """Ask only the first N questions."""
    results: Annotated[list[QuestionOutput], operator.add]
    """Question outputs; parallel branches each append one."""
    summary: dict[str, Any]
    """Totals written by ``summarize``."""


async def plan(state: BenchmarkState) -> dict[str, Any]:
    """The input's question set, or the bundled one, checked as every source's is."""
    questions = state.get("questions") or bundled_questions()
    limit = state.get("question_limit")
    return {"questions": validated(questions, "benchmark input questions", limit)}


def fan_out(state: BenchmarkState) -> list[Send]:
    """One ``run_question`` branch per question."""
    return [Send("run_question", QuestionTask(question=q)) for q in state["questions"]]


def summarize_results(results: list[QuestionOutput]) -> dict[str, Any]:
    """Totals over question outputs, counted as every report counts them."""
    lines = [question_result(_line(output)) for output in results]
    counted = totals(lines)
    return {
        "score": counted.score,
        "novelty_sum": counted.novelty_sum,
        "questions": counted.lines,
        "stop_reasons": counted.stop_reasons,
        "errored": [
            {"question": output["question"], "error": output.get("error")}
            for output, line in zip(results, lines, strict=True)
            if line.errored
        ],
    }


def _line(output: QuestionOutput) -> QuestionLine:
    measured = output["measured"]
    if measured is None:  # prepare records it before any answer
        raise ValueError(f"question {output['question'][:60]!r} has no measured settings")
    return QuestionLine.from_output(output, measured=measured, question=output["question"])


async def summarize(state: BenchmarkState) -> dict[str, Any]:
    """Total the question results."""
    return {"summary": summarize_results(state.get("results", []))}


def build_benchmark_graph(
    services: ServicesFactory = default_services,
) -> StateGraph[BenchmarkState, Settings, BenchmarkInput, BenchmarkOutput]:
    """The uncompiled benchmark graph; the question subgraph shares its checkpointer."""
    question_graph = build_question_graph(services).compile()

    async def run_question(task: QuestionTask, runtime: Runtime[Settings]) -> dict[str, Any]:
        output = await question_graph.ainvoke(
            {"question": task["question"]}, context=settings_of(runtime)
        )
        return {"results": [output]}

    graph = StateGraph(
        BenchmarkState,
        context_schema=Settings,
        input_schema=BenchmarkInput,
        output_schema=BenchmarkOutput,
    )
    graph.add_node("plan", plan)
    graph.add_node("run_question", run_question)  # type: ignore[arg-type]
    graph.add_node("summarize", summarize, defer=True)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out, ["run_question"])
    graph.add_edge("run_question", "summarize")
    graph.add_edge("summarize", END)
    return graph
