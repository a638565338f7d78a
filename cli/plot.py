"""``aidanbench plot``: PNG charts of run directories and original-schema results files
(``aidanbench.analysis.plots``), with ``cost_vs_score.png`` for a run directory with known dollars;
their paths are printed one per line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aidanbench.analysis.plots import (
    COST_CHART,
    plot_all,
    plot_cost_vs_score,
    require_matplotlib,
    select_question,
)
from aidanbench.cli import add_command
from aidanbench.cli.report import add_reward_mode_argument, one_line, read_inputs
from aidanbench.core.errors import UsageError


def output_dir(text: str) -> Path:
    """``text`` as a directory, created when missing; a ``UsageError`` when impossible."""
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot use {path} as the output directory: {one_line(exc)}") from exc
    return path


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench plot``."""
    require_matplotlib()
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    results = inputs.results
    for note in inputs.notes:
        print(f"warning: {note}", file=sys.stderr)
    try:
        select_question(results, args.question)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc
    out = output_dir(args.out)
    try:
        written = plot_all(results, out, args.question, inputs.reward_mode)
        written += [p for p in [plot_cost_vs_score(results, out / COST_CHART)] if p]
    except OSError as exc:
        raise UsageError(f"cannot write charts to {out}: {one_line(exc)}") from exc
    for path in written:
        print(path)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``plot`` command."""
    parser = add_command(
        subparsers,
        "plot",
        (
            "Write scores.png (headline per model: score, or novelty sum under that reward "
            "mode; mean per repeat with its interval), questions.png (per-question heat map), "
            "trajectory.png (coherence and novelty along one question's answers) and "
            "stop_reasons.png (why questions ended) into DIR."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directories or results files in the original schema; several are drawn "
        "together, their questions paired by text",
    )
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="directory for the PNGs")
    parser.add_argument(
        "--question",
        metavar="TEXT_OR_INDEX",
        help="trajectory question: number as in 'report' (5 or Q5), exact text or a "
        "unique fragment (default: the question with the longest chain)",
    )
    add_reward_mode_argument(parser)
    parser.set_defaults(handler=run)
