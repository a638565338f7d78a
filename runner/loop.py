"""The event loop the command line runs on: asyncio's own.

uvloop was used here until the lab-scale benchmark (``python -m bench.lab --variants
default,std-loop``) measured it: no faster on the published replay (33.9 s against
34.7 s) nor on the 630-chain run (85.0 s against 79.4 s), below the 10% an optimisation
must buy to be kept, so the command line no longer depends on it. ``run`` stays the one
place that decides the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``; Ctrl-C still raises ``KeyboardInterrupt`` after cancelling
    ``main``."""
    with asyncio.Runner() as runner:
        return runner.run(main)
