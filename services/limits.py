"""Per-endpoint request limits shared by every question of a run.

Raising the number of questions in flight must not turn into a storm of rate-limit
errors, so each endpoint (scheme, host and port) gets one limiter: at most
``max_in_flight`` requests at once and, when set, at most ``per_minute`` request starts
in any 60-second window.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class EndpointLimiter:
    """A concurrency cap plus an optional sliding-window request rate."""

    def __init__(self, max_in_flight: int, per_minute: float | None = None) -> None:
        self.max_in_flight = max_in_flight
        self.per_minute = per_minute
        self._slots = asyncio.Semaphore(max_in_flight)
        self._starts: deque[float] = deque()
        self._rate_lock = asyncio.Lock()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one request slot, waiting for the rate window when needed."""
        async with self._slots:
            if self.per_minute is not None:
                await self._wait_for_rate()
            yield

    async def _wait_for_rate(self) -> None:
        assert self.per_minute is not None
        capacity = max(1, int(self.per_minute))
        async with self._rate_lock:
            while True:
                now = time.monotonic()
                while self._starts and now - self._starts[0] >= 60.0:
                    self._starts.popleft()
                if len(self._starts) < capacity:
                    self._starts.append(now)
                    return
                await asyncio.sleep(60.0 - (now - self._starts[0]))
