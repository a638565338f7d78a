"""Live progress of a run: a rich table on a terminal, plain log lines otherwise.

The live table is built when rich draws it, not when an answer arrives: its elapsed time
keeps moving while every question waits on a slow model, and thousands of answers do not
build a table each.

A row's figures are ``record.results.totals`` of the stored lines (as the summary's), with
running questions' answer events on top until their line replaces them, so the table ends
equal to the summary whatever was resumed, retried or discarded as a look-ahead. Every outside
string (model names, questions) is printed through ``printable``.

Long waits (a ``Retry-After``, a back-off, the ``--requests-per-minute`` window:
``services.waits``) are shown under the table per endpoint; in the log a watcher thread
prints a line when new waits start, again while they last, and once per endpoint for a
``Retry-After`` above the cap. So is a model that stops answering (``limits.Stalled``: its
requests in flight far longer than it usually takes), named with its host: a panel's judges
may share one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from aidanbench.analysis.cost import dollars_text, tokens_text
from aidanbench.analysis.tables import Column, fitted_tables
from aidanbench.core.errors import printable
from aidanbench.core.vocabulary import is_error_stop
from aidanbench.record.lines import QuestionLine
from aidanbench.record.results import QuestionResult, question_result, totals
from aidanbench.runner.tasks import LineCounts

if TYPE_CHECKING:
    from aidanbench.services.limits import EndpointStats

WATCH_EVERY_S = 0.5
"""How often the log looks at the endpoints' waits."""

NEW_WAITS_EVERY_S = 4.0
"""At most one log line per endpoint this often for waits that start: a 429 storm is one
line every few seconds, and a wait is still logged within ``NEW_WAITS_EVERY_S +
WATCH_EVERY_S`` of its start."""

STILL_WAITING_EVERY_S = 30.0
"""While an endpoint's requests wait, the log says so again this often."""


class Events(Protocol):
    """What the drive loop reports: to the live table (``Progress``) or a worker's parent
    (``runner.workers``). ``key`` is the question's thread id."""

    def queued(self, label: str, count: int = 1) -> None: ...

    def started_question(self, label: str, key: str | None = None) -> None: ...

    def finished_question(
        self, label: str, question: str, line: QuestionLine, key: str | None = None
    ) -> None: ...

    def skipped(
        self, label: str, line: QuestionLine, key: str | None = None, keep: bool = True
    ) -> None: ...

    def stored(self, label: str, line: QuestionLine, key: str | None = None) -> None: ...

    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None: ...

    def elsewhere(self, count: int) -> None: ...

    def store(self, outage: str | None) -> None: ...


@dataclass
class ModelProgress:
    """Counters of one (model, temperature), and the question lines behind its figures."""

    queued: int = 0
    running: int = 0
    done: int = 0
    errored: int = 0
    lines: dict[str, QuestionResult] = field(default_factory=dict)
    """The stored line of each question counted (finished, or as an earlier session left it)."""
    flight: dict[str, LineCounts] = field(default_factory=dict)
    """Answer events of each running question, until its line replaces them."""

    def figures(self) -> LineCounts:
        """``record.results.totals`` of the lines, plus the answers still in flight."""
        counted = totals(list(self.lines.values()))
        total = LineCounts(
            answers=counted.answers,
            score=counted.score,
            calls=counted.api_calls or 0,
            tokens=counted.tokens,
            dollars=counted.dollars,
            usage_missing=counted.usage_missing,
        )
        for counts in list(self.flight.values()):
            total = total.plus(counts)
        return total


@dataclass
class Progress:
    """Counts answer events and question transitions; renders them live or as lines."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    live: bool | None = None
    rows: dict[str, ModelProgress] = field(default_factory=lambda: defaultdict(ModelProgress))
    started: float = field(default_factory=time.monotonic)
    endpoints: Callable[[], Mapping[str, EndpointStats]] | None = None
    """Each endpoint's limit and 429s now (``OpenAIServices.endpoint_stats``)."""
    waiting_elsewhere: int = 0
    """Questions claimed by live workers elsewhere (``runner.claims``)."""
    store_outage: str | None = None
    """What the run waits for while the shared store does not answer (None: it answers)."""
    replay: bool = False
    """The run is the demo's replay (``record.metadata.is_replay``): nothing is spent, so the
    dollars column says they are list prices."""
    _live: Live | None = None
    _watcher: threading.Thread | None = None
    _stop_watching: threading.Event = field(default_factory=threading.Event)
    _waits_told: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Per endpoint, the waits counted at its last wait line, and when that was."""
    _capped_told: set[str] = field(default_factory=set)
    _stalled_told: dict[tuple[str, str | None], float] = field(default_factory=dict)
    """Per endpoint and model stalled there, when its last line was written."""
    _writing: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.out.isatty()

    def __enter__(self) -> Progress:
        if self.live:
            console = Console(file=self.out, markup=False)
            self._live = Live(self, console=console, refresh_per_second=4)
            self._live.__enter__()
        else:
            self._stop_watching.clear()
            self._watcher = threading.Thread(
                target=self._watch_waits, name="aidanbench-waits", daemon=True
            )
            self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watcher is not None:
            self._stop_watching.set()
            self._watcher.join()
            self._watcher = None
        if self._live is not None:
            self._live.__exit__(None, None, None)  # draws the final state once more
            self._live = None
        elif self.rows and exc[0] is None:
            console = Console(file=self.out, markup=False)
            console.print(self._table(console.width))  # the log ends with the final counts

    def __rich__(self) -> Group:
        """The table as of now (rich calls this from its refresh thread)."""
        return self._table()

    def queued(self, label: str, count: int = 1) -> None:
        self.rows[label].queued += count

    def started_question(self, label: str, key: str | None = None) -> None:
        row = self.rows[label]
        row.queued -= 1
        row.running += 1

    def finished_question(
        self, label: str, question: str, line: QuestionLine, key: str | None = None
    ) -> None:
        """A question stopped; ``line`` is its stored line."""
        row = self.rows[label]
        row.running -= 1
        if is_error_stop(line.stop_reason):
            row.errored += 1
        else:
            row.done += 1
        key = key if key is not None else label
        row.flight.pop(key, None)
        row.lines[key] = question_result(line)
        self._line(
            f"{printable(label)}: {printable(str(line.stop_reason))} after {line.score or 0} "
            f"valid — {printable(question[:60])}"
        )

    def requeued(self, label: str, key: str) -> None:
        """A running question goes back to the queue (its worker died; another continues it
        from its checkpoint): its events are dropped."""
        row = self.rows[label]
        row.running -= 1
        row.queued += 1
        row.flight.pop(key, None)

    def skipped(
        self, label: str, line: QuestionLine, key: str | None = None, keep: bool = True
    ) -> None:
        """A question finished earlier (or on another machine: ``keep`` false), counted from
        its line."""
        row = self.rows[label]
        row.queued -= 1
        row.done += 1
        row.lines[key if key is not None else f"{label}#{len(row.lines)}"] = question_result(line)

    def stored(self, label: str, line: QuestionLine, key: str | None = None) -> None:
        """A question about to run again: what its earlier sessions stored is counted now."""
        self.rows[label].lines[key if key is not None else label] = question_result(line)

    def elsewhere(self, count: int) -> None:
        """``count`` questions are claimed by other workers; logged when it changes."""
        if count != self.waiting_elsewhere:
            self.waiting_elsewhere = count
            self._line(f"{count} question(s) running on other workers; waiting for them")

    def store(self, outage: str | None) -> None:
        """The shared store stopped answering (``outage``) or answers again (None)."""
        if outage is None and self.store_outage is not None:
            self.note("the store answers again; the questions go on")
        elif outage is not None:
            self.note(outage)
        self.store_outage = outage

    def answer(self, label: str, event: dict[str, Any], key: str | None = None) -> None:
        """An answer event of a running question: shown until the question's line replaces it."""
        tokens = event.get("tokens", 0)
        counts = LineCounts(
            answers=1,
            score=1 if event.get("valid") else 0,
            calls=int(event.get("calls", 0)),
            tokens=None if tokens is None else int(tokens),
            dollars=event.get("cost_usd"),
            usage_missing=int(event.get("usage_missing", 0)),
        )
        flight = self.rows[label].flight
        key = key if key is not None else label
        flight[key] = flight.get(key, LineCounts()).plus(counts)

    def note(self, text: str) -> None:
        """A line about the run (not a question): above the live table, or in the log."""
        if self._live is not None:
            self._live.console.print(Text(printable(text)))
        else:
            self._line(printable(text))

    def _line(self, text: str) -> None:
        if not self.live:
            elapsed = time.monotonic() - self.started
            with self._writing:  # the watcher thread writes lines too
                self.out.write(f"[{elapsed:7.1f}s] {text}\n")
                self.out.flush()

    def _watch_waits(self) -> None:
        while not self._stop_watching.wait(WATCH_EVERY_S):
            self.log_waits()

    def log_waits(self) -> None:
        """Log lines for the endpoints' long waits (see the module docstring)."""
        if self.endpoints is None:
            return
        from aidanbench.services.limits import capped_text, stalled_text, waiting_text

        now = time.monotonic()
        stalled_now = set()
        for host, stats in self.endpoints().items():
            for stalled in stats.stalled:
                key = (host, stalled.model)
                stalled_now.add(key)
                if now - self._stalled_told.get(key, -float("inf")) >= STILL_WAITING_EVERY_S:
                    self._stalled_told[key] = now
                    self._line(printable(stalled_text(host, stalled)))
            if stats.retry_after_capped is not None and host not in self._capped_told:
                self._capped_told.add(host)
                self._line(printable(f"{host}: {capped_text(*stats.retry_after_capped)}"))
            if stats.waiting is None:
                continue
            counted, at = self._waits_told.get(host, (0, -float("inf")))
            started = stats.long_waits > counted and now - at >= NEW_WAITS_EVERY_S
            if started or now - at >= STILL_WAITING_EVERY_S:
                self._waits_told[host] = (stats.long_waits, now)
                self._line(printable(waiting_text(host, stats.waiting)))
        for key in set(self._stalled_told) - stalled_now:  # answering again: a new stall is new
            del self._stalled_told[key]

    def _table(self, width: int | None = None) -> Group:
        """The counters as of now, stacked when ``width`` is too narrow for one table."""
        elapsed = time.monotonic() - self.started
        rows = list(self.rows.items())  # one atomic copy: events may add rows
        counters = []
        figures = [r.figures() for _, r in rows]
        for (_, r), f in zip(rows, figures, strict=True):
            counters.append(
                (
                    *(r.done, r.running, r.queued, r.errored, f.answers, f.score, f.calls),
                    *(tokens_text(f.tokens), dollars_text(f.dollars), f.usage_missing),
                )
            )
        headers = ["done", "running", "queued", "errors", "answers", "score", "chat requests"]
        headers += ["chat tokens", "at list prices" if self.replay else "spent", "no usage"]
        if not any(f.usage_missing for f in figures):
            headers.pop()  # requests whose reply reported no usage: shown when there are
        columns = [
            Column(header, [str(values[i]) for values in counters])
            for i, header in enumerate(headers)
        ]
        key = Column("model (temperature)", [printable(label) for label, _ in rows], "left")
        if width is None and self._live is not None:
            width = self._live.console.width
        title = f"AidanBench run — {elapsed:.0f}s elapsed"
        waiting = self.waiting_elsewhere
        elsewhere = [Text(f"{waiting} question(s) running on other workers")] if waiting else []
        if self.store_outage is not None:
            elsewhere.append(Text(printable(self.store_outage)))
        return Group(
            *fitted_tables(key, columns, width, title=title), *elsewhere, *self._endpoint_lines()
        )

    def _endpoint_lines(self) -> list[Text]:
        if self.endpoints is None:
            return []
        from aidanbench.services.limits import describe

        return [Text(printable(line)) for line in describe(self.endpoints()).splitlines()]
