"""A look-ahead withdrawn unsent when its answer fails first.

``generate_next`` asks for answer i+1 while answer i is scored; when answer i fails, that
request costs a slot of the rate and its dollars for nothing. So a scorer that fails answer i
says so (``Verdicts.fail``), and the look-ahead's request, while it still waits for a slot or
its next attempt, is withdrawn unsent (``Withdrawn``). One already sent is discarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Turn = tuple[str, int, str]
"""An answer being scored: its question, index and text."""

FAILURES_KEPT = 1024
"""Failures kept for look-aheads not asked yet: a cached score can fail an answer before its
look-ahead starts."""

withdraw: ContextVar[asyncio.Future[None] | None] = ContextVar("withdraw", default=None)
"""Done when the running task's requests are to be withdrawn (``Verdicts.unless_failed``)."""


class Withdrawn(BaseException):
    """A request withdrawn before it was sent. Not an ``Exception``: no retry or error
    record between the limiter and the look-ahead may take it for a failed request."""


class Verdicts:
    """The failing answers of one services object's questions, told to their look-aheads."""

    def __init__(self) -> None:
        self._watched: dict[Turn, asyncio.Future[None]] = {}
        self._failed: dict[Turn, None] = {}

    def fail(self, turn: Turn) -> None:
        """Answer ``turn`` fails: its look-ahead is not needed."""
        watched = self._watched.get(turn)
        if watched is None:
            self._failed[turn] = None
            if len(self._failed) > FAILURES_KEPT:
                del self._failed[next(iter(self._failed))]
        elif not watched.done():
            watched.set_result(None)

    @contextmanager
    def unless_failed(self, turn: Turn) -> Iterator[None]:
        """Withdraw the running task's waiting requests once answer ``turn`` fails."""
        failed = asyncio.get_running_loop().create_future()
        if self._failed.pop(turn, 0) is None:
            failed.set_result(None)
        self._watched[turn] = failed
        token = withdraw.set(failed)
        try:
            yield
        finally:
            withdraw.reset(token)
            if self._watched.get(turn) is failed:
                del self._watched[turn]
