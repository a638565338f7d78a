"""``aidanbench forget RUN --model M``: take a model out of a run directory.

Its threads, results lines and ``metadata.json`` entries are removed, all or nothing
(``runner.forget``), so no view shows it again, and ``report.html`` is rewritten (removed when
nothing is left); the usage ledger keeps what its requests cost, because that money was spent.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any

from aidanbench.cli import add_command
from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files


def register(subparsers: Any) -> None:
    """Add ``forget`` to the command line."""
    p = add_command(
        subparsers,
        "forget",
        "Remove every trace of a model from a run directory: its question "
        "threads, its lines in the results files and its metadata entries. The usage "
        "ledger keeps what its requests cost. Refused while a run uses the directory.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "-m",
        "--model",
        action="append",
        required=True,
        metavar="MODEL",
        help="the model to remove (repeatable)",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Forget the models, then say what went, what the ledger keeps and where the page is."""
    files.refuse_if_in_use(args.run_dir)
    from aidanbench.runner.forget import forget

    try:
        done = forget(args.run_dir, args.model)
    except (OSError, sqlite3.Error) as exc:
        try:
            made = files.pending_forget(args.run_dir)
        except ValueError:
            made = []
        raise UsageError(
            f"cannot write in {printable(str(args.run_dir))} ({printable(str(exc))}): "
            + (
                f"{', '.join(printable(m) for m in made)} forgotten, the rest (threads, page)"
                if made
                else "nothing was forgotten"
            )
            + "; run the same command again once it can be written"
        ) from None
    for model in done.models:
        spent = "unknown" if model.dollars is None else f"${model.dollars:.4f}"
        earlier = " (a forget cut short, finished now)" if model.earlier else ""
        print(
            f"forgot {printable(model.model)}{earlier}: {model.threads} thread(s), "
            f"{model.lines} question line(s); its {model.ledger_lines} usage-ledger line(s) "
            f"({spent}) are kept: that money was spent"
        )
    from aidanbench.record.metadata import read_metadata

    metadata = read_metadata(args.run_dir)
    server = metadata.server if metadata else None
    if server:
        print(
            f"its threads on the LangGraph server {printable(str(server))} are not touched "
            "(the server keeps them, keyed by their scoring settings)"
        )
    if done.page_removed:
        print(f"report: {printable(str(args.run_dir / files.REPORT))} removed (no results left)")
    elif done.page is not None:
        print(f"report: {printable(str(done.page))}")
    return 0
