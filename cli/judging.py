"""What ``calibrate --judge-model`` and ``rescore --judge-model`` share: the judge's flags,
settings, progress and cost lines. Judgments are cached in ``--cache`` and every request goes to a
usage ledger beside it (``analysis.rejudge.ledger_path``), so a rerun asks for nothing already
judged and the dollars spent are known across reruns."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aidanbench.analysis.judge_noise import unreadable_text
from aidanbench.analysis.rejudge import LEDGER_SUFFIX
from aidanbench.cli import options
from aidanbench.core.errors import ConfigError, UsageError, printable
from aidanbench.core.settings import Settings
from aidanbench.runner.rejudged import JUDGE_SETTINGS
from aidanbench.services.batch import BatchStatus
from aidanbench.services.pricing import PriceFileError, price_table, same_model

JUDGE_FIELDS = (
    *JUDGE_SETTINGS,
    "request_timeout",
    "max_retries",
    "max_concurrency",
    "requests_per_minute",
    "prices_path",
)
"""The settings a re-judging command takes, as ``run`` takes them."""

DEFAULT_POLL_SECONDS = 30.0
"""How often a batch is polled by default (OpenAI's batches take minutes to hours)."""


def register(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """The judge's flags, ``--cache``, ``--prices``, ``--batch`` and its poll interval."""
    options.add_settings_flags(
        parser, only=JUDGE_FIELDS, required={"judge_model"} if required else ()
    )
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="FILE",
        help="SQLite file of judgments (a rerun asks for nothing it holds); its usage "
        f"ledger is written beside it (FILE with {LEDGER_SUFFIX})",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="send the judge calls through the provider's batch API (OpenAI's protocol; "
        "half price; minutes to hours); a killed command resumes the same batch",
    )
    parser.add_argument(
        "--batch-poll-seconds",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        metavar="S",
        help=f"seconds between two looks at a batch (default: {DEFAULT_POLL_SECONDS:g})",
    )


def judge_settings(args: argparse.Namespace, cache: Path) -> Settings:
    """The judging's settings, cached in ``cache``; a bad value is one line naming the flag."""
    if args.batch_poll_seconds <= 0:
        raise UsageError(f"--batch-poll-seconds must be above 0, got {args.batch_poll_seconds:g}")
    values: dict[str, Any] = {field: getattr(args, field) for field in JUDGE_FIELDS}
    if values["prices_path"] is not None:
        try:
            price_table(values["prices_path"])
        except PriceFileError as exc:
            raise UsageError(printable(str(exc))) from None
        values["prices_path"] = str(Path(values["prices_path"]).resolve())
    try:
        settings = Settings(
            **values,
            cache_path=str(cache),
        )
    except ValidationError as exc:
        raise UsageError(options.validation_line(exc)) from None
    from aidanbench.services.clients import check_keys  # loads the OpenAI client

    try:
        check_keys(settings, ["judge"])
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return settings


def _show(line: str) -> None:
    print(printable(line), file=sys.stderr, flush=True)


def _show_batch(status: BatchStatus) -> None:
    again = " (resumed: created by an earlier command)" if status.resumed else ""
    _show(
        f"batch {status.batch_id}{again}: {status.status}, {status.completed}/{status.total} "
        f"done, {status.failed} failed"
    )


def progress(args: argparse.Namespace) -> dict[str, Any]:
    """How ``analysis.rejudge.judge_all`` asks (``--batch``) and reports progress (stderr)."""
    poll = args.batch_poll_seconds if args.batch else None
    return {"batch_poll_seconds": poll, "progress": _show, "batch_progress": _show_batch}


def refusals_line(judging: Mapping[str, Any]) -> str:
    """The judge's unreadable replies and the answers it always refused, in one line."""
    parts = [unreadable_text(judging["unreadable"])] if judging["unreadable"] else []
    if count := judging["refused"]:
        parts.append(
            f"{count} answer{'' if count == 1 else 's'} the judge gave no readable score in "
            "every try left undecided: out of the decisions, their chains counted up to them "
            "(lower bounds); the same command asks for them again"
        )
    return "; ".join(parts)


def served_warning(model: str, served: dict[str, int]) -> str | None:
    """A warning when judgments were served by another model than the one asked for."""
    others = {name: n for name, n in served.items() if not same_model(model, name)}
    if not others:
        return None
    named = ", ".join(f"{name} ({n})" for name, n in others.items())
    return (
        f"the judge asked for was {model}, but the provider says other models served "
        f"judgments: {named}; they are priced as the models that served them"
    )


def cost_line(cost: dict[str, Any]) -> str:
    """The ledger's totals as one line (unknown dollars said so, never 0)."""
    dollars = "unknown" if cost["dollars"] is None else f"${cost['dollars']:,.4f}"
    unpriced = ", ".join(cost["unpriced_models"])
    return (
        f"judge requests recorded in {cost['ledger']}: {cost['api_calls']}, "
        f"{cost['tokens']:,} tokens, {dollars}"
        + (f" (no price for {unpriced})" if unpriced else "")
    )
