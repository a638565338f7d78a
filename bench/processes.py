"""What the benchmarks share about their child processes: a stand-in provider served from
a child (``bench.serve``, ``bench.lab_serve``) and the parent/child split of a
benchmark's own command line (the parent starts a fresh child per measurement)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The checkout, where ``python -m bench.…`` finds the benchmarks."""


@contextmanager
def served(module: str, args: Sequence[str], *, kill: bool = False) -> Iterator[str]:
    """``python -m module args`` in a child process that prints its base URL on its first
    line and serves until its stdin closes; yields the URL.

    At the end its stdin is closed and it is waited for (a minute at most), or with
    ``kill`` it is killed: a server holding requests that never finish.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        if kill:
            proc.kill()
        else:
            assert proc.stdin is not None
            proc.stdin.close()
        proc.wait(timeout=60)


def parent_or_child(
    args: argparse.Namespace,
    parent: Callable[[argparse.Namespace], None],
    child: Callable[[argparse.Namespace], None],
) -> None:
    """Run ``child`` when the command line names one (``--child``), else ``parent``."""
    (child if args.child else parent)(args)
