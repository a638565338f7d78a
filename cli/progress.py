"""Live progress of a run: a rich table on a terminal, plain log lines otherwise.

The live table is built when rich draws it (four times a second), not when an answer
arrives: its elapsed time keeps moving while every question waits on a slow model, and
a run with thousands of answers does not build a table per answer.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from aidanbench.analysis.tables import Column, fitted_tables

if TYPE_CHECKING:
    from aidanbench.services.limits import EndpointStats


@dataclass
class ModelProgress:
    """Counters of one (model, temperature)."""

    queued: int = 0
    running: int = 0
    done: int = 0
    errored: int = 0
    answers: int = 0
    score: int = 0
    calls: int = 0
    tokens: int = 0


@dataclass
class Progress:
    """Counts answer events and question transitions; renders them live or as lines."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    live: bool | None = None
    rows: dict[str, ModelProgress] = field(default_factory=lambda: defaultdict(ModelProgress))
    started: float = field(default_factory=time.monotonic)
    endpoints: Callable[[], Mapping[str, EndpointStats]] | None = None
    """Each endpoint's limit and 429s now (``OpenAIServices.endpoint_stats``), shown
    under the table."""
    _live: Live | None = None

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.out.isatty()

    def __enter__(self) -> Progress:
        if self.live:
            self._live = Live(self, console=Console(file=self.out), refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)  # draws the final state once more
            self._live = None

    def __rich__(self) -> Group:
        """The table as of now (rich calls this from its refresh thread)."""
        return self._table()

    def queued(self, label: str, count: int = 1) -> None:
        self.rows[label].queued += count

    def started_question(self, label: str) -> None:
        row = self.rows[label]
        row.queued -= 1
        row.running += 1

    def finished_question(self, label: str, question: str, output: dict[str, Any]) -> None:
        row = self.rows[label]
        row.running -= 1
        stop = output.get("stop_reason")
        if stop in ("error", "judge_error"):
            row.errored += 1
        else:
            row.done += 1
        self._line(f"{label}: {stop} after {output.get('score', 0)} valid — {question[:60]}")

    def skipped(self, label: str, output: dict[str, Any]) -> None:
        """A question finished in an earlier run: counted, not run again."""
        row = self.rows[label]
        row.queued -= 1
        row.done += 1
        row.score += int(output.get("score") or 0)
        row.answers += len(output.get("answers") or [])

    def answer(self, label: str, event: dict[str, Any]) -> None:
        row = self.rows[label]
        row.answers += 1
        row.score += 1 if event.get("valid") else 0
        row.calls += int(event.get("calls", 0))
        row.tokens += int(event.get("tokens", 0))

    def _line(self, text: str) -> None:
        if not self.live:
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:7.1f}s] {text}", file=self.out, flush=True)

    def _table(self, width: int | None = None) -> Group:
        """The counters as of now; split into stacked tables, each naming the model, when
        ``width`` (the terminal's, by default) is too narrow for them side by side."""
        elapsed = time.monotonic() - self.started
        rows = list(self.rows.items())  # one atomic copy: events may add rows
        counters = [
            (r.done, r.running, r.queued, r.errored, r.answers, r.score, r.calls, r.tokens)
            for _, r in rows
        ]
        columns = [
            Column(header, [str(values[i]) for values in counters])
            for i, header in enumerate(
                ("done", "running", "queued", "errors", "answers", "score", "API calls", "tokens")
            )
        ]
        key = Column("model (temperature)", [label for label, _ in rows], "left")
        if width is None and self._live is not None:
            width = self._live.console.width
        title = f"AidanBench run — {elapsed:.0f}s elapsed"
        return Group(*fitted_tables(key, columns, width, title=title), *self._endpoint_lines())

    def _endpoint_lines(self) -> list[Text]:
        if self.endpoints is None:
            return []
        from aidanbench.services.limits import describe

        return [Text(describe(self.endpoints()))]
