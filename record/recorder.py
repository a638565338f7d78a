"""``Recorder``: the one writer of a run directory.

Whatever writes a run directory (the run engine and its workers, ``rescore --into``,
``forget``) writes it through a recorder, which owns every file but the checkpoints and the
score cache: the lock, held from ``open`` (or ``build``) until the block ends; the metadata,
written with the session added before it runs (so a killed session is found ``running``, then
marked ``killed``) and when it ends; the line files, which only grow: a session starts from every
line the directory holds, so one that leaves questions out keeps theirs; the usage ledger and the
run's budget (a worker appends through ``worker_ledger``). Callers use its methods, as
inspect_ai's log recorders are used: the drive loop records lines through it as a
``QuestionLog``, the clients and the budget use it as a ``record.usage.UsageBook``; nothing
outside ``record`` holds its lines or its ledger.

A directory ``rescore --into`` makes is built beside its place and moved there once
complete (``build``), so a killed command leaves no half directory. ``forget`` takes models
out in one commit of the line files and metadata (``take_out``), which records what is
left to do; whatever opens the directory next settles what killed writes left
(``files.settle``) before reading anything.
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
from typing import Any, Protocol

from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files
from aidanbench.record.lines import (
    LineTexts,
    QuestionLine,
    line_files,
    normal_text,
    read_lines,
    write_lines,
)
from aidanbench.record.metadata import (
    Metadata,
    RunTotals,
    metadata_text,
    question_set_hash,
    read_metadata,
    write_metadata,
)
from aidanbench.record.results import QuestionResult, results_of, run_totals, totals
from aidanbench.record.usage import UsageLedger, summarise_ledger

Repair = Callable[[Path], list[QuestionLine]]
"""Rebuilds the question lines of a directory whose line files cannot be read, from its
threads (its checkpoints, or this machine's lines in the shared store)."""


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
    """The question lines the run directory holds, in order.

    Line files that cannot be read are rebuilt by ``repair``, saying so; without one they
    are a ``UsageError``: a session going on without them would write fewer questions.
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
"""Most of the run's time rewriting the files may take (a campaign's files grow to tens of
megabytes): a rewrite that took ``d`` seconds waits at least ``d / WRITE_SHARE``."""


class QuestionLog(Protocol):
    """Where the drive loop records question lines (``runner.drive``, ``runner.workers``): a
    run's ``Recorder``, or a worker process's ``RunLines`` without a directory."""

    def stopped_before(self, thread: str) -> bool: ...

    def keep(self, line: QuestionLine, found: bool = False) -> None: ...

    def finished(self, line: QuestionLine) -> None: ...

    def flush(self) -> None: ...

    def lines(self) -> list[QuestionLine]: ...


class RunLines:
    """The question lines of a run, rewritten to the run directory as questions finish.

    Lines are known by their thread and keep the order they were first recorded in (lines
    carried from earlier sessions first), so the files list questions in the run's order
    whatever order they finish in, and a line is replaced, never dropped. Rewrites are
    throttled (``WRITE_SHARE``; the first finished question's at once, and the drive loop
    flushes once more at the end): the files are for reading, resumes start from the
    checkpoints, and rewriting every line on every finish would spend the CPU a long run needs
    (``bench.lab --variants write-always``).
    Without a run directory (a worker process) nothing is written.
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
        self._by_thread: dict[str, QuestionLine] = {line.thread: line for line in carried}
        self._written: float | None = None
        self._took = 0.0
        self._texts = LineTexts()
        self._changed = True
        """Whether a line was noted since the files were last written."""
        self.restored = 0
        """Lines of threads found finished that the files lacked (``keep``)."""

    def stopped_before(self, thread: str) -> bool:
        """Whether earlier sessions' files show the thread stopped for good (the drive loop
        asks last; the thread, not this line, decides)."""
        line = self._by_thread.get(thread)
        return line is not None and line.finished

    def keep(self, line: QuestionLine, found: bool = False) -> None:
        """Note a line without writing; a line ``found`` (of a thread found finished in a
        shared store) that the files lacked counts as ``restored``."""
        if found and line.thread not in self._by_thread:
            self.restored += 1
        self._by_thread[line.thread] = line
        self._changed = True

    def finished(self, line: QuestionLine) -> None:
        """Note a finished question's line; rewrite the files unless they were written
        less than ``every`` seconds ago."""
        self.keep(line)
        wait = max(self.every, self._took / WRITE_SHARE)
        if self._written is None or self.clock() - self._written >= wait:
            self.flush()

    def flush(self) -> None:
        """Rewrite the line files from every line to show, unless nothing changed."""
        started = self.clock()
        if self.run_dir is not None and self._changed:
            write_lines(self.run_dir, self.lines(), self._texts)
        self._changed = False
        self._written = self.clock()
        self._took = self._written - started

    def lines(self) -> list[QuestionLine]:
        """Every line to show (``with_results``), in the run's order."""
        return with_results(self._by_thread.values())


def with_results(lines: Iterable[QuestionLine]) -> list[QuestionLine]:
    """The lines of every (model, temperature) with an answer or a stop on one of its lines.

    A row whose threads all produced nothing (a mistyped model refused by its endpoint)
    ranks nowhere; once a row has produced something, its unstarted lines show too.
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
        self._lines = lines
        self._ledger = ledger
        self._complete = False

    # The question lines, as the drive loop records them (``QuestionLog``).

    def stopped_before(self, thread: str) -> bool:
        """Whether the directory's lines show the thread stopped for good (``RunLines``)."""
        return self._lines.stopped_before(thread)

    def keep(self, line: QuestionLine, found: bool = False) -> None:
        """Note a question's line (written with the next ``flush``)."""
        self._lines.keep(line, found)

    def finished(self, line: QuestionLine) -> None:
        """Note a finished question's line; the line files follow, throttled."""
        self._lines.finished(line)

    def flush(self) -> None:
        """Rewrite the line files now, if a line changed."""
        self._lines.flush()

    def lines(self) -> list[QuestionLine]:
        """Every question line to show, in the run's order."""
        return self._lines.lines()

    # The usage ledger, as the run's clients and budget use it (``UsageBook``).

    @property
    def exhausted(self) -> bool:
        """Whether the run's budget (``--max-cost``) is spent."""
        return self._ledger.exhausted

    def write(self, line: Mapping[str, Any]) -> None:
        """Append one line to the usage ledger."""
        self._ledger.write(line)

    def sent(
        self,
        role: str,
        model: str,
        where: Mapping[str, Any],
        *,
        input_tokens: int | None,
        output_tokens: int,
        bound_usd: float | None,
    ) -> str:
        """A request is about to go out (``UsageLedger.sent``); its id."""
        return self._ledger.sent(
            role,
            model,
            where,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            bound_usd=bound_usd,
        )

    def failed(self, role: str, model: str, request: str, status: int | None) -> None:
        """A request got no reply (``UsageLedger.failed``)."""
        self._ledger.failed(role, model, request, status)

    def follow(self) -> None:
        """Count what the session's worker processes append too (``UsageLedger.follow``)."""
        self._ledger.follow()

    def catch_up(self) -> None:
        """Count what they appended since the last look (``UsageLedger.catch_up``)."""
        self._ledger.catch_up()

    @property
    def max_cost(self) -> float | None:
        """The run's budget in dollars (None: no cap)."""
        return self._ledger.max_cost

    @property
    def path(self) -> Path:
        """The usage ledger's file, for what reads it whole (``summarise_ledger``)."""
        return self._ledger.path

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
        """Hold ``run_dir``'s lock, settle what killed writes left, and read its metadata,
        lines (``stored_lines``) and ledger with the budget ``max_cost``. ``damaged`` checks
        the score cache (``set_aside_damaged_cache``)."""
        with files.run_lock(run_dir):
            files.settle(run_dir)
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
        """A recorder of the new run directory ``run_dir``, written in ``aside`` and moved
        to ``run_dir`` once ``complete`` is called and the block ends without an error (a
        ``UsageError`` when ``run_dir`` is taken by then).

        Anything else leaves no ``run_dir``; ``aside`` keeps its score cache and ledger
        (judgments already paid for) for the next build, which writes the rest again."""
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

    def write_file(self, name: str, text: str) -> Path:
        """Write another file of the run directory, whole; its path."""
        path = self.run_dir / name
        files.atomic_write(path, text)
        return path

    def start_session(self, metadata: Metadata, asked: Iterable[str]) -> None:
        """Write ``metadata`` (the stored one with this session added) as the run's, with the
        question set of the lines held and ``asked``, before any question runs."""
        question_counts(metadata, [*(line.question for line in self.lines()), *asked])
        self.save(metadata)

    def save(self, metadata: Metadata) -> None:
        """Write ``metadata`` as the run's."""
        self.metadata = metadata
        write_metadata(self.run_dir, metadata)

    def replace_lines(self, lines: Sequence[QuestionLine]) -> None:
        """Write exactly ``lines`` (a directory being built)."""
        self._lines = RunLines(self.run_dir, carried=lines)
        self._lines.flush()

    def take_out(
        self, models: Sequence[str], lines: Sequence[QuestionLine], metadata: Metadata | None
    ) -> None:
        """Write exactly ``lines`` (those ``forget`` keeps; nothing else may drop one) and
        ``metadata`` in one commit recording that ``models``' threads and page are still
        to go (``files.Manifest.forgetting``). The page is set aside first, so no page
        showing them is left once the commit is made; a directory without line files
        gets none."""
        page = self.run_dir / files.REPORT
        if page.exists():
            os.replace(page, self.run_dir / files.PAGE_ASIDE)
        self._lines = RunLines(self.run_dir, carried=lines)
        written = line_files(self.lines()) if (self.run_dir / files.QUESTIONS).exists() else {}
        if metadata is not None:
            written[files.METADATA] = metadata_text(metadata)
            self.metadata = metadata
        try:
            files.write_outputs(self.run_dir, written, forgetting=models)
        except BaseException:  # a full disk: the page goes back unless the commit was made
            with contextlib.suppress(OSError):
                files.settle(self.run_dir)
            raise

    def end_session(self, status: str, *, refusal: str | None = None) -> None:
        """Record that the session ended otherwise than finished (``interrupted``,
        ``refused`` with its ``refusal``, ``failed: ERROR``). The metadata is written if it
        can be: on a full disk the error that ended the session is the one to tell."""
        metadata = self._ending(status)
        if refusal is not None:
            metadata.sessions[-1].refusal = refusal
        with contextlib.suppress(OSError):
            write_metadata(self.run_dir, metadata)

    def finish_session(self, spending: Mapping[str, Any] | None = None) -> Ended:
        """Write the lines and record the session finished, with the totals and what was
        sent and spent (``record_spending``)."""
        metadata = self._ending("finished")
        lines = self.lines()
        self.flush()
        if self._lines.restored:
            print(
                f"{printable(str(self.run_dir))} lacked {self._lines.restored} question line(s) "
                "this machine had finished (the store failed before they were written): "
                "restored from the store",
                file=sys.stderr,
            )
        metadata.finished_at = metadata.sessions[-1].finished_at
        results, notes = recount(metadata, lines, self.run_dir / files.LEDGER, spending or {})
        write_metadata(self.run_dir, metadata)
        return Ended(lines, metadata, results, notes)

    def _ending(self, status: str) -> Metadata:
        """The metadata with the session ended as ``status`` (``drop_models_without_lines``)."""
        metadata = self.metadata
        assert metadata is not None and metadata.sessions, "start_session first"
        session = metadata.sessions[-1]
        session.status, session.finished_at = status, now()
        drop_models_without_lines(metadata, session.models or [], self.lines())
        return metadata


def worker_ledger(run_dir: Path, max_cost: float | None) -> UsageLedger:
    """The ledger a session's worker process appends to, following the others' lines so it
    keeps the run-wide budget (``UsageLedger.follow``) when there is one (``max_cost``); the
    parent writes everything else."""
    ledger = UsageLedger(run_dir / files.LEDGER, max_cost)
    if max_cost is not None:
        ledger.follow()
    return ledger


def drop_models_without_lines(
    meta: Metadata, models: Sequence[str], lines: Sequence[QuestionLine]
) -> list[str]:
    """Take each of ``models`` that has no question line out of the run's model lists
    (``spec.models``, ``scoring_settings``, ``judging``); return them.

    Such a model never produced an answer or a stop (a mistyped name refused by its
    endpoint): it is not part of the run, and a later session may bring it in with other
    scoring settings. Its threads stay (``forget`` removes them), guarded by ``measured``;
    the sessions' own records keep what each session asked for.
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


def recount(
    meta: Metadata, lines: Sequence[QuestionLine], ledger: Path, spending: Mapping[str, Any]
) -> tuple[list[QuestionResult], list[str]]:
    """Record every figure of ``lines`` and of the ``ledger`` in ``meta``: the totals
    (``record_spending``) and the question set; return the lines as the views read them
    and their notes (``Ended``)."""
    results, notes = results_of(lines, meta)
    meta.totals = run_totals(totals(results))
    record_spending(meta, ledger, spending)
    question_counts(meta, (line.question for line in lines))
    return results, notes


def question_counts(meta: Metadata, questions: Iterable[str]) -> None:
    """Record the run's question set (every line's, all sessions) in ``meta``."""
    found = list(dict.fromkeys(normal_text(question) for question in questions))
    meta.questions = len(found)
    meta.questions_sha256 = question_set_hash(found)
    meta.question_set_sha256 = question_set_hash(sorted(found))


def record_spending(meta: Metadata, ledger: Path, spending: Mapping[str, Any]) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``, and
    ``spending``'s fields (prices, caps, endpoint limits) as they are.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; its ``api_calls``,
    ``tokens``, ``dollars`` (null when any part is unknown), ``unrecorded`` and
    ``dollars_bound`` become the ledger's, across sessions, redone calls included.
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
