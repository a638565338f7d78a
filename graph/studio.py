"""Compiled graphs for ``langgraph.json`` (LangGraph Studio and the LangGraph server).

Compiled without a checkpointer: the server supplies its own persistence and refuses a graph
that brings one; everyone else calls the builders and compiles with the checkpointer they want.
"""

from __future__ import annotations

from aidanbench.graph.benchmark import build_benchmark_graph
from aidanbench.graph.question import build_question_graph

question = build_question_graph().compile(name="aidanbench_question")
benchmark = build_benchmark_graph().compile(name="aidanbench_benchmark")
