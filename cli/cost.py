"""``run``'s cost options: prices, the usage ledger, the caps, and the totals they give.

``run`` calls these with one line each: ``register`` adds the flags, ``check`` refuses
bad values before anything is written, ``settings_fields`` puts prices, ledger and
per-question caps into every task's settings (outside the stored ``spec``, so raising a
cap is not "another run"), ``start`` arms the run-wide budget, and ``finish`` writes the
ledger's totals into ``metadata.json``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.cli import estimate
from aidanbench.cli.errors import UsageError, printable
from aidanbench.services.pricing import PriceFileError, price_table
from aidanbench.services.usage import LEDGER, forget_ledger, ledger, summarise_ledger


def register(p: argparse.ArgumentParser) -> None:
    """Add the cost flags to ``run``."""
    p.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help="JSON price table replacing the bundled list prices of the models it names",
    )
    p.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="stop the run once it has spent this many dollars (all its sessions)",
    )
    p.add_argument(
        "--max-question-cost",
        type=float,
        metavar="USD",
        help="stop a question once it has cost this many dollars (a lower-bound score)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the tokens and dollars this run would cost (as `estimate`) and stop",
    )
    estimate.add_answers_from(p)
    p.add_argument(
        "--max-question-seconds",
        type=float,
        metavar="S",
        help="stop a question once it has run this many seconds (a lower-bound score)",
    )


def _positive(args: argparse.Namespace, name: str) -> None:
    value = getattr(args, name, None)
    if value is not None and not (math.isfinite(value) and value > 0):
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag} must be a positive finite number, got {value}")


def check(args: argparse.Namespace, models: Sequence[str], judge_model: str) -> None:
    """Refuse bad cost options before anything is written (``UsageError``)."""
    for name in ("max_cost", "max_question_cost", "max_question_seconds"):
        _positive(args, name)
    try:
        table = price_table(args.prices)
    except PriceFileError as exc:
        raise UsageError(printable(str(exc))) from None
    if args.max_cost is not None or args.max_question_cost is not None:
        unpriced = [m for m in [*models, judge_model] if table.price(m) is None]
        if unpriced:
            flag = "--max-cost" if args.max_cost is not None else "--max-question-cost"
            raise UsageError(
                f"{flag} needs prices, and {', '.join(printable(m) for m in unpriced)} "
                "has none; give them with --prices FILE"
            )


def dry_run(args: argparse.Namespace, spec: dict[str, Any], questions: Sequence[str]) -> int:
    """``run --dry-run``: the estimate of this run; no call, nothing written."""
    lines_per_question = spec["repeats"] * len(spec["temperatures"])
    settings = {**spec["settings"], "repeats": lines_per_question}
    return estimate.show(estimate.plan_estimate(args, spec["models"], questions, settings), False)


def settings_fields(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """The cost fields of every task's settings. A remote server gets neither a ledger nor
    a prices file (both are paths on this machine): its dollars use the bundled prices."""
    local = getattr(args, "server", None) is None
    prices = None if args.prices is None or not local else str(args.prices.resolve())
    return {
        "prices_path": prices,
        "usage_path": str(run_dir / LEDGER) if local else None,
        "max_question_cost": args.max_question_cost,
        "max_question_seconds": args.max_question_seconds,
    }


def start(args: argparse.Namespace, run_dir: Path) -> None:
    """Arm the run-wide budget on the run's ledger (spend of earlier sessions counts)."""
    ledger(run_dir / LEDGER).max_cost = args.max_cost


def finish(meta: dict[str, Any], args: argparse.Namespace, run_dir: Path) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; ``api_calls``
    and ``tokens`` become what was actually sent, across sessions, redone calls
    included, and ``dollars`` the run's cost (null when a model has no price).
    """
    path = run_dir / LEDGER
    forget_ledger(path)
    if not path.exists():
        return
    usage = summarise_ledger(path)
    totals = meta.setdefault("totals", {})
    totals["recorded_api_calls"] = totals.get("api_calls")
    totals["recorded_tokens"] = totals.get("tokens")
    totals["api_calls"] = usage["api_calls"]
    totals["tokens"] = usage["tokens"]
    totals["dollars"] = usage["dollars"]
    meta["usage"] = usage
    meta["prices"] = {
        **price_table(args.prices).describe(),
        "file": None if args.prices is None else str(args.prices),
    }
    meta["caps"] = {
        "max_cost": args.max_cost,
        "max_question_cost": args.max_question_cost,
        "max_question_seconds": args.max_question_seconds,
    }
