"""``aidanbench report``: scores of run directories and original-schema results files.

Several paths are read as one set of results (``aidanbench.analysis.inputs``); what is
printed is ``aidanbench.analysis.report``'s. ``rescore`` and ``plot`` read their inputs
here too, so the commands read and print one shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from aidanbench.analysis import cost
from aidanbench.analysis.inputs import combine, read_input
from aidanbench.analysis.inputs import reward_mode as resolve_reward_mode
from aidanbench.analysis.report import (
    PIPE_WIDTH,
    cap_lines,
    category_table,
    comparison_text,
    error_lines,
    headline_lines,
    judging_lines,
    merged_fields,
    question_table,
    report_payload,
    truncation_fields,
    truncation_lines,
    warning_lines,
)
from aidanbench.analysis.summary import (
    COUNTING,
    REWARD_MODES,
    PairedComparison,
    SummaryRow,
    paired_comparison,
    summarise,
    warnings,
)
from aidanbench.analysis.summary_table import render_summary
from aidanbench.cli import add_command
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import Metadata
from aidanbench.record.results import QuestionResult


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


@dataclass(frozen=True)
class Inputs:
    """What the paths of a command hold, read and combined (``analysis.inputs``)."""

    results: list[QuestionResult]
    """Every input's question lines, paired by question text."""
    reward_mode: str
    """The headline's reward mode."""
    notes: list[str]
    """Warnings about the inputs themselves (reward modes that differ)."""


def read_inputs(
    paths: Sequence[str], thresholds: Thresholds | None = None, reward_mode: str | None = None
) -> Inputs:
    """Every path read before anything is printed; an unreadable one is a ``UsageError``."""
    seen: dict[Path, str] = {}
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise UsageError(f"{path} is given twice (as {seen[resolved]}); name each input once")
        seen[resolved] = path
    inputs = []
    for path in paths:
        try:
            source = read_input(Path(path), thresholds)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            detail = f"missing key {exc}" if isinstance(exc, KeyError) else one_line(exc)
            raise UsageError(f"cannot read results at {path}: {detail}") from exc
        if not source.results:
            raise UsageError(f"no question results at {path}")
        inputs.append(source)
    mode, notes = resolve_reward_mode(inputs, reward_mode)
    return Inputs(combine(inputs), mode, notes)


def make_console() -> Console:
    """Console for reports without highlighting (it colours numbers at random) or markup (names and
    questions show as written, brackets included). A pipe or file gets ``PIPE_WIDTH`` columns unless
    ``COLUMNS`` is set: rich's default of 80 folds the tables into slivers."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, markup=False, width=PIPE_WIDTH if wide else None)


def print_lines(lines: Iterable[str], console: Console, style: str | None = None) -> None:
    """Lines of ``analysis.report`` (made printable there), as written: no markup."""
    for line in lines:
        console.print(line, markup=False, style=style)


def print_tables(
    rows: Sequence[SummaryRow], results: Sequence[QuestionResult], console: Console
) -> None:
    """The per-category table (when questions have categories) and the per-question one."""
    categories = category_table(rows)
    if categories is not None:
        console.print(categories)
    console.print(question_table(results, width=console.width))


def compare(
    results: Sequence[QuestionResult], names: Sequence[str] | None, reward_mode: str = "count"
) -> PairedComparison | None:
    """The ``--compare A B`` comparison, or None when not asked for."""
    if not names:
        return None
    try:
        return paired_comparison(results, names[0], names[1], reward_mode)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc


def store_inputs(url: str, reward_mode: str | None) -> tuple[Inputs, list[cost.RunCost], Metadata]:
    """A shared store's campaign (``run --store``) as one input, with each machine's ledger costs
    and its metadata; ``UsageError`` when it holds no results."""
    import asyncio

    from aidanbench.record.results import results_of
    from aidanbench.runner.campaign import read_campaign, redacted

    found = asyncio.run(read_campaign(url))
    if not found.lines:
        raise UsageError(f"no question results in the store {printable(redacted(url))}")
    metadata = found.metadata
    results, notes = results_of(found.lines, metadata)
    recorded = metadata.spec.reward_mode if metadata.spec else None
    mode = reward_mode or (recorded if recorded in REWARD_MODES else "count")
    costs = [cost.run_cost(machine, []) for machine in found.machines.values()]
    return Inputs(results, mode, notes), costs, metadata


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench report``."""
    if (args.store is None) == (not args.paths):
        raise UsageError("name run directories or results files, or --store URL (one of them)")
    if args.store is not None:
        inputs, costs, _ = store_inputs(args.store, args.reward_mode)
    else:
        inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
        costs = [cost.read_run_cost(p) for p in args.paths]
    results = inputs.results
    rows = summarise(results, inputs.reward_mode)
    comparison = compare(results, args.compare, inputs.reward_mode)
    if args.json:
        payload = report_payload(
            results,
            rows,
            comparison=comparison,
            reward_mode=inputs.reward_mode,
            notes=inputs.notes,
            question_fields=cost.question_fields(results),
            run_fields=merged_fields(cost.run_fields(results), truncation_fields(rows, args.paths)),
        )
        payload["cost"] = cost.cost_payload(costs)
        print(json.dumps(payload, indent=2))
        return 0
    console = make_console()
    render_summary(rows, console)
    print_lines(headline_lines(rows, results), console)
    print_lines(cap_lines(rows), console)
    print_lines(judging_lines(rows), console)
    print_tables(rows, results, console)
    print_lines(error_lines(results), console)
    print_lines(truncation_lines(rows, args.paths), console)
    print_lines(cost.cost_lines(results, costs), console)
    if comparison is not None:
        console.print("\n" + printable(comparison_text(comparison)), markup=False)
    print_lines(warning_lines([*inputs.notes, *warnings(results)]), console, style="yellow")
    return 0


def add_common_arguments(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    """``PATH…``, ``--json`` and ``--reward-mode``, shared with ``rescore`` and ``plot``
    (``optional``: for ``report --store``)."""
    parser.add_argument(
        "paths",
        nargs="*" if optional else "+",
        metavar="PATH",
        help="run directories or results files in the original AidanBench schema; several "
        "are reported together, their questions paired by text",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_reward_mode_argument(parser)


def add_reward_mode_argument(parser: argparse.ArgumentParser) -> None:
    """``--reward-mode``: the headline, by default the one the runs were started with."""
    parser.add_argument(
        "--reward-mode",
        choices=REWARD_MODES,
        help="headline: valid answers (count) or their novelty sum; default: the mode the "
        "run directories recorded, count for results files",
    )


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """``--store URL``: the campaign a shared store holds (``run --store``)."""
    parser.add_argument(
        "--store",
        metavar="URL",
        help="read the whole campaign from this PostgreSQL store (run --store) instead of "
        "paths; password from PGPASSWORD or ~/.pgpass",
    )


def register(subparsers: Any) -> None:
    """Add the ``report`` command."""
    parser = add_command(
        subparsers,
        "report",
        (
            "Summary per model and temperature (score, novelty sum, means, format "
            "adherence, stop reasons, tokens), per-question scores, errored questions and "
            "warnings (judge, embedding model, prompts or thresholds that differ). With "
            "repeats, the headline is the mean per repeat with a bootstrap interval. "
            f"Counting: {COUNTING}."
        ),
    )
    add_common_arguments(parser, optional=True)
    add_store_argument(parser)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="paired difference A − B of the headline over questions both models finished",
    )
    parser.set_defaults(handler=run)
