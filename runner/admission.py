"""How many questions a session keeps in flight: the one place the number is decided.

A question spends nearly all its time waiting on HTTP, so the more chains in flight the
sooner a run ends, up to what the endpoints take, which each endpoint's adaptive limit finds
(``services.limits``). So no user guesses a number: unless one is given (``--concurrency N``),
every question may be in flight, as long as:

* on this machine, the chains' memory (``CHAIN_BYTES`` plus ``ANSWER_BYTES`` per answer,
  counted as answers come) stays within ``memory_budget()``, so short chains all fit where
  long ones would not;
* on a LangGraph server (``--server``), ``REMOTE_IN_FLIGHT`` at most: this client holds one
  connection per run it follows, from the SDK's pool.

When the machine or the endpoints are what a run waits on, every chain advancing a turn at a
time would finish none for minutes; so an adaptive ``Admission`` starts new chains only while
the event loop keeps up and no request waits for a slot, and started chains go first.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from aidanbench.services.limits import Gate

CHAIN_BYTES = 128 * 1024
"""Memory a chain in flight holds before its answers: its state, prompt and step, as
``bench.in_flight_memory`` measures it, rounded up (docs/performance.md, "Memory per question
in flight")."""

ANSWER_BYTES = 20 * 1024
"""Memory each answer adds: the answer, its vector, its place in the next prompt."""

MEMORY_BUDGET_BYTES = 2**30
"""Memory the chains in flight may hold together, at most (a quarter of the machine's
physical memory, when that is less)."""

REMOTE_IN_FLIGHT = 64
"""Runs followed at once on a LangGraph server. The SDK's HTTP pool has 100 connections and
fails a request that waits 5 s for one; each run followed holds one (its event stream), and
the rest are left for the thread lookups and state reads around them."""


def chains_in_flight(requested: int | None, chains: int, *, remote: bool = False) -> int:
    """The most questions kept in flight: ``requested`` when given, else all ``chains``
    (``remote``: up to ``REMOTE_IN_FLIGHT``); locally the memory budget decides the rest."""
    if requested is not None:
        return requested
    return max(1, min(chains, REMOTE_IN_FLIGHT) if remote else chains)


def admission(
    requested: int | None, chains: int, *, remote: bool = False, share: int = 1
) -> Admission:
    """The session's gate: adaptive unless a number was asked for or a LangGraph server runs
    the chains (its workers share its CPU); adaptive, within 1/``share`` of the memory budget
    (one of that many worker processes)."""
    most = chains_in_flight(requested, chains, remote=remote)
    if requested is not None or remote:
        return Admission(most)
    return Admission(most, adaptive=True, budget=memory_budget() // max(1, share))


def memory_budget() -> int:
    """``MEMORY_BUDGET_BYTES``, or a quarter of physical memory when that is less."""
    physical = physical_memory()
    if physical is None:
        return MEMORY_BUDGET_BYTES
    return min(MEMORY_BUDGET_BYTES, physical // 4)


def physical_memory() -> int | None:
    """The machine's physical memory in bytes, None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None


START_IN_FLIGHT = 64
"""Questions an adaptive session starts with before it has watched the event loop."""

WATCH_EVERY_S = 0.25
"""How often an adaptive session looks at the event loop's lag."""

LAG_LIMIT_S = 0.1
"""How late a timer may fire before the loop counts as behind (its ready work outruns the CPU)."""

BACKLOG_LIMIT = 1.0
"""Requests waiting at an endpoint, in units of its limit, above which the endpoints count
as behind: each new chain would make every chain wait longer."""

GROW = 1.25
"""What the window is multiplied by (plus one) each look at a loop that keeps up while
questions wait: from 64 to 5,000 in about 20 looks."""

SHRINK = 0.8
"""What the window is multiplied by each look at a loop that is behind."""

FLOOR = 8
"""The least window an adaptive session shrinks to."""


class Admission(Gate):
    """The gate questions pass to start, in arrival order: fixed, a semaphore of ``most``;
    adaptive, a window following the loop and the endpoints (``observe``), which never
    stops a started question. With a ``budget``, a question starts only while the chains
    in flight leave it room (``held``)."""

    def __init__(
        self,
        most: int,
        *,
        adaptive: bool = False,
        budget: int | None = None,
        start: int = START_IN_FLIGHT,
        every: float | None = WATCH_EVERY_S,
    ) -> None:
        super().__init__()
        self.most = max(1, most)
        self.adaptive = adaptive
        self.budget = budget
        """Bytes the chains in flight may hold together (None: no limit); at least one
        chain is let in whatever it holds."""
        self.window = float(min(self.most, start) if adaptive else self.most)
        """Questions let in flight now (whole part); started ones above it carry on."""
        self.every = every
        """Seconds between two looks at the loop (``watch``); None: only ``observe``."""
        self.answers = 0
        """Answers the chains in flight hold (``enter``, ``answered``, ``leave``)."""
        self.peak = 0

    def held(self) -> int:
        """Bytes the chains in flight hold, as ``CHAIN_BYTES`` and ``ANSWER_BYTES`` count."""
        return self.in_flight * CHAIN_BYTES + self.answers * ANSWER_BYTES

    def _room(self) -> bool:
        if self.in_flight >= int(self.window):
            return False
        if self.budget is None or self.in_flight == 0:
            return True
        return self.held() + CHAIN_BYTES <= self.budget

    async def enter(self, answers: int = 0) -> None:
        """Wait for room, in arrival order, for a chain holding ``answers`` (one resumed)."""
        await self._take()
        self.peak = max(self.peak, self.in_flight)
        self.answers += answers

    def answered(self) -> None:
        """A chain in flight holds one more answer."""
        self.answers += 1

    def leave(self, answers: int = 0) -> None:
        """A question stopped, holding ``answers``: its room goes to the next in line."""
        self.answers -= answers
        self._give()

    def observe(self, lag: float, backlog: float = 0.0) -> None:
        """A timer fired ``lag`` seconds late and ``backlog`` requests (in units of the busiest
        endpoint's limit) wait for a slot. Behind, the window shrinks; while any request
        waits it holds (more chains would only queue); else, with questions waiting, it
        grows."""
        if not self.adaptive:
            return
        if lag > LAG_LIMIT_S or backlog > BACKLOG_LIMIT:
            self.window = max(min(float(FLOOR), self.window), self.window * SHRINK)
        elif self.queued and backlog == 0 and self.in_flight >= int(self.window):
            self.window = min(float(self.most), self.window * GROW + 1)  # the window, not memory
            self._wake()

    async def watch(self, backlog: Callable[[], float] = lambda: 0.0) -> None:
        """``observe`` the loop's lag and ``backlog`` every ``every`` seconds, until cancelled."""
        loop = asyncio.get_running_loop()
        while self.adaptive and self.every is not None:
            asked = loop.time()
            await asyncio.sleep(self.every)
            self.observe(loop.time() - asked - self.every, backlog())
