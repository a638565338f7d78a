"""The unit of a run: one question thread, its on-disk line, and what counts as done.

Every (model, temperature, question, repeat) is one checkpointed thread with a
deterministic id, so running the same run again finds each thread where it was: finished
ones are skipped, interrupted ones continue from their last completed step (``None``
input), and ones that stopped on an error are invoked again, which retries only the
failed part.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aidanbench.core.calls import add_dollars
from aidanbench.core.settings import Settings
from aidanbench.core.vocabulary import FINAL_STOPS
from aidanbench.nodes.prepare import measured_by
from aidanbench.record.lines import LineTexts, QuestionLine, write_lines


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
    def cell(self) -> tuple[str, float, str]:
        """(model, temperature, question): the task's place in the run's grid."""
        return self.settings.model, self.settings.temperature, self.question

    @property
    def thread_id(self) -> str:
        """Stable across runs: model, temperature, repeat and a hash of the question."""
        return thread_id(self.settings.model, self.settings.temperature, self.repeat, self.question)

    def line(self, output: Mapping[str, Any]) -> QuestionLine:
        """The task's question line (with its answers) from its thread's values.

        Thresholds and embedding model are the ones the thread recorded when it started
        (its ``measured``), so a line never labels old scores with this run's settings.
        """
        return QuestionLine.from_output(
            output,
            measured=output.get("measured") or measured_by(self.settings),
            question=self.question,
            repeat=self.repeat,
            thread_id=self.thread_id,
            reward_mode=self.settings.reward_mode,
        )


def thread_id(model: str, temperature: float, repeat: int, question: str) -> str:
    """A question thread's id: model, temperature, repeat and a hash of the question."""
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
    return f"{model}|t={temperature!r}|r={repeat}|q={digest}"


def model_of_thread(thread: str) -> str | None:
    """The model of a thread id made by ``thread_id`` (None for any other id)."""
    parts = thread.rsplit("|", 3)
    if len(parts) == 4 and [p[:2] for p in parts[1:]] == ["t=", "r=", "q="]:
        return parts[0]
    return None


def is_finished(values: Mapping[str, Any], pending: bool) -> bool:
    """Stopped by the benchmark's rule with nothing left to run: skipped on a rerun."""
    return not pending and values.get("stop_reason") in FINAL_STOPS


def start_input(task: Task, pending: bool) -> dict[str, Any] | None:
    """What to invoke a thread with that is not finished.

    ``None`` continues a thread stopped mid-step from its last checkpoint; the question
    starts a new thread or re-invokes one that stopped on an error, where ``prepare``
    clears the error so only the failed part runs again.
    """
    return None if pending else {"question": task.question}


@dataclass(frozen=True)
class LineCounts:
    """Figures of answers shown in a live table row before their question's line is stored."""

    answers: int = 0
    score: int = 0
    calls: int = 0
    tokens: int | None = 0
    """None once a request reported no usage (unknown)."""
    dollars: float | None = 0.0
    """Dollars of the recorded answers and discarded look-aheads (None: unknown)."""
    usage_missing: int = 0

    def plus(self, other: LineCounts) -> LineCounts:
        """Both counted; a figure unknown in either is unknown."""
        tokens = None if self.tokens is None or other.tokens is None else self.tokens + other.tokens
        return LineCounts(
            answers=self.answers + other.answers,
            score=self.score + other.score,
            calls=self.calls + other.calls,
            tokens=tokens,
            dollars=add_dollars(self.dollars, other.dollars),
            usage_missing=self.usage_missing + other.usage_missing,
        )


WRITE_EVERY_S = 5.0
"""Least seconds between two rewrites of the output files while questions finish."""

WRITE_SHARE = 0.05
"""Most of the run's time rewriting the files may take: a rewrite that took ``d`` seconds
waits ``d / WRITE_SHARE`` seconds for the next, when that is longer than
``WRITE_EVERY_S`` (a campaign's files grow to tens of megabytes)."""


class RunLines:
    """The question lines of a run, rewritten to the run directory as questions finish.

    Lines keep the order they were first recorded in (lines carried from earlier sessions
    first), so the files list questions in the run's order whatever order they finish in.
    Each rewrite writes every line (each line's text made once, ``LineTexts``), so while
    a run goes on the files are rewritten at most every ``every`` seconds, or more
    seldom when rewriting them takes longer than ``WRITE_SHARE`` of the time (the first
    finished question at once), and the driver writes them once more at the end: the
    files are for reading, and rewriting them on every finish would spend the CPU a long
    run needs (``bench.lab --variants write-always`` measures it). The checkpoints, not
    these files, are what a resumed run starts from.
    """

    def __init__(
        self,
        run_dir: Path | None,
        every: float = WRITE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        carried: Sequence[QuestionLine] = (),
    ) -> None:
        self.run_dir = run_dir
        self.every = every
        self.clock = clock
        self.lines: dict[str, QuestionLine] = {line_thread(line): line for line in carried}
        self._lock = asyncio.Lock()
        self._written: float | None = None
        self._took = 0.0
        """Seconds the last write took."""
        self._texts = LineTexts()
        self._changed = True
        """Whether a line was noted since the files were last written."""

    def record(self, task: Task, values: Mapping[str, Any]) -> QuestionLine:
        """Note the task's current state (its line) without writing; returns the line."""
        line = task.line(values)
        self.keep(line)
        return line

    def stopped_before(self, task: Task) -> bool:
        """Whether the files of earlier sessions show the task's question stopped for good
        (the drive loop looks it up last; its thread, not this line, decides)."""
        line = self.lines.get(task.thread_id)
        return line is not None and line.stop_reason in FINAL_STOPS

    async def finished(self, task: Task, values: Mapping[str, Any]) -> QuestionLine:
        """Note a finished question; rewrite the files unless they were just written."""
        line = self.record(task, values)
        await self.rewrite()
        return line

    def keep(self, line: QuestionLine) -> None:
        """Note a line (one made here, or by a worker process) without writing."""
        self.lines[line_thread(line)] = line
        self._changed = True

    async def rewrite(self) -> None:
        """Rewrite the files unless they were written less than ``every`` seconds ago."""
        async with self._lock:
            wait = max(self.every, self._took / WRITE_SHARE)
            if self._written is None or self.clock() - self._written >= wait:
                self.write()

    def write(self) -> None:
        """Rewrite results, answers and questions files from every line to show (with no
        run directory, as in a worker process whose parent writes them: nothing). Files
        already holding every line noted are not written again."""
        started = self.clock()
        if self.run_dir is not None and self._changed:
            write_lines(self.run_dir, self.all(), self._texts)
        self._changed = False
        self._written = self.clock()
        self._took = self._written - started

    def all(self) -> list[QuestionLine]:
        """Every line to show (``with_results``), in the run's order."""
        return with_results(self.lines.values())


def with_results(lines: Iterable[QuestionLine]) -> list[QuestionLine]:
    """The lines of every (model, temperature) that has produced something: an answer or
    a stop on at least one of its lines.

    A row whose threads have all produced nothing (none started yet, or each stopped
    before its first answer by an interruption or a refused endpoint) leaves no line, so
    a mistyped model ranks nowhere; once a row has produced something, its lines not yet
    started are shown too (``unfinished``).
    """
    lines = list(lines)
    rows = {(line.model, line.temperature) for line in lines if line.produced}
    return [line for line in lines if (line.model, line.temperature) in rows]


def line_thread(line: QuestionLine) -> str:
    """A line's thread id (lines written before they recorded it: the id its key makes)."""
    return line.thread_id or thread_id(line.model, line.temperature, line.repeat, line.question)
