"""Long waits of an endpoint's requests, recorded while they last so they can be shown.

A request can wait on purpose: the endpoint's ``Retry-After``, a back-off after a
failure (``services.retry``), the ``--requests-per-minute`` window
(``services.limits``). A wait of a few minutes with nothing on screen looks like a hung
run, so every such wait sleeps through its endpoint's ``Waits``, which records each one
longer than ``VISIBLE_S`` while it lasts. The record is read, not pushed: the services
layer does not know who shows progress, and whoever does (``runner.progress``: the live
table, the log) reads it through ``EndpointLimiter.stats`` as often as it draws.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass

VISIBLE_S = 5.0
"""Waits longer than this are recorded, and so shown; shorter ones are ordinary
back-offs, over before anyone could read about them."""


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
    """One endpoint's waits longer than ``VISIBLE_S``: those going on, and a count.

    Written on the event loop, read from any thread (the live table draws from its own):
    a reader copies the current waits in one step and never changes them.
    """

    def __init__(self) -> None:
        self.started = 0
        """Waits longer than ``VISIBLE_S`` started so far."""
        self.capped: tuple[float, float] | None = None
        """The longest ``Retry-After`` the endpoint asked for above the cap, and the cap
        waited instead; None while none was."""
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
