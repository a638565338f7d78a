"""What the benchmarks share about their child processes: a stand-in provider served from
a child (``bench.serve``, ``bench.lab_serve``) and the parent/child split of a
benchmark's own command line (the parent starts a fresh child per measurement)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from aidanbench.cli.demo import served as served_from

ROOT = Path(__file__).resolve().parents[1]
"""The checkout, where ``python -m bench.…`` finds the benchmarks."""


def served(module: str, args: Sequence[str], *, kill: bool = False) -> AbstractContextManager[str]:
    """``python -m module args`` from the checkout, served as the demo serves the published
    run (``cli.demo.served``)."""
    return served_from(module, args, cwd=ROOT, kill=kill)


def parent_or_child(
    args: argparse.Namespace,
    parent: Callable[[argparse.Namespace], None],
    child: Callable[[argparse.Namespace], None],
) -> None:
    """Run ``child`` when the command line names one (``--child``), else ``parent``."""
    (child if args.child else parent)(args)
