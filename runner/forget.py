"""``forget(run_dir, models)``: take models out of a run directory, as if never run.

A model is in a run through its question threads (``checkpoints.sqlite``), its question
lines (``questions.jsonl``, ``answers.jsonl``, the results files) and its entries in
``metadata.json`` (``spec.models``, ``scoring_settings``). All of them go, under the run
directory's lock. What the model's requests cost stays in the usage ledger
(``usage.jsonl``): that money was spent, the run's dollar totals and its ``--max-cost``
budget count it, and ``metadata.json`` records what was forgotten, when, and the spend
kept.

Nothing is half done: every decision is taken before the first write, and each write is
whole or absent (the threads go in one SQLite transaction, the results files are
replaced behind their generation marker, the metadata atomically), in an order that
running the same command again completes if the process dies in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aidanbench.analysis import rundir
from aidanbench.core.errors import UsageError, printable
from aidanbench.runner import store
from aidanbench.runner.checkpoints import delete_threads, stored_threads
from aidanbench.runner.tasks import model_of_thread, totals
from aidanbench.services.usage import LEDGER, read_ledger


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
    """Remove ``models`` from ``run_dir`` (see the module docstring).

    Raises ``UsageError`` with one line when the directory is not a run directory, is
    in use, has results files from an interrupted write, or when a model is not in it.
    """
    if not run_dir.is_dir() or not (
        (run_dir / rundir.METADATA).exists() or (run_dir / rundir.CHECKPOINTS).exists()
    ):
        raise UsageError(f"{printable(str(run_dir))} is not a run directory")
    with rundir.run_lock(run_dir):
        meta = store.stored_metadata(run_dir) or {}
        lines = _lines(run_dir)
        checkpoints = run_dir / rundir.CHECKPOINTS
        store.check_checkpoints(checkpoints)
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
        kept = [line for line in lines if line["model"] not in doomed]
        forgotten = [
            Forgotten(
                model=model,
                threads=sum(model_of_thread(t) == model for t in gone_threads),
                lines=sum(line["model"] == model for line in lines),
                **_spend(run_dir / LEDGER, model),
            )
            for model in dict.fromkeys(models)
        ]
        delete_threads(checkpoints, gone_threads)
        if (run_dir / rundir.QUESTIONS).exists():
            rundir.write_outputs(run_dir, kept)
        if meta:
            store.write_metadata(run_dir, without(meta, forgotten, kept))
    return forgotten


def models_in(
    meta: dict[str, Any], lines: Sequence[dict[str, Any]], threads: Sequence[str]
) -> list[str]:
    """Every model the run directory holds anything of, in the order first seen."""
    spec = meta.get("spec")
    listed = spec.get("models") if isinstance(spec, dict) else None
    scoring = meta.get("scoring_settings")
    found = [
        *(listed if isinstance(listed, list) else []),
        *(scoring if isinstance(scoring, dict) else {}),
        *(line["model"] for line in lines),
        *(m for t in threads if (m := model_of_thread(t)) is not None),
    ]
    return list(dict.fromkeys(str(m) for m in found))


def without(
    meta: dict[str, Any], forgotten: Sequence[Forgotten], kept: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """``meta`` with the forgotten models out of its model lists and totals, and a record
    of the forgetting. Ledger figures (requests sent, tokens, dollars) are kept whole."""
    meta = dict(meta)
    store.drop_models_without_lines(meta, [f.model for f in forgotten], kept)
    counted = totals(kept)
    old = meta.get("totals")
    if isinstance(old, dict):
        if "recorded_api_calls" in old:  # the ledger's figures: what was sent and spent
            counted |= {
                "recorded_api_calls": counted["api_calls"],
                "recorded_tokens": counted["tokens"],
                "api_calls": old.get("api_calls"),
                "tokens": old.get("tokens"),
                "dollars": old.get("dollars"),
            }
        meta["totals"] = {**old, **counted}
    if kept:
        store.question_counts(meta, kept)
    earlier = meta.get("forgotten")
    meta["forgotten"] = [
        *(earlier if isinstance(earlier, list) else []),
        *(
            {
                "model": f.model,
                "at": store.now(),
                "threads": f.threads,
                "lines": f.lines,
                "ledger_lines_kept": f.ledger_lines,
                "dollars_kept": f.dollars,
            }
            for f in forgotten
        ),
    ]
    return meta


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    if not (run_dir / rundir.QUESTIONS).exists():
        return []
    try:
        return rundir.read_lines(run_dir)
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None


def _spend(ledger_path: Path, model: str) -> dict[str, Any]:
    """How many ledger lines were spent on ``model``'s questions (its own requests, and
    the judge's for its threads; embeddings are batched across models, so they name
    none) and the dollars they record."""
    count = 0
    dollars: float | None = 0.0
    for line in read_ledger(ledger_path):
        thread = line.get("thread")
        own = line.get("role") == "model" and line.get("model") == model
        if not own and model_of_thread(thread if isinstance(thread, str) else "") != model:
            continue
        count += 1
        if line.get("event") == "usage":
            cost = line.get("cost_usd")
            dollars = None if dollars is None or cost is None else dollars + float(cost)
    return {"ledger_lines": count, "dollars": dollars}
