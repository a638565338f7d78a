"""``forget(run_dir, models)``: take models out of a run directory, as if never run.

The model's threads, question lines, metadata entries and place in the page go, under the
run directory's lock. What its requests cost stays in the usage ledger: that money was
spent, and the run's dollar totals and ``--max-cost`` budget count it; ``metadata.json``
records what was forgotten, when, and the spend kept, and every figure of the lines is
counted again (``record.recorder.recount``).

All or nothing: every decision is taken before the first write, and the forgetting is one
commit (``Recorder.take_out``: the line files and metadata without the models, the page set
aside before it). Killed before the commit, the directory is as it was (its page put back
by ``files.settle``); killed after it, every reader sees the models gone, and the commit
records what is left (the threads, the page), which the next ``forget`` or ``run`` finishes
(``finish``) before it reads the directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files
from aidanbench.record.lines import QuestionLine, model_of_thread
from aidanbench.record.metadata import Forgotten as ForgottenRecord
from aidanbench.record.metadata import Metadata
from aidanbench.record.recorder import Recorder, drop_models_without_lines, now, recount
from aidanbench.record.usage import read_ledger
from aidanbench.runner import checkpoints
from aidanbench.runner.session import check_checkpoints


@dataclass(frozen=True)
class Forgotten:
    """What forgetting one model removed, and what it kept."""

    model: str
    threads: int
    """Question threads deleted from the checkpoints."""
    lines: int
    """Question lines removed from the results files."""
    ledger_lines: int
    """Usage-ledger lines of the model, kept."""
    dollars: float | None
    """What those lines record as spent (None: a price is unknown)."""
    earlier: bool = False
    """Taken out by a forget cut short after its commit, finished now."""


@dataclass(frozen=True)
class Forgetting:
    """What ``forget`` did: the models taken out and what became of the page."""

    models: list[Forgotten]
    page: Path | None
    """``report.html`` written again (None: there was none, or nothing is left to show)."""
    page_removed: bool
    """The page went: no results are left."""


def forget(run_dir: Path, models: Sequence[str]) -> Forgetting:
    """Remove ``models`` from ``run_dir`` (module docstring), first finishing a forget cut
    short; ``UsageError`` (one line) when it is not a run directory, is in use or cannot
    be read, or a model is not in it."""
    if not run_dir.is_dir() or not (
        (run_dir / files.METADATA).exists() or (run_dir / files.CHECKPOINTS).exists()
    ):
        raise UsageError(f"{printable(str(run_dir))} is not a run directory")
    with Recorder.open(run_dir) as recorder:
        check_checkpoints(run_dir / files.CHECKPOINTS)
        earlier, page, removed = _finish(recorder)
        meta, lines = recorder.metadata, recorder.lines()
        threads = _threads(run_dir)
        present = models_in(meta, lines, threads)
        wanted = list(dict.fromkeys(models))
        missing = [m for m in wanted if m not in present and m not in earlier]
        if missing:
            shown = ", ".join(printable(m) for m in present) or "none"
            raise UsageError(
                f"model {printable(missing[0])} is not in run directory "
                f"{printable(str(run_dir))} (its models: {shown})"
            )
        doomed = [m for m in wanted if m in present]
        found = [_kept_record(meta, model) for model in earlier]
        if doomed:
            kept = [line for line in lines if line.model not in doomed]
            taken = [
                Forgotten(
                    model,
                    threads=sum(model_of_thread(t) == model for t in threads),
                    lines=sum(line.model == model for line in lines),
                    ledger_lines=(spend := _spend(run_dir / files.LEDGER, model))[0],
                    dollars=spend[1],
                )
                for model in doomed
            ]
            new = None if meta is None else without(meta, taken, kept, run_dir / files.LEDGER)
            recorder.take_out(doomed, kept, new)
            _, page, removed = _finish(recorder)
            found += taken
    return Forgetting(found, page, removed)


def finish(run_dir: Path) -> None:
    """Finish a forget cut short after its commit, if one is, before a session reads the
    directory: its models are forgotten, and a session naming one starts it afresh."""
    try:
        if not files.pending_forget(run_dir):
            return
    except ValueError:  # a damaged manifest: the session's own reads say so
        return
    with Recorder.open(run_dir) as recorder:
        _finish(recorder)


def _threads(run_dir: Path) -> list[str]:
    path = run_dir / files.CHECKPOINTS
    return checkpoints.stored_threads(path) if path.exists() else []


def _finish(recorder: Recorder) -> tuple[list[str], Path | None, bool]:
    """Finish a committed forget (none pending: nothing to do): delete its models' threads
    (one transaction), write the page of what is left when the directory had one, then
    record it finished (``files.end_forget``). Its models, the page written (None: none)
    and whether the page went (no results are left)."""
    run_dir = recorder.run_dir
    models = files.pending_forget(run_dir)
    if not models:
        return [], None, False
    doomed = set(models)
    gone = [t for t in _threads(run_dir) if model_of_thread(t) in doomed]
    checkpoints.delete_threads(run_dir / files.CHECKPOINTS, gone)
    page, aside = run_dir / files.REPORT, run_dir / files.PAGE_ASIDE
    written, removed = None, False
    if page.exists() or aside.exists():
        if recorder.lines():
            from aidanbench.analysis.view import write_view

            written = write_view([run_dir], page)
        else:
            page.unlink(missing_ok=True)
            removed = True
    aside.unlink(missing_ok=True)
    files.end_forget(run_dir)
    return models, written, removed


def _kept_record(meta: Metadata | None, model: str) -> Forgotten:
    """What the metadata records of forgetting ``model`` (a forget cut short)."""
    entry = next(f for f in reversed((meta.forgotten if meta else None) or []) if f.model == model)
    return Forgotten(
        model,
        threads=entry.threads or 0,
        lines=entry.lines or 0,
        ledger_lines=entry.ledger_lines_kept or 0,
        dollars=entry.dollars_kept,
        earlier=True,
    )


def models_in(
    meta: Metadata | None, lines: Sequence[QuestionLine], threads: Sequence[str]
) -> list[str]:
    """Every model the run directory holds anything of, in the order first seen."""
    found = [
        *(meta.spec.models if meta and meta.spec else []),
        *((meta.scoring_settings or {}) if meta else {}),
        *(line.model for line in lines),
        *(m for t in threads if (m := model_of_thread(t)) is not None),
    ]
    return list(dict.fromkeys(found))


def without(
    meta: Metadata, forgotten: Sequence[Forgotten], kept: Sequence[QuestionLine], ledger: Path
) -> Metadata:
    """``meta`` without the forgotten models, recording the forgetting: every figure of
    the lines counted again from ``kept``, the ledger's (requests sent, tokens, dollars)
    kept whole."""
    meta = meta.model_copy(deep=True)
    drop_models_without_lines(meta, [f.model for f in forgotten], kept)
    recount(meta, kept, ledger, {})
    meta.forgotten = [
        *(meta.forgotten or []),
        *(
            ForgottenRecord(
                model=f.model,
                at=now(),
                threads=f.threads,
                lines=f.lines,
                ledger_lines_kept=f.ledger_lines,
                dollars_kept=f.dollars,
            )
            for f in forgotten
        ),
    ]
    return meta


def _spend(ledger_path: Path, model: str) -> tuple[int, float | None]:
    """Ledger lines of ``model``'s questions and their dollars (embeddings are batched
    across models, so they name none)."""
    count = 0
    dollars: float | None = 0.0
    for line in read_ledger(ledger_path):
        own = line.role == "model" and line.model == model
        if not own and model_of_thread(line.thread or "") != model:
            continue
        count += 1
        if line.event == "usage":
            cost = line.cost_usd
            dollars = None if dollars is None or cost is None else dollars + cost
    return count, dollars
