"""Helpers to run the question graph in tests."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from aidanbench.core.settings import Settings
from aidanbench.graph.question import build_question_graph
from aidanbench.services import ServicesFactory

TIMING_KEYS = ("elapsed_s",)


def comparable(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answer records without wall-clock fields (latency, elapsed), for equality checks."""
    out = []
    for record in answers:
        kept = {k: v for k, v in record.items() if k not in TIMING_KEYS and k != "calls"}
        kept["calls"] = {
            role: {k: v for k, v in stats.items() if k != "latency_s"}
            for role, stats in record["calls"].items()
        }
        out.append(kept)
    return out


async def run_question(
    services: ServicesFactory,
    question: str,
    settings: Settings | None = None,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    thread_id: str = "t",
    resume: bool = False,
) -> dict[str, Any]:
    """Compile a fresh graph and run (or, with ``resume``, continue) one question."""
    graph = build_question_graph(services).compile(checkpointer=checkpointer)
    config: RunnableConfig | None = (
        {"configurable": {"thread_id": thread_id}} if checkpointer is not None else None
    )
    result: dict[str, Any] = await graph.ainvoke(
        None if resume else {"question": question},
        config,
        context=settings or Settings(),
    )
    return result


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON output (last stdout line) of a child run that must exit 0."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
