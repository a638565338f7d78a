"""A look-ahead withdrawn unsent when its answer fails first.

``generate_next`` asks for answer i+1 while answer i is scored, as if answer i were valid.
When answer i fails, that request was asked for nothing: under a provider's rate limit
it costs a request of the rate and its dollars. So the scorers say when answer i fails
or errs (``Verdicts.fail``), and a look-ahead request that is still waiting for its
endpoint's slot then, or for its next attempt, is withdrawn (``Withdrawn``) before it is
sent. One already sent is answered, and discarded as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Turn = tuple[str, int, str]
"""An answer being scored: its question, index and text."""

FAILURES_KEPT = 1024
"""Failures kept for look-aheads not yet asked: a score known without a request (a
cached vector) can fail the answer before its look-ahead starts."""


class Withdrawn(BaseException):
    """A request withdrawn before it was sent. Not an ``Exception``: no retry or error
    record between the limiter and the look-ahead may take it for a failed request."""


_withdraw: ContextVar[asyncio.Future[None] | None] = ContextVar("withdraw", default=None)


def withdrawal() -> asyncio.Future[None] | None:
    """What withdraws the requests of the running task (``Verdicts.unless_failed``)."""
    return _withdraw.get()


class Verdicts:
    """The failing answers of one services object's questions, told to their look-aheads."""

    def __init__(self) -> None:
        self._watched: dict[Turn, asyncio.Future[None]] = {}
        self._failed: dict[Turn, None] = {}

    def fail(self, turn: Turn) -> None:
        """Answer ``turn`` fails (or its scoring failed): its look-ahead is not needed."""
        watched = self._watched.get(turn)
        if watched is not None:
            if not watched.done():
                watched.set_result(None)
            return
        self._failed[turn] = None
        if len(self._failed) > FAILURES_KEPT:
            del self._failed[next(iter(self._failed))]

    @contextmanager
    def unless_failed(self, turn: Turn) -> Iterator[None]:
        """Requests made inside, by this task, are withdrawn while they wait for a slot
        once answer ``turn`` fails."""
        failed = asyncio.get_running_loop().create_future()
        if self._failed.pop(turn, 0) is None:
            failed.set_result(None)
        self._watched[turn] = failed
        token = _withdraw.set(failed)
        try:
            yield
        finally:
            _withdraw.reset(token)
            if self._watched.get(turn) is failed:
                del self._watched[turn]
