"""Entry point of the ``aidanbench`` console script.

Each command lives in its own module exposing ``register(subparsers)``, which adds a
parser whose ``handler(args) -> int`` does the work. Errors a user can fix are raised as
``UsageError`` and printed as one line on stderr with exit status 2; nothing written
before them is removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from aidanbench.cli.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (used by tests and by ``main``)."""
    from aidanbench.cli import commands

    parser = OneLineParser(
        prog="aidanbench",
        description="AidanBench creativity benchmark as a LangGraph workflow.",
    )
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    for module in commands():
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        print(f"aidanbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
