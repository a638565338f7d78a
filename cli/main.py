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

from aidanbench.cli.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (used by tests and by ``main``)."""
    from aidanbench.cli import commands

    parser = argparse.ArgumentParser(
        prog="aidanbench",
        description="AidanBench creativity benchmark as a LangGraph workflow.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
