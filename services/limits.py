"""Per-endpoint request limits shared by every question, model and role of a run.

No user can know how many requests an endpoint takes at once: it depends on the provider's tier
and load, and a fixed number is either too low (a multi-model run waits on its own limiter) or
too high (a 429 storm). So each endpoint (scheme, host and port) gets one limiter whose
in-flight limit adapts as TCP finds a link's capacity (docs/performance.md):

* while requests succeed with the limit in use, it grows by one per success (slow start) until
  the first back-off, then by a tenth of itself per round trip (at least one), as Scalable TCP
  grows large windows: by one per round trip, growing back after a halving would take minutes;
* a request in flight ``ACCEPTED_AFTER_S`` counts as a success then, not at its answer:
  refusals come back at once and answers after seconds, so growth is paced by that, not by the
  slowest round trip;
* a rate-limit reply (429, or any error carrying ``Retry-After``) halves it, once per round
  trip: replies to requests started before the last halving neither halve it again nor count
  as successes;
* it never falls below one, nor exceeds ``ceiling`` (``--endpoint-concurrency``); an automatic
  ceiling (the default) doubles when the limit would grow past it, so it never binds by
  accident, as far as open files and memory leave room for every endpoint's connections
  (``reserve``, ``services.registry``);
* ``per_minute`` (``--requests-per-minute``) is a hard sliding-window rate on top.

Every attempt takes a slot (``services.retry``), so retries count against the limit and the
rate. Any other failure (a time-out, a 5xx) leaves the limit where it is. Every deliberate wait
sleeps through the limiter's ``waits``, so a long one is shown while it lasts
(``services.waits``). So is a model that stops answering: each attempt is held under the model
it asks (several judges of a panel may share a host), and one in flight far longer than that
model usually takes (``stalled_after``) is shown with its age, and its time-outs counted, while
nothing else would say why the run is quiet.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aidanbench.services.errors import is_timeout, retry_after, status_of
from aidanbench.services.lookahead import Withdrawn, withdraw
from aidanbench.services.waits import WaitNow, Waits

INITIAL_LIMIT = 64
"""Requests in flight an adaptive limiter starts with (or its ceiling, when lower). Slow start
doubles it per round trip, so a lower start costs round trips at the start of a run
(docs/performance.md); a provider taking fewer costs at most this many refusals once."""

GROWTH = 0.1
"""After the first back-off, the least each success adds: a tenth of the limit per round trip
once the limit is above ten (below, one per round trip)."""

ACCEPTED_AFTER_S = 0.5
"""A request in flight this long without a refusal counts as accepted for growth. Providers
refuse at once (a 429 comes back before any work is done) while an answer takes seconds, so
counting only answers would pace slow start by the slowest round trip."""

DECREASE_FACTOR = 0.5
"""What a rate-limit reply multiplies the limit by."""

STALLED_S = 15.0
"""An attempt in flight this long without an answer is shown as waiting on a model that may
have stopped answering (``Stalled``), unless the model usually takes longer."""

STALLED_FACTOR = 4.0
"""...or this many times the model's usual answer time (the median of its last
``USUAL_OF`` answers), when that is longer: a slow model is not a stopped one."""

USUAL_OF = 50
"""Answers whose median is a model's usual answer time."""


def stalled_after(usual: float | None) -> float:
    """Seconds in flight after which an attempt of a model usually answering in ``usual``
    seconds (None: not known yet) is shown as stalled."""
    return STALLED_S if usual is None else max(STALLED_S, STALLED_FACTOR * usual)


@dataclass(frozen=True)
class Stalled:
    """One model's attempts in flight at an endpoint for longer than ``stalled_after``."""

    model: str | None
    """The model they ask (None: not named, as an embeddings batch)."""
    requests: int
    oldest_s: float
    """How long the oldest has waited for its answer."""
    usual_s: float | None
    """The model's usual answer time here (None: it has not answered yet)."""
    timed_out: int
    """Its attempts at this endpoint that ended in a time-out so far."""


def is_rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is the endpoint asking for fewer requests (429 or ``Retry-After``)."""
    return status_of(exc) == 429 or retry_after(exc) is not None


@dataclass(frozen=True)
class EndpointStats:
    """What one endpoint's limiter has seen (``EndpointLimiter.stats``)."""

    limit: int
    """Requests it lets in flight now."""
    ceiling: int | None
    """The most it may ever let in flight (``--endpoint-concurrency``); None: automatic."""
    peak_limit: int
    """The highest limit it reached."""
    in_flight: int
    requests: int
    """Attempts started."""
    rate_limited: int
    """Attempts answered with a rate-limit reply (429 or ``Retry-After``)."""
    backoffs: int
    """Times the limit was cut."""
    per_minute: float | None
    adaptive: bool
    long_waits: int = 0
    """Waits longer than ``services.waits.VISIBLE_S`` started so far."""
    waiting: WaitNow | None = None
    """The longest of them going on now (None when none is)."""
    retry_after_capped: tuple[float, float] | None = None
    """The longest ``Retry-After`` asked above ``errors.RETRY_AFTER_LIMIT``, and the cap
    waited instead; None when none was."""
    timed_out: int = 0
    """Attempts that ended in a time-out (``request_timeout``)."""
    stalled: tuple[Stalled, ...] = ()
    """Per model, its attempts in flight now far longer than it usually takes."""


class _Accepted:
    """One request's early acceptance: its timer, and whether it has counted."""

    __slots__ = ("counted", "timer")

    def __init__(self) -> None:
        self.counted = False
        self.timer: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Gate:
    """Slots handed out in arrival order, safe to cancel: what an endpoint's requests and a
    session's questions (``runner.admission.Admission``) wait in. A subclass says when there is
    room (``_room``). A waiter cancelled while waiting stays in the line until ``_wake`` passes
    it (removing it would cost a pass over thousands of waiters at a Ctrl-C). A look-ahead's
    request in line is withdrawn when its answer fails meanwhile (``services.lookahead``)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.queued = 0
        """Waiters in line now (cancelled ones not counted)."""
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _room(self) -> bool:
        raise NotImplementedError

    async def _take(self) -> None:
        withdrawn = withdraw.get()
        if withdrawn is not None and withdrawn.done():
            raise Withdrawn
        if self.queued or not self._room():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self.queued += 1
            try:
                if withdrawn is None:
                    await waiter
                else:
                    await self._unless(waiter, withdrawn)
            except asyncio.CancelledError:
                self._leave_line(waiter)
                raise
        else:
            self.in_flight += 1

    async def _unless(self, waiter: asyncio.Future[None], withdrawn: asyncio.Future[None]) -> None:
        """Wait for ``waiter``'s slot, unless ``withdrawn`` comes first. A slot handed over in
        the same turn of the event loop is passed on: the request before it in line gives its
        slot back just before its caller reads the reply that fails the answer."""
        await asyncio.wait((waiter, withdrawn), return_when=asyncio.FIRST_COMPLETED)
        if not withdrawn.done():
            return
        self._leave_line(waiter)
        raise Withdrawn

    def _leave_line(self, waiter: asyncio.Future[None]) -> None:
        """A waiter gives up: a slot it was already handed goes to the next in line, else
        it stays in the line, cancelled, until ``_wake`` passes it."""
        if waiter.done() and not waiter.cancelled():
            self._give()
        else:
            waiter.cancel()
            self.queued -= 1

    def _give(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and (self._waiters[0].done() or self._room()):
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                self.queued -= 1
                waiter.set_result(None)


class EndpointLimiter(Gate):
    """An adaptive in-flight limit plus an optional sliding-window request rate, bound to no
    event loop (a waiter's future belongs to the loop it waits on)."""

    def __init__(
        self,
        max_in_flight: int,
        per_minute: float | None = None,
        *,
        adaptive: bool = True,
        initial: int = INITIAL_LIMIT,
        clock: Callable[[], float] | None = None,
        accepted_after: float | None = None,
        reserve: Callable[[int], int] | None = None,
    ) -> None:
        super().__init__()
        self.ceiling = max(1, max_in_flight)
        self.reserve = reserve
        """Asked for more slots for an automatic ceiling, how many it grants (None: fixed)."""
        self.per_minute = per_minute
        self.adaptive = adaptive
        self.clock = clock
        self.accepted_after = ACCEPTED_AFTER_S if accepted_after is None else accepted_after
        """``ACCEPTED_AFTER_S`` (``math.inf``: only an answer counts)."""
        self.limit = float(min(initial, self.ceiling) if adaptive else self.ceiling)
        self.threshold = float(self.ceiling) if reserve is None else math.inf
        """Where slow start ends (the limit after the last back-off)."""
        self.peak = self.limit
        self.requests = 0
        self.rate_limited = 0
        self.backoffs = 0
        self._window = 0
        """Counts back-offs: a reply to a request started in an earlier window is stale."""
        self._starts: deque[float] = deque()
        self.waits = Waits()
        """Long waits of this endpoint's requests, recorded while they last."""
        self.timed_out = 0
        self._flying: dict[int, tuple[str | None, float]] = {}
        """Each attempt in flight: the model it asks and when it took its slot."""
        self._answered: dict[str | None, deque[float]] = {}
        """Per model, how long its last ``USUAL_OF`` answers took."""
        self._timeouts: dict[str | None, int] = {}
        self._ids = itertools.count()

    @property
    def max_in_flight(self) -> int:
        """Requests let in flight now (the adaptive limit, whole)."""
        return max(1, int(self.limit))

    def stats(self) -> EndpointStats:
        """A snapshot of the limit and what the endpoint answered."""
        return EndpointStats(
            limit=self.max_in_flight,
            ceiling=self.ceiling if self.reserve is None else None,
            peak_limit=max(1, int(self.peak)),
            in_flight=self.in_flight,
            requests=self.requests,
            rate_limited=self.rate_limited,
            backoffs=self.backoffs,
            per_minute=self.per_minute,
            adaptive=self.adaptive,
            long_waits=self.waits.started,
            waiting=self.waits.now(),
            retry_after_capped=self.waits.capped,
            timed_out=self.timed_out,
            stalled=self._stalled(),
        )

    def _stalled(self) -> tuple[Stalled, ...]:
        """The models whose oldest attempt in flight waits past ``stalled_after`` (read from
        any thread: each record is copied in one step)."""
        now = self._now()
        oldest: dict[str | None, list[float]] = {}
        for model, started in list(self._flying.values()):
            oldest.setdefault(model, []).append(now - started)
        found = []
        for model, ages in oldest.items():
            usual = self._usual(model)
            late = [age for age in ages if age >= stalled_after(usual)]
            if late:
                timed_out = self._timeouts.get(model, 0)
                found.append(Stalled(model, len(late), max(late), usual, timed_out))
        return tuple(sorted(found, key=lambda s: -s.oldest_s))

    def _usual(self, model: str | None) -> float | None:
        times = sorted(self._answered.get(model, ()))
        return times[len(times) // 2] if times else None

    def _now(self) -> float:
        return self.clock() if self.clock is not None else time.monotonic()

    def tighten(self, ceiling: int | None, per_minute: float | None) -> None:
        """Apply another settings object's limits: the lower ones win, so whoever asked for
        less gets no more than that (a ceiling of None asks for no fixed one)."""
        if ceiling is None:
            ceiling = self.ceiling
        elif self.reserve is not None:
            self.reserve, self.ceiling = None, ceiling
        self.ceiling = min(self.ceiling, max(1, ceiling))
        self.limit = min(self.limit, float(self.ceiling))
        if not self.adaptive:
            self.limit = float(self.ceiling)
        if per_minute is not None:
            self.per_minute = (
                per_minute if self.per_minute is None else min(self.per_minute, per_minute)
            )

    @asynccontextmanager
    async def slot(self, model: str | None = None) -> AsyncIterator[None]:
        """Hold one request slot for an attempt asking ``model``; what the request raises
        adjusts the limit, and how long it took is the model's (``Stalled``)."""
        window = await self._acquire()
        accepted = _Accepted()
        if self.adaptive and math.isfinite(self.accepted_after):
            accepted.timer = asyncio.get_running_loop().call_later(
                self.accepted_after, self._accepted, window, accepted
            )
        key, started = next(self._ids), self._now()
        self._flying[key] = (model, started)
        try:
            yield
        except BaseException as exc:
            accepted.cancel()
            del self._flying[key]
            if is_timeout(exc):
                self.timed_out += 1
                self._timeouts[model] = self._timeouts.get(model, 0) + 1
            self._release(window, exc, accepted.counted)
            raise
        accepted.cancel()
        del self._flying[key]
        answered = self._answered.setdefault(model, deque(maxlen=USUAL_OF))
        answered.append(self._now() - started)
        self._release(window, None, accepted.counted)

    async def _acquire(self) -> int:
        await self._take()
        if self.per_minute is not None:
            try:
                await self._wait_for_rate()
            except asyncio.CancelledError:
                self._give()
                raise
        self.requests += 1
        return self._window

    def _release(self, window: int, exc: BaseException | None, counted: bool = False) -> None:
        busy = self._busy()
        if exc is not None:
            if is_rate_limited(exc):
                self.rate_limited += 1
                if self.adaptive and window == self._window:
                    self._window += 1
                    self.backoffs += 1
                    self.limit = max(1.0, self.limit * DECREASE_FACTOR)
                    self.threshold = self.limit
        elif busy and not counted:
            self._grow(window)
        self._give()

    def _room(self) -> bool:
        return self.in_flight < self.max_in_flight

    def _busy(self) -> bool:
        """Whether the limit is in use: only then does a success say it could be higher."""
        return bool(self.queued) or self.in_flight >= self.max_in_flight

    def _grow(self, window: int) -> None:
        if not self.adaptive or window != self._window:
            return
        step = 1.0 if self.limit < self.threshold else max(1.0 / self.limit, GROWTH)
        if self.limit + step > self.ceiling and self.reserve is not None:
            self.ceiling += self.reserve(self.ceiling)
        self.limit = min(float(self.ceiling), self.limit + step)
        self.peak = max(self.peak, self.limit)

    def _accepted(self, window: int, accepted: _Accepted) -> None:
        """A request still in flight ``accepted_after`` seconds in was not refused: it counts
        for growth now, not when its answer comes back."""
        accepted.timer = None
        if self._busy():
            accepted.counted = True
            self._grow(window)
            self._wake()

    async def _wait_for_rate(self) -> None:
        while self.per_minute is not None:
            capacity = max(1, int(self.per_minute))
            now = self.clock() if self.clock is not None else time.monotonic()
            while self._starts and now - self._starts[0] >= 60.0:
                self._starts.popleft()
            if len(self._starts) < capacity:
                self._starts.append(now)
                return
            cause = f"the rate limit of {self.per_minute:g} requests per minute"
            await self.waits.sleep(60.0 - (now - self._starts[0]), cause)


def describe(stats: Mapping[str, EndpointStats]) -> str:
    """One line per endpoint for people; under it, while its requests wait long, what for, and
    each model that has stopped answering there."""
    lines = []
    for host, s in stats.items():
        lines.append(
            f"{host}: {s.limit} in flight allowed (ceiling {s.ceiling or 'automatic'}), "
            f"{s.in_flight} now, "
            f"{s.rate_limited} rate-limited"
            + (f", {s.timed_out} timed out" if s.timed_out else "")
            + (f", {s.per_minute:g}/min" if s.per_minute is not None else "")
        )
        if s.waiting is not None:
            capped = s.retry_after_capped
            lines.append(
                f"  {waiting_text(host, s.waiting)}"
                + (f"; {capped_text(*capped)}" if capped is not None else "")
            )
        lines += [f"  {stalled_text(host, stalled)}" for stalled in s.stalled]
    return "\n".join(lines)


def stalled_text(host: str, stalled: Stalled) -> str:
    """``host: judge-c: 3 requests without an answer for 42 s (usually 2 s), 1 timed out``."""
    who = "1 request" if stalled.requests == 1 else f"{stalled.requests} requests"
    usual = "no answer yet" if stalled.usual_s is None else f"usually {stalled.usual_s:.0f} s"
    return (
        f"{host}: {stalled.model or 'unnamed'}: {who} without an answer for "
        f"{math.floor(stalled.oldest_s)} s ({usual})"
        + (f", {stalled.timed_out} timed out" if stalled.timed_out else "")
    )


def waiting_text(host: str, wait: WaitNow) -> str:
    """``host: 3 requests waiting, 118 s left (Retry-After of a 429)``."""
    who = "1 request" if wait.requests == 1 else f"{wait.requests} requests"
    return f"{host}: {who} waiting, {math.ceil(wait.left)} s left ({wait.cause})"


def capped_text(asked: float, granted: float) -> str:
    """A ``Retry-After`` above the cap, and the cap waited instead."""
    return f"asked for Retry-After {asked:.0f} s, above the cap: waiting {granted:g} s per attempt"
