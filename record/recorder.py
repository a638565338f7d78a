"""``Recorder``: the one writer of a run directory.

Whatever writes a run directory (``run`` and the demo through the run engine, the
engine's worker processes, ``rescore --into``, ``forget``) writes it through a recorder,
which owns every file of it but the checkpoints (LangGraph's) and the score cache:

- the lock, taken by ``open`` (or ``build``) and held until the block ends;
- ``metadata.json``: read when opened; ``start_session`` writes the run's metadata with
  the session added (so a killed session is found ``running`` and marked ``killed``), and
  ``end_session`` writes how the session ended, the totals and what was spent;
- the question and answer lines (``lines``: ``questions.jsonl``, ``answers.jsonl`` and
  the results files), which only grow: a session starts from every line the directory
  holds, so one that leaves questions out keeps their lines (``end_session`` refuses to
  write fewer questions than the directory held);
- the usage ledger and the run's budget (``ledger``, ``record.usage.UsageLedger``),
  handed to the clients that record requests and to the graph, whose ``prepare`` and
  ``decide`` nodes apply the budget; a worker process appends through a ledger of its own
  on the same file (``worker_ledger``);
- any other file of the directory (``write``: a question set of ``rescore --into``).

Every file is written whole or not at all (``record.files``). A directory that
``rescore --into`` makes is built in a folder beside it and moved into place once
complete (``build``), so a killed command leaves no half directory.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files
from aidanbench.record.lines import LineTexts, QuestionLine, normal_text, read_lines, write_lines
from aidanbench.record.metadata import (
    Metadata,
    RunTotals,
    question_set_hash,
    read_metadata,
    write_metadata,
)
from aidanbench.record.results import QuestionResult, results_of, run_totals, totals
from aidanbench.record.usage import UsageLedger, summarise_ledger

Repair = Callable[[Path], list[QuestionLine]]
"""Rebuilds a run directory's question lines from its threads (its checkpoints, or the
shared store's lines of this machine), for a directory whose line files cannot be read."""


def now() -> str:
    """The local time, as metadata records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def stored_metadata(run_dir: Path) -> Metadata | None:
    """The run directory's ``metadata.json``; a damaged one is a one-line ``UsageError``."""
    if not run_dir.is_dir():
        return None
    try:
        return read_metadata(run_dir)
    except ValueError as exc:
        raise UsageError(
            f"{printable(str(exc))}; restore it from a backup, or move it away to continue "
            "(each question thread records its own settings)"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {run_dir / files.METADATA}: {exc.strerror}") from None


def stored_lines(run_dir: Path, repair: Repair | None = None) -> list[QuestionLine]:
    """The question lines the run directory holds (with their answers), in order.

    Line files that cannot be read (damaged, or from an interrupted write) are rebuilt by
    ``repair`` from the threads, saying so; without one they are a one-line
    ``UsageError``: a session that went on without them would write fewer questions than
    the directory holds.
    """
    if not (run_dir / files.QUESTIONS).exists():
        return []
    try:
        return read_lines(run_dir)
    except ValueError as exc:
        problem = printable(str(exc))
    if repair is None:
        raise UsageError(
            f"{problem}; the run directory's question lines cannot be read, so nothing is "
            "written over them: restore the file, or run aidanbench run on the directory "
            "to rebuild them from its checkpoints"
        )
    rebuilt = repair(run_dir)
    print(
        f"{problem}; rebuilt {len(rebuilt)} question lines from the run's threads",
        file=sys.stderr,
    )
    return rebuilt


def set_aside_damaged_cache(path: Path, problem: Callable[[Path], str | None]) -> None:
    """``cache.sqlite`` only saves recomputation: a damaged one (``problem`` says what is
    wrong with it, None when sound) is moved aside and rebuilt."""
    if not path.exists() or problem(path) is None:
        return
    aside = path.with_name(f"{path.name}.damaged")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    print(
        f"{printable(str(path))} was damaged and is only a cache: moved to {aside.name}, "
        "rebuilt as the run goes",
        file=sys.stderr,
    )


WRITE_EVERY_S = 5.0
"""Least seconds between two rewrites of the output files while questions finish."""

WRITE_SHARE = 0.05
"""Most of the run's time rewriting the files may take: a rewrite that took ``d`` seconds
waits ``d / WRITE_SHARE`` seconds for the next, when that is longer than
``WRITE_EVERY_S`` (a campaign's files grow to tens of megabytes)."""


class RunLines:
    """The question lines of a run, rewritten to the run directory as questions finish.

    Lines are known by their thread and keep the order they were first recorded in
    (lines carried from earlier sessions first), so the files list questions in the run's
    order whatever order they finish in, and a line is replaced, never dropped. Each
    rewrite writes every line (each line's text made once, ``LineTexts``), so while a run
    goes on the files are rewritten at most every ``every`` seconds, or more seldom when
    rewriting them takes longer than ``WRITE_SHARE`` of the time (the first finished
    question at once), and the driver writes them once more at the end: the files are for
    reading, and rewriting them on every finish would spend the CPU a long run needs
    (``bench.lab --variants write-always`` measures it). The checkpoints, not these files,
    are what a resumed run starts from. Without a run directory (a worker process, whose
    parent writes them) nothing is written.
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
        self.lines: dict[str, QuestionLine] = {line.thread: line for line in carried}
        self._written: float | None = None
        self._took = 0.0
        """Seconds the last write took."""
        self._texts = LineTexts()
        self._changed = True
        """Whether a line was noted since the files were last written."""
        self.restored = 0
        """Lines of threads found finished that the files lacked (``keep``)."""

    def stopped_before(self, thread: str) -> bool:
        """Whether the files of earlier sessions show the thread stopped for good (the
        drive loop looks it up last; the thread, not this line, decides)."""
        line = self.lines.get(thread)
        return line is not None and line.finished

    def keep(self, line: QuestionLine, found: bool = False) -> None:
        """Note a line (one made here, or by a worker process) without writing; a line
        ``found`` (a thread found finished, its line this machine's in a shared store)
        that the files lacked is counted as ``restored``."""
        if found and line.thread not in self.lines:
            self.restored += 1
        self.lines[line.thread] = line
        self._changed = True

    def finished(self, line: QuestionLine) -> None:
        """Note a finished question's line; rewrite the files unless they were written
        less than ``every`` seconds ago."""
        self.keep(line)
        wait = max(self.every, self._took / WRITE_SHARE)
        if self._written is None or self.clock() - self._written >= wait:
            self.write()

    def write(self) -> None:
        """Rewrite results, answers and questions files from every line to show. Files
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


@dataclass(frozen=True)
class Ended:
    """What a finished session leaves: every line, and what every view reads of them."""

    lines: list[QuestionLine]
    metadata: Metadata
    results: list[QuestionResult]
    notes: list[str]
    """Lines counted once for two spellings of one question (``record.results.distinct``)."""


class Recorder:
    """The one writer of a run directory (module docstring)."""

    def __init__(
        self, run_dir: Path, metadata: Metadata | None, lines: RunLines, ledger: UsageLedger
    ) -> None:
        self.run_dir = run_dir
        self.metadata = metadata
        """The run's metadata: as stored until ``start_session``."""
        self.lines = lines
        self.ledger = ledger
        self._complete = False

    @classmethod
    @contextmanager
    def open(
        cls,
        run_dir: Path,
        *,
        max_cost: float | None = None,
        repair: Repair | None = None,
        damaged: Callable[[Path], str | None] | None = None,
    ) -> Iterator[Recorder]:
        """Hold ``run_dir``'s lock (a second writer is refused in one line), clear what
        killed writes left, and read what the directory holds: its metadata, its lines
        (rebuilt by ``repair`` when they cannot be read, ``stored_lines``) and its usage
        ledger, with the run's budget ``max_cost``. ``damaged`` checks the score cache,
        which is moved aside when it says what is wrong (``set_aside_damaged_cache``)."""
        with files.run_lock(run_dir):
            files.remove_leftovers(run_dir)
            if damaged is not None:
                set_aside_damaged_cache(run_dir / files.CACHE, damaged)
            metadata = stored_metadata(run_dir)
            lines = RunLines(run_dir, carried=stored_lines(run_dir, repair))
            ledger = UsageLedger(run_dir / files.LEDGER, max_cost)
            try:
                yield cls(run_dir, metadata, lines, ledger)
            finally:
                ledger.close()

    @classmethod
    @contextmanager
    def build(cls, run_dir: Path, aside: Path) -> Iterator[Recorder]:
        """A recorder of the new run directory ``run_dir``, written in the folder
        ``aside`` beside it and moved to ``run_dir`` once ``complete`` is called and the
        block ends without an error (a ``UsageError`` when ``run_dir`` is taken by then).

        A kill, an error or a block that does not complete leaves no ``run_dir``; what
        ``aside`` holds then is kept for the next build (its score cache and usage ledger,
        judgments already paid for), but for the files of the directory itself, which a
        build writes again."""
        aside.mkdir(parents=True, exist_ok=True)
        for path in aside.iterdir():
            if path.is_file() and not path.name.startswith((files.CACHE, files.LEDGER)):
                path.unlink()
        with cls.open(aside) as recorder:
            yield recorder
        if not recorder._complete:
            return
        (aside / files.LOCK).unlink(missing_ok=True)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UsageError(f"{printable(str(run_dir))} exists already; name a new one")
        os.replace(aside, run_dir)

    def complete(self) -> None:
        """Say a directory being built (``build``) is whole: it is moved into place."""
        self._complete = True

    def write(self, name: str, text: str) -> Path:
        """Write another file of the run directory, whole; its path."""
        path = self.run_dir / name
        files.atomic_write(path, text)
        return path

    def start_session(self, metadata: Metadata, asked: Iterable[str]) -> None:
        """Make ``metadata`` the run's (the stored one with this session added) and write
        it, with the question set of the lines held and the questions ``asked``, before
        any question runs."""
        question_counts(metadata, [*(line.question for line in self.lines.all()), *asked])
        self.metadata = metadata
        write_metadata(self.run_dir, metadata)

    def save(self, metadata: Metadata) -> None:
        """Write ``metadata`` as the run's (``forget``, ``rescore --into``)."""
        self.metadata = metadata
        write_metadata(self.run_dir, metadata)

    def replace_lines(self, lines: Sequence[QuestionLine]) -> None:
        """Write exactly ``lines`` (``forget`` takes some out; nothing else may)."""
        self.lines = RunLines(self.run_dir, carried=lines)
        self.lines.write()

    def end_session(self, status: str, *, refusal: str | None = None) -> None:
        """Record that the session ended otherwise than finished: ``status``
        (``interrupted``, ``refused``, ``failed: ERROR``) with the ``refusal`` that ended a
        refused one. The drive loop has written the lines; the metadata is written if it
        can be (on a full disk the error that ended the session is the one to tell)."""
        metadata = self._ending(status)
        if refusal is not None:
            metadata.sessions[-1].refusal = refusal
        with contextlib.suppress(OSError):
            write_metadata(self.run_dir, metadata)

    def finish_session(self, spending: Mapping[str, Any] | None = None) -> Ended:
        """Write the lines and record the session finished, with the totals of the lines
        and what the ledger says was sent and spent, and ``spending``'s fields (the
        prices, caps and endpoint limits the session had) as they are."""
        metadata = self._ending("finished")
        lines = self.lines.all()
        self.lines.write()
        if self.lines.restored:
            print(
                f"{printable(str(self.run_dir))} lacked {self.lines.restored} question line(s) "
                "this machine had finished (the store failed before they were written): "
                "restored from the store",
                file=sys.stderr,
            )
        results, notes = results_of(lines, metadata)
        metadata.finished_at = metadata.sessions[-1].finished_at
        metadata.totals = run_totals(totals(results))
        record_spending(metadata, self.run_dir / files.LEDGER, spending or {})
        question_counts(metadata, (line.question for line in lines))
        write_metadata(self.run_dir, metadata)
        return Ended(lines, metadata, results, notes)

    def _ending(self, status: str) -> Metadata:
        """The metadata with the session ended as ``status`` and the session's models
        without a line taken out of the run (``drop_models_without_lines``)."""
        metadata = self.metadata
        assert metadata is not None and metadata.sessions, "start_session first"
        session = metadata.sessions[-1]
        session.status, session.finished_at = status, now()
        drop_models_without_lines(metadata, session.models or [], self.lines.all())
        return metadata


def worker_ledger(run_dir: Path, max_cost: float | None) -> UsageLedger:
    """The usage ledger a worker process of a session appends to (the session's process
    holds the lock and writes everything else), following the others' lines so every
    process keeps the run-wide budget (``UsageLedger.follow``)."""
    ledger = UsageLedger(run_dir / files.LEDGER, max_cost)
    ledger.follow()
    return ledger


def drop_models_without_lines(
    meta: Metadata, models: Sequence[str], lines: Sequence[QuestionLine]
) -> list[str]:
    """Take each of ``models`` that has no question line out of the run's model lists
    (``spec.models``, ``scoring_settings``, ``judging``); return them.

    Such a model never produced an answer or a stop (a mistyped name stopped by its
    endpoint's refusal, a run interrupted before its first answer): it is not part of the
    run, and a later session may bring it in with other scoring settings. Its threads
    are left as they are (``aidanbench forget`` removes them); a thread's own record
    (``measured``) still guards what it continues. The sessions' own records keep what
    each session asked for.
    """
    present = {line.model for line in lines}
    gone = [model for model in dict.fromkeys(models) if model not in present]
    if meta.spec is not None and "models" in meta.spec.model_fields_set:
        meta.spec.models = [m for m in meta.spec.models if m not in gone]
    if meta.scoring_settings is not None:
        meta.scoring_settings = {m: s for m, s in meta.scoring_settings.items() if m not in gone}
    if meta.judging is not None:
        meta.judging = {m: j for m, j in meta.judging.items() if m not in gone}
    return gone


def question_counts(meta: Metadata, questions: Iterable[str]) -> None:
    """Record the run's question set (every line's, all sessions) in ``meta``."""
    found = list(dict.fromkeys(normal_text(question) for question in questions))
    meta.questions = len(found)
    meta.questions_sha256 = question_set_hash(found)
    meta.question_set_sha256 = question_set_hash(sorted(found))


def record_spending(meta: Metadata, ledger: Path, spending: Mapping[str, Any]) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``, and
    ``spending``'s fields (the prices and caps) as they are.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; ``api_calls``
    and ``tokens`` become what was actually sent, across sessions, redone calls
    included, ``dollars`` the run's cost (null when a model has no price or a reply no
    usage), ``unrecorded`` the requests sent without a recorded reply and
    ``dollars_bound`` what the run can have cost at most (``record.usage``).
    """
    for name, value in spending.items():
        setattr(meta, name, value)
    if not ledger.exists():
        return
    usage = summarise_ledger(ledger)
    recorded = meta.totals or RunTotals()
    meta.totals = RunTotals.model_validate(
        {
            **recorded.model_dump(exclude_unset=True),
            "recorded_api_calls": recorded.api_calls,
            "recorded_tokens": recorded.tokens,
            "recorded_dollars": recorded.dollars,
            "api_calls": usage.api_calls,
            "unrecorded": usage.unrecorded,
            "tokens": usage.tokens,
            "dollars": usage.dollars,
            "dollars_bound": usage.dollars_bound,
        }
    )
    meta.usage = usage
    for judging in (meta.judging or {}).values():
        judging.served = (usage.served_models or {}).get(f"judge:{judging.judge_model}", {})
