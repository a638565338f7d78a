"""``forget(run_dir, models)``: take models out of a run directory, as if never run.

The model's threads, question lines and metadata entries go, under the run directory's
lock. What its requests cost stays in the usage ledger: that money was spent, and the run's
dollar totals and ``--max-cost`` budget count it; ``metadata.json`` records what was
forgotten, when, and the spend kept.

Nothing is half done: every decision is taken before the first write, each write is whole or
absent (the threads in one SQLite transaction, then the files and metadata through
``record.recorder``), in an order that running the same command again completes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files
from aidanbench.record.lines import QuestionLine, model_of_thread
from aidanbench.record.metadata import Forgotten as ForgottenRecord
from aidanbench.record.metadata import Metadata, RunTotals
from aidanbench.record.recorder import (
    Recorder,
    drop_models_without_lines,
    now,
    question_counts,
)
from aidanbench.record.results import results_of, run_totals, totals
from aidanbench.record.usage import read_ledger
from aidanbench.runner.checkpoints import delete_threads, stored_threads
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


def forget(run_dir: Path, models: Sequence[str]) -> list[Forgotten]:
    """Remove ``models`` from ``run_dir`` (module docstring); ``UsageError`` (one line) when
    it is not a run directory, is in use or half written, or a model is not in it."""
    if not run_dir.is_dir() or not (
        (run_dir / files.METADATA).exists() or (run_dir / files.CHECKPOINTS).exists()
    ):
        raise UsageError(f"{printable(str(run_dir))} is not a run directory")
    with Recorder.open(run_dir) as recorder:
        meta, lines = recorder.metadata, recorder.lines.all()
        checkpoints = run_dir / files.CHECKPOINTS
        check_checkpoints(checkpoints)
        threads = stored_threads(checkpoints) if checkpoints.exists() else []
        present = models_in(meta, lines, threads)
        missing = [m for m in dict.fromkeys(models) if m not in present]
        if missing:
            shown = ", ".join(printable(m) for m in present) or "none"
            raise UsageError(
                f"model {printable(missing[0])} is not in run directory "
                f"{printable(str(run_dir))} (its models: {shown})"
            )
        doomed = set(models)
        gone_threads = [t for t in threads if model_of_thread(t) in doomed]
        kept = [line for line in lines if line.model not in doomed]
        forgotten = []
        for model in dict.fromkeys(models):
            ledger_lines, dollars = _spend(run_dir / files.LEDGER, model)
            forgotten.append(
                Forgotten(
                    model=model,
                    threads=sum(model_of_thread(t) == model for t in gone_threads),
                    lines=sum(line.model == model for line in lines),
                    ledger_lines=ledger_lines,
                    dollars=dollars,
                )
            )
        delete_threads(checkpoints, gone_threads)
        if (run_dir / files.QUESTIONS).exists():
            recorder.replace_lines(kept)
        if meta is not None:
            recorder.save(without(meta, forgotten, kept))
    return forgotten


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
    meta: Metadata, forgotten: Sequence[Forgotten], kept: Sequence[QuestionLine]
) -> Metadata:
    """``meta`` without the forgotten models, recording the forgetting; the ledger's
    figures (requests sent, tokens, dollars) are kept whole."""
    meta = meta.model_copy(deep=True)
    drop_models_without_lines(meta, [f.model for f in forgotten], kept)
    counted = run_totals(totals(results_of(kept, meta)[0])).model_dump(exclude_unset=True)
    old = meta.totals
    if old is not None:
        if old.recorded_api_calls is not None:  # the ledger's figures: what was sent and spent
            counted |= {
                "recorded_api_calls": counted["api_calls"],
                "recorded_tokens": counted["tokens"],
                "api_calls": old.api_calls,
                "tokens": old.tokens,
                "dollars": old.dollars,
            }
        meta.totals = RunTotals.model_validate({**old.model_dump(exclude_unset=True), **counted})
    if kept:
        question_counts(meta, (line.question for line in kept))
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
