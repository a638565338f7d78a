"""``aidanbench plot``: PNG charts of a run directory or an original-schema results file.

Writes ``scores.png``, ``questions.png``, ``trajectory.png`` and ``stop_reasons.png``
(see ``aidanbench.analysis.plots``), and for a run directory with known dollars
``cost_vs_score.png`` (``aidanbench.analysis.cost``), and prints their paths, one per line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import COST_CHART, plot_cost_vs_score
from aidanbench.analysis.plots import plot_all, select_question
from aidanbench.cli.errors import UsageError
from aidanbench.cli.report import load_results, one_line


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
    results = load_results(args.path)
    try:
        select_question(results, args.question)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc
    out = output_dir(args.out)
    try:
        written = plot_all(results, out, args.question)
        written += [p for p in [plot_cost_vs_score(args.path, out / COST_CHART)] if p]
    except OSError as exc:
        raise UsageError(f"cannot write charts to {out}: {one_line(exc)}") from exc
    for path in written:
        print(path)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``plot`` command."""
    parser = subparsers.add_parser(
        "plot",
        help="draw PNG charts of scores, per-question scores, a trajectory and stop reasons",
        description=(
            "Write scores.png (total per model), questions.png (per-question heat map), "
            "trajectory.png (coherence and novelty along one question's answers) and "
            "stop_reasons.png (why questions ended) into DIR."
        ),
    )
    parser.add_argument(
        "path", metavar="PATH", help="run directory or results file in the original schema"
    )
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="directory for the PNGs")
    parser.add_argument(
        "--question",
        metavar="TEXT_OR_INDEX",
        help="trajectory question: number as in 'report' (5 or Q5), exact text or a "
        "unique fragment (default: the question with the longest chain)",
    )
    parser.set_defaults(handler=run)
