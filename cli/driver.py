"""Driving many question threads through the per-question graph, resumably.

Every (model, temperature, question, repeat) is one checkpointed thread with a
deterministic id, so running the same command again finds each thread where it was:
finished ones are skipped, interrupted ones continue from their last completed step
(``None`` input), and ones that stopped on an error are invoked again, which retries only
the failed part. The loop itself is the graph's; this module only schedules threads,
reports progress and writes the run directory's files.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Durability

from aidanbench.analysis import rundir
from aidanbench.cli.checkpoints import open_checkpointer
from aidanbench.cli.errors import UsageError, printable
from aidanbench.cli.progress import Progress
from aidanbench.graph.metric_names import environment_aliases
from aidanbench.graph.question import build_question_graph
from aidanbench.graph.settings import Settings
from aidanbench.nodes.caps import budget_exhausted
from aidanbench.nodes.prepare import ERROR_KINDS, measured_by, measurement_differences
from aidanbench.services import ServicesFactory, default_services

DURABILITY: Durability = "sync"
"""Each step's checkpoint is committed before the next step starts, so a killed run
redoes at most the step in flight (``async`` lets the next step start first; ``exit``
writes nothing until the thread stops)."""


@dataclass(frozen=True)
class Task:
    """One question thread of a run."""

    settings: Settings
    question: str
    repeat: int

    @property
    def label(self) -> str:
        """``model (temperature)``, the progress row of the task."""
        return f"{self.settings.model} (T={self.settings.temperature:g})"

    @property
    def thread_id(self) -> str:
        """Stable across runs: model, temperature, repeat and a hash of the question."""
        digest = hashlib.sha256(self.question.encode("utf-8")).hexdigest()[:16]
        s = self.settings
        return f"{s.model}|t={s.temperature!r}|r={self.repeat}|q={digest}"

    def line(self, output: dict[str, Any]) -> dict[str, Any]:
        """The task's ``questions.jsonl`` line (with its answers) from a graph output.

        Thresholds and embedding model are the ones the thread recorded when it started
        (its ``measured``), so a line never labels old scores with this run's settings.
        """
        s = self.settings
        measured = output.get("measured") or measured_by(s)
        keep = (
            "answers",
            "stop_reason",
            "error",
            "score",
            "novelty_sum",
            "mean_coherence",
            "mean_novelty",
            "mean_llm_novelty",
            "format_adherence",
            "speculative",
        )
        return {
            "model": s.model,
            "temperature": s.temperature,
            "question": self.question,
            "repeat": self.repeat,
            "thread_id": self.thread_id,
            "embedding_model": measured["embedding_model"],
            "thresholds": {
                "coherence": measured["coherence_threshold"],
                "novelty": measured["novelty_threshold"],
                "llm_novelty": measured["llm_novelty_threshold"],
            },
            "measured": measured,
            **{k: output.get(k) for k in keep},
            **environment_aliases(output, s.reward_mode),
            "answers": output.get("answers") or [],
        }


FINAL_REASONS = frozenset({"coherence", "novelty", "llm_novelty", "max_answers"})


def is_finished(values: Mapping[str, Any], pending: bool) -> bool:
    """Stopped by the benchmark's rule with nothing left to run: skipped on a rerun."""
    return not pending and values.get("stop_reason") in FINAL_REASONS


def start_input(task: Task, pending: bool) -> dict[str, Any] | None:
    """What to invoke a thread with that is not finished.

    ``None`` continues a thread stopped mid-step from its last checkpoint; the question
    starts a new thread or re-invokes one that stopped on an error, where ``prepare``
    clears the error so only the failed part runs again.
    """
    return None if pending else {"question": task.question}


def report(progress: Progress, task: Task, event: Any) -> None:
    """Feed one custom-stream event of a question to the progress display."""
    if isinstance(event, dict) and event.get("event") == "answer":
        progress.answer(task.label, event)


WRITE_EVERY_S = 5.0
"""Least seconds between two rewrites of the output files while questions finish."""


class RunLines:
    """The question lines of a run, rewritten to the run directory as questions finish.

    Lines keep the order tasks were first recorded in, so the files list questions in
    the run's order whatever order they finish in. Each rewrite serialises every line,
    so while a run goes on the files are rewritten at most every ``every`` seconds (the
    first finished question at once), and the driver writes them once more at the end:
    rewriting on every finish took about a tenth of a 63-question run's CPU (profiled).
    The checkpoints, not these files, are what a resumed run starts from.
    """

    def __init__(
        self,
        run_dir: Path,
        every: float = WRITE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_dir = run_dir
        self.every = every
        self.clock = clock
        self.lines: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self._written: float | None = None

    def record(self, task: Task, values: Mapping[str, Any]) -> None:
        """Note the task's current state (its line) without writing."""
        self.lines[task.thread_id] = task.line(dict(values))

    async def finished(self, task: Task, values: Mapping[str, Any]) -> None:
        """Note a finished question; rewrite the files unless they were just written."""
        self.record(task, values)
        async with self._lock:
            if self._written is None or self.clock() - self._written >= self.every:
                self.write()

    def write(self) -> None:
        """Rewrite results, answers and questions files from every line known."""
        rundir.write_outputs(self.run_dir, list(self.lines.values()))
        self._written = self.clock()

    def all(self) -> list[dict[str, Any]]:
        """Every line, in task order."""
        return list(self.lines.values())


async def drive(
    tasks: Sequence[Task],
    run_dir: Path,
    *,
    concurrency: int,
    progress: Progress,
    services: ServicesFactory = default_services,
) -> list[dict[str, Any]]:
    """Run every task to a stop (or resume it), writing outputs as questions finish.

    Returns the question lines. Cancellation (Ctrl-C) writes what is known and re-raises:
    the checkpoints already hold every completed step.
    """
    lines = RunLines(run_dir)
    async with open_checkpointer(run_dir / rundir.CHECKPOINTS) as saver:
        graph = build_question_graph(services).compile(checkpointer=saver)
        pending: list[tuple[Task, Any]] = []
        for task in tasks:
            config: RunnableConfig = {"configurable": {"thread_id": task.thread_id}}
            snapshot = await graph.aget_state(config)
            values = dict(snapshot.values)
            refuse_other_measurement(task, values)
            lines.record(task, values)
            progress.queued(task.label)
            if is_finished(values, bool(snapshot.next)):
                progress.skipped(task.label, values)
            else:
                pending.append((task, start_input(task, bool(snapshot.next))))
        for settings in {t.settings.model_dump_json(): t.settings for t, _ in pending}.values():
            services(settings).warm()

        gate = asyncio.Semaphore(concurrency)

        async def run_one(task: Task, start: Any) -> None:
            async with gate:
                if budget_exhausted(task.settings):  # --max-cost: start nothing new
                    return
                config: RunnableConfig = {"configurable": {"thread_id": task.thread_id}}
                progress.started_question(task.label)
                async for event in graph.astream(
                    start,
                    config,
                    context=task.settings,
                    stream_mode="custom",
                    durability=DURABILITY,
                ):
                    report(progress, task, event)
                values = dict((await graph.aget_state(config)).values)
                progress.finished_question(task.label, task.question, values)
                await lines.finished(task, values)

        try:
            await run_all([run_one(task, start) for task, start in pending])
        finally:
            # Steps of cancelled questions may still be queued for this turn's commit
            # (the saver commits once per loop turn): let it run before the saver closes.
            await asyncio.sleep(0)
            lines.write()
    return lines.all()


async def run_all(jobs: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Await every job; on the first failure or a cancellation, stop the others first.

    ``asyncio.gather`` leaves the other jobs running when one raises, and returns at once
    when cancelled while they are still unwinding: the caller then closes the checkpointer
    under them, and each prints a "closed database" traceback. Here every job has ended
    before this returns or raises, and the first failure is re-raised as it was.
    """
    tasks = [asyncio.ensure_future(job) for job in jobs]
    if not tasks:
        return
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:
        await _stop(tasks)
        raise
    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
    if failed:
        await _stop(tasks)
        exc = failed[0].exception()
        assert exc is not None
        raise exc


async def _stop(tasks: Sequence[asyncio.Future[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: only the first failure is reported


def refuse_other_measurement(task: Task, values: Mapping[str, Any]) -> None:
    """A ``UsageError`` when the task's settings disagree with what its thread recorded."""
    differences = measurement_differences(values.get("measured"), task.settings)
    if differences:
        raise UsageError(
            f"{printable(task.label)} on {printable(task.question[:40])!r} was measured "
            f"with other settings (differs in: {', '.join(differences)}); use another "
            "--run-dir, or rerun with the settings it was started with"
        )


async def check_recorded_measurements(tasks: Sequence[Task], checkpoints: Path) -> None:
    """Compare each task with its thread's record, reading the checkpoints only.

    Used when a run directory has checkpoints but no ``metadata.json``: the threads'
    own records then decide, before anything is written.
    """
    async with aiosqlite.connect(rundir.read_only_uri(checkpoints), uri=True) as conn:
        graph = build_question_graph(default_services).compile(checkpointer=AsyncSqliteSaver(conn))
        for task in tasks:
            config: RunnableConfig = {"configurable": {"thread_id": task.thread_id}}
            refuse_other_measurement(task, (await graph.aget_state(config)).values)


def errored(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Question lines that stopped on an error (a rerun retries them)."""
    return [line for line in lines if line.get("stop_reason") in ERROR_KINDS]
