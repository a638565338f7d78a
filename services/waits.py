"""Long waits of an endpoint's requests, recorded while they last so they can be shown.

A wait of minutes (``Retry-After``, a back-off, the ``--requests-per-minute`` window) with
nothing on screen looks like a hung run, so every such wait sleeps through its endpoint's
``Waits``. The record is read, not pushed: the services layer does not know who shows
progress, and whoever does (``runner.progress``) reads it through ``EndpointLimiter.stats``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass

VISIBLE_S = 5.0
"""Waits longer than this are recorded and shown; shorter ones are over before anyone reads."""


@dataclass(frozen=True)
class WaitNow:
    """The longest wait of an endpoint going on now (``Waits.now``)."""

    cause: str
    """Why it waits, for people: ``Retry-After of a 429``, ``back-off after a 503``…"""
    seconds: float
    """How long it was to wait, all of it."""
    left: float
    """Seconds left of it."""
    requests: int
    """Requests of the endpoint waiting longer than ``VISIBLE_S`` now, this one included."""


class Waits:
    """One endpoint's waits longer than ``VISIBLE_S``: those going on, and a count. Written on
    the event loop, read from any thread (the live table draws from its own thread): a reader
    copies them in one step, never changes them.
    """

    def __init__(self) -> None:
        self.started = 0
        """Waits longer than ``VISIBLE_S`` started so far."""
        self.capped: tuple[float, float] | None = None
        """The longest ``Retry-After`` asked above the cap, and the cap waited instead (None:
        none was)."""
        self._current: dict[int, tuple[float, float, str]] = {}
        self._ids = itertools.count()

    async def sleep(self, seconds: float, cause: str) -> None:
        """Sleep ``seconds``, recorded with ``cause`` while it lasts when it is long."""
        if seconds <= VISIBLE_S:
            await asyncio.sleep(seconds)
            return
        key = next(self._ids)
        self._current[key] = (time.monotonic() + seconds, seconds, cause)
        self.started += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            del self._current[key]

    def asked_above_cap(self, asked: float, granted: float) -> None:
        """The endpoint asked for ``asked`` seconds and gets ``granted``, the cap."""
        if self.capped is None or asked > self.capped[0]:
            self.capped = (asked, granted)

    def now(self) -> WaitNow | None:
        """The wait with the most time left, or None when no long wait goes on."""
        current = list(self._current.values())
        if not current:
            return None
        until, seconds, cause = max(current)
        return WaitNow(cause, seconds, max(0.0, until - time.monotonic()), len(current))
