"""``aidanbench view``: one self-contained HTML report of run directories and results files.

The page (``aidanbench.analysis.view``) opens from ``file://`` with no network, so it can
be mailed or attached to an issue as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aidanbench.analysis.view import write_view
from aidanbench.cli import add_command
from aidanbench.core.errors import UsageError

DEFAULT_OUTPUT = "report.html"


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench view``: check every input, then write and print the page."""
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"output {out} is a directory; give a file name such as {out}/report.html")
    try:
        written = write_view([Path(p) for p in args.paths], out)
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from exc
    print(written)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``view`` command."""
    parser = add_command(
        subparsers,
        "view",
        (
            "Write one self-contained HTML file (no network needed) with the leaderboard, "
            "a model x question heat map whose cells open each chain of answers, a paired "
            "comparison of two models, and filters by question text and stop reason."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directory or results file in the original AidanBench schema (repeatable)",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="FILE",
        help=f"HTML file to write ({DEFAULT_OUTPUT})",
    )
    parser.set_defaults(handler=run)
