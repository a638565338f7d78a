"""Entry point of the ``aidanbench`` console script.

Each command module's ``register(subparsers)`` adds a parser whose ``handler(args) -> int`` does the
work; a ``UsageError`` is one line on stderr with exit status 2, and nothing written before it is
removed. Only the command being run is imported (the others pull in LangGraph, the OpenAI client and
numpy); the top-level parser lists them from ``SUMMARIES``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from aidanbench.cli import COMMANDS, SUMMARIES
from aidanbench.core.errors import UsageError, printable


class VersionAction(argparse.Action):
    """``--version``: the installed package's version (looked up only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import version

        print(f"aidanbench {version('aidanbench')}")
        parser.exit(0)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, only that command's module is imported (``None``: every one)."""
    parser = OneLineParser(
        prog="aidanbench",
        description="AidanBench creativity benchmark as a LangGraph workflow.",
    )
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    for name in COMMANDS:
        if only is None or name == only:
            importlib.import_module(f"aidanbench.cli.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=SUMMARIES[name])
    return parser


def command_named(argv: Sequence[str]) -> str:
    """The command ``argv`` asks for, "" when none (the top-level parser's only option is
    ``--help``)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=command_named(words))
    args = parser.parse_args(words)
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        print(f"aidanbench {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    return status


def entry() -> NoReturn:
    """The console script: ``main``, then the exit.

    Whatever a run leaves in memory is garbage once ``main`` returns, and the interpreter's
    last collections walked all of it as the process ended: 0.6-0.8 s after Ctrl-C at 5,040
    chains (docs/performance.md, "Thousands of chains"). Frozen, it is left to the exit:
    atexit handlers and threads' joins run as before, and objects in reference cycles go
    unfinalised, as Python never promised them at exit."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    entry()
