"""A look-ahead withdrawn unsent when its answer fails first.

``generate_next`` asks for answer i+1 while answer i is scored. When answer i fails, that
request was asked for nothing: under a rate limit it costs a request of the rate and its
dollars. So a scorer that fails answer i says so (``Verdicts.fail``), and the look-ahead's
request, while it still waits for its endpoint's slot or for its next attempt, is
withdrawn (``Withdrawn``) before it is sent. One already sent is discarded as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Turn = tuple[str, int, str]
"""An answer being scored: its question, index and text."""

FAILURES_KEPT = 1024
"""Failures kept for look-aheads not asked yet: a score found without a request (a
cached vector) can fail an answer before its look-ahead starts."""

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
        """The running task's requests are withdrawn while they wait for a slot once
        answer ``turn`` fails."""
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
