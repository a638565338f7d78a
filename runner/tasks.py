"""The unit of a run: one question thread, its line, and what counts as done.

Every (model, temperature, question, repeat) is one thread with a deterministic id, so the
same run again finds each where it was: finished ones are skipped, interrupted ones continue,
and ones stopped on an error are invoked again, which retries only the failed part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from aidanbench.core.calls import add_dollars
from aidanbench.core.settings import Settings
from aidanbench.core.vocabulary import is_final
from aidanbench.nodes.prepare import measured_by
from aidanbench.record.lines import QuestionLine, thread_id


@dataclass(frozen=True)
class Task:
    """One question thread of a run."""

    settings: Settings
    question: str
    repeat: int

    @cached_property
    def label(self) -> str:
        """``model (temperature)``, the progress row of the task (made once: every answer's
        report names it)."""
        return f"{self.settings.model} (T={self.settings.temperature:g})"

    @property
    def cell(self) -> tuple[str, float, str]:
        """(model, temperature, question): the task's place in the run's grid."""
        return self.settings.model, self.settings.temperature, self.question

    @cached_property
    def thread_id(self) -> str:
        """Stable across runs: model, temperature, repeat and a hash of the question (hashed
        once: every answer's report names it)."""
        return thread_id(self.settings.model, self.settings.temperature, self.repeat, self.question)

    def line(self, output: Mapping[str, Any]) -> QuestionLine:
        """The task's question line from its thread's values, with the thresholds and
        embedding model the thread recorded (``measured``), never this run's settings."""
        return QuestionLine.from_output(
            output,
            measured=output.get("measured") or measured_by(self.settings),
            question=self.question,
            repeat=self.repeat,
            thread_id=self.thread_id,
            reward_mode=self.settings.reward_mode,
        )


def is_finished(values: Mapping[str, Any], pending: bool) -> bool:
    """Stopped by the benchmark's rule with nothing left to run: skipped on a rerun."""
    return not pending and is_final(values.get("stop_reason"))


def start_input(task: Task, pending: bool) -> dict[str, Any] | None:
    """``None`` continues a thread stopped mid-step; the question starts a new thread or
    re-invokes one stopped on an error, where ``prepare`` clears the error so only the
    failed part runs again."""
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
