"""``run``'s cost options: the price table, the run-wide budget and the dry run.

``register`` adds the flags (the per-question caps are settings, whose flags come with
the others), ``check`` refuses bad values before anything is written, and ``dry_run``
prints the estimate instead of running. The run engine arms the budget and writes the
ledger's totals (``runner.cost``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from aidanbench.cli import estimate
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL, Settings
from aidanbench.services.pricing import PriceFileError, price_table

if TYPE_CHECKING:
    from aidanbench.runner.spec import RunSpec


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
        "--dry-run",
        action="store_true",
        help="print the tokens and dollars this run would cost (as `estimate`) and stop",
    )
    estimate.add_answers_from(p)
    estimate.add_reasoning_tokens(p)


def _positive(args: argparse.Namespace, name: str) -> None:
    value = getattr(args, name, None)
    if value is not None and not (math.isfinite(value) and value > 0):
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag} must be a positive finite number, got {value}")


def check(
    args: argparse.Namespace,
    spec: RunSpec,
    judge_model: str,
    embedding_model: str = LOCAL_EMBEDDING_MODEL,
) -> None:
    """Refuse bad cost options before anything is written (``UsageError``).

    A dollar cap needs a price for every model that spends: the models (priced by the
    name they are sent as, a variant's NAME), the judge and, for ``--max-cost``, the
    embedding model (unless local). Without one its dollars are unknown and the cap could
    not count them. A provider that reports no usage does not need refusing: its tokens
    are then estimated from above (``services.usage``).
    """
    for name in ("max_cost", "max_question_cost", "max_question_seconds"):
        _positive(args, name)
    try:
        table = price_table(args.prices)
    except PriceFileError as exc:
        raise UsageError(printable(str(exc))) from None
    if args.max_cost is not None or args.max_question_cost is not None:
        spending = [*(spec.provider_model(m) for m in spec.models), judge_model]
        if args.max_cost is not None and embedding_model != LOCAL_EMBEDDING_MODEL:
            spending.append(embedding_model)
        unpriced = [m for m in dict.fromkeys(spending) if table.price(m) is None]
        if unpriced:
            flag = "--max-cost" if args.max_cost is not None else "--max-question-cost"
            raise UsageError(
                f"{flag} needs prices, and {', '.join(printable(m) for m in unpriced)} "
                "has none; give them with --prices FILE"
            )


def dry_run(args: argparse.Namespace, spec: RunSpec) -> int:
    """``run --dry-run``: the estimate of this run; no call, nothing written."""
    settings = Settings(model=spec.models[0], **spec.settings)
    values = settings.model_dump() | {"repeats": spec.repeats * len(spec.temperatures)}
    result = estimate.plan_estimate(args, spec.models, spec.questions, values, spec.variants)
    return estimate.show(result, False)
