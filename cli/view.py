"""``aidanbench view``: one self-contained HTML report of run directories and results files. The
page (``aidanbench.analysis.view``) opens from ``file://`` with no network, so it can be mailed or
attached to an issue as it is."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aidanbench.analysis.view import Source, write_page, write_view
from aidanbench.cli import add_command
from aidanbench.cli.report import add_store_argument
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.thresholds import Thresholds
from aidanbench.record import files


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench view``: check every input, then write and print the page."""
    if (args.store is None) == (not args.paths):
        raise UsageError("name run directories or results files, or --store URL (one of them)")
    out = output(args)
    if out.is_dir():
        raise UsageError(f"output {out} is a directory; give a file name such as {out}/report.html")
    if args.store is not None:
        print(write_page([store_source(args.store)], out))
        return 0
    try:
        written = write_view([Path(p) for p in args.paths], out)
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from exc
    except OSError as exc:  # a run directory that cannot be written, a full disk
        raise UsageError(f"cannot write the page to {printable(str(out))}: {exc.strerror}") from exc
    print(written)
    return 0


def output(args: argparse.Namespace) -> Path:
    """``-o FILE``, else the run directory's own page (``report.html``) when the page is of
    one run directory: nothing is written into the working folder unasked."""
    if args.output is not None:
        return Path(args.output)
    if args.store is None and len(args.paths) == 1 and Path(args.paths[0]).is_dir():
        return Path(args.paths[0]) / files.REPORT
    raise UsageError(
        "name the page to write with -o FILE (without it, the page of one run directory "
        f"is written into that directory, as {files.REPORT})"
    )


def store_source(url: str) -> Source:
    """The campaign in a shared store (``run --store``) as one source of the page."""
    from aidanbench.cli.report import store_inputs
    from aidanbench.runner.campaign import redacted

    inputs, _, metadata = store_inputs(url, None)
    name = redacted(url).rsplit("/", 1)[-1].partition("?")[0] or "store"
    return Source(Path(name), inputs.results, metadata, Thresholds(), tuple(inputs.notes))


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
        nargs="*",
        metavar="PATH",
        help="run directory or results file in the original AidanBench schema (repeatable)",
    )
    add_store_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=f"HTML file to write (default: RUN_DIR/{files.REPORT} for one run directory; "
        "needed for anything else)",
    )
    parser.set_defaults(handler=run)
