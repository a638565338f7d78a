"""The event loop the command line runs on.

A run is one process driving many questions, and at short latencies it is CPU-bound in
the event loop: every turn schedules a dozen tasks and waits on several sockets. uvloop
does that work for less CPU (README, Performance, has the measurements;
``python -m bench.speed --standard-loop`` compares). The command line uses uvloop where it
exists; on Windows, where it does not, the standard loop runs the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or ``None`` (the standard loop) where it is missing."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest loop available; Ctrl-C still raises
    ``KeyboardInterrupt`` after cancelling ``main``."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
