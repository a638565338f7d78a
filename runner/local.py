"""Question threads run here: the question graph on the run directory's checkpointer."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from aidanbench.graph.question import build_question_graph
from aidanbench.nodes.caps import Budget
from aidanbench.record import files
from aidanbench.record.lines import QuestionLine
from aidanbench.record.recorder import RunLines, stored_metadata
from aidanbench.runner.admission import admission
from aidanbench.runner.callbacks import quiet_chain_ends, quiet_node_runs
from aidanbench.runner.checkpoints import (
    InlineCommitSaver,
    checkpoint_serde,
    open_checkpointer,
    stored_threads,
)
from aidanbench.runner.drive import Answers, Plan, drive, refuse_other_measurement, report
from aidanbench.runner.progress import Events
from aidanbench.runner.tasks import Task, is_finished, start_input
from aidanbench.services import OpenAIServices, ServicesFactory, default_services

DURABILITY: Durability = "sync"
"""Each step's checkpoint is committed before the next starts (why: ``open_checkpointer``)."""


def _config(task: Task) -> RunnableConfig:
    return {"configurable": {"thread_id": task.thread_id}}


class LocalQuestions:
    """The question graph compiled on the run directory's checkpointer."""

    def __init__(self, graph: CompiledStateGraph[Any, Any, Any, Any], services: ServicesFactory):
        self.graph = graph
        self.services = services

    async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
        saver = self.graph.checkpointer
        stored = (
            saver.stored_among([t.thread_id for t in tasks])
            if isinstance(saver, InlineCommitSaver) and tasks
            else None
        )
        plans = []
        for task in tasks:
            if stored is not None and task.thread_id not in stored:  # a new thread
                plans.append(Plan("run", {}, start=start_input(task, pending=False)))
                continue
            snapshot = await self.graph.aget_state(_config(task))
            values, pending = dict(snapshot.values), bool(snapshot.next)
            if is_finished(values, pending):
                plans.append(Plan("skip", values))
            else:
                plans.append(Plan("run", values, start=start_input(task, pending)))
        return plans

    def backlog(self) -> float:
        # Only OpenAIServices keeps limiters; another factory's requests queue elsewhere.
        return self.services.backlog() if isinstance(self.services, OpenAIServices) else 0.0

    def warm(self, tasks: Sequence[Task]) -> None:
        for settings in {t.settings.model_dump_json(): t.settings for t in tasks}.values():
            self.services(settings).warm()

    async def execute(self, task: Task, step: Plan, progress: Answers) -> dict[str, Any]:
        """The thread brought to a stop; its values as its last step left them (what
        reading its state back gives, without the read: it replays every answer's write)."""
        values: dict[str, Any] | None = None
        async for mode, event in self.graph.astream(
            step.start,
            _config(task),
            context=task.settings,
            stream_mode=["custom", "values"],
            durability=DURABILITY,
        ):
            if mode == "values":
                values = cast(dict[str, Any], event)
            else:
                report(progress, task, event)
        if values is None:  # no step ran
            return dict((await self.graph.aget_state(_config(task))).values)
        return dict(values)


@asynccontextmanager
async def local_questions(
    run_dir: Path, services: ServicesFactory = default_services, budget: Budget | None = None
) -> AsyncIterator[LocalQuestions]:
    """The local backend on ``run_dir``'s checkpoints (``budget`` stops the questions),
    closed when the block ends."""
    quiet_chain_ends()
    quiet_node_runs()
    async with open_checkpointer(run_dir / files.CHECKPOINTS) as saver:
        graph = build_question_graph(services, budget=budget).compile(checkpointer=saver)
        yield LocalQuestions(graph, services)


def lines_from_checkpoints(run_dir: Path) -> list[QuestionLine]:
    """Every thread of ``run_dir``'s checkpoints as its line, read only, to rebuild line
    files (``record.recorder.stored_lines``); a thread killed before its first step has
    none."""
    path = run_dir / files.CHECKPOINTS
    if not path.exists():
        return []
    stored = stored_metadata(run_dir)
    reward_mode = stored.reward_mode if stored is not None else "count"
    with contextlib.closing(sqlite3.connect(files.read_only_uri(path), uri=True)) as conn:
        saver = SqliteSaver(conn, serde=checkpoint_serde())
        saver.is_setup = True  # read only: the tables are there
        graph = build_question_graph(default_services).compile(checkpointer=saver)
        lines = []
        for thread in stored_threads(path):
            values = graph.get_state({"configurable": {"thread_id": thread}}).values
            measured, question = values.get("measured"), values.get("question")
            if not measured or not isinstance(question, str):
                continue
            repeat = int(thread.rsplit("|", 3)[2].removeprefix("r="))
            lines.append(
                QuestionLine.from_output(
                    values,
                    measured=measured,
                    question=question,
                    repeat=repeat,
                    thread_id=thread,
                    reward_mode=reward_mode,
                )
            )
    return lines


async def check_recorded_measurements(tasks: Sequence[Task], checkpoints: Path) -> None:
    """Compare each task with its thread's record, read only: for a run directory with
    checkpoints but no recorded scoring settings."""
    async with aiosqlite.connect(files.read_only_uri(checkpoints), uri=True) as conn:
        saver = AsyncSqliteSaver(conn, serde=checkpoint_serde())
        graph = build_question_graph(default_services).compile(checkpointer=saver)
        for task in tasks:
            refuse_other_measurement(task, dict((await graph.aget_state(_config(task))).values))


async def drive_local(
    tasks: Sequence[Task],
    run_dir: Path,
    *,
    concurrency: int | None = None,
    progress: Events,
    services: ServicesFactory = default_services,
) -> list[QuestionLine]:
    """The drive loop without the session around it (no lock, no metadata), for callers
    that keep their own run directory (the demo, benchmarks); ``concurrency`` as a
    session's (``runner.admission``)."""
    gate = admission(concurrency, len(tasks))
    async with local_questions(run_dir, services) as questions:
        return await drive(tasks, questions, RunLines(run_dir), admission=gate, progress=progress)
