"""Adaptive endpoint limits: grow while requests succeed, halve on 429, recover."""

from __future__ import annotations

import asyncio
import io
import json
import math
import threading
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from rich.console import Console

from aidanbench.cli.main import main
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner.progress import Progress
from aidanbench.services import OpenAIServices, clients, limits, registry
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.lookahead import Verdicts, Withdrawn
from aidanbench.testing import Fault, Latency, OpenAIStub, RequestInfo, ScriptedBrain
from aidanbench.testing.faults import fail_times, rate_limited
from aidanbench.testing.settings import stub_flags

from .graphs import run_question
from .test_http import stub_settings


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    return openai.APIStatusError(f"HTTP {status}", response=response, body=None)


class Slots:
    """Slots held open by hand, so each test decides exactly when each request ends."""

    def __init__(self, limiter: EndpointLimiter) -> None:
        self.limiter = limiter
        self.held: list[AbstractAsyncContextManager[None]] = []

    async def take(self, n: int) -> None:
        for _ in range(n):
            slot = self.limiter.slot()
            await slot.__aenter__()
            self.held.append(slot)

    async def end(self, error: BaseException | None = None) -> None:
        slot = self.held.pop(0)
        if error is None:
            await slot.__aexit__(None, None, None)
        else:
            assert not await slot.__aexit__(type(error), error, None)


async def test_grows_one_per_success_while_the_limit_is_in_use() -> None:
    limiter = EndpointLimiter(64, initial=4)
    slots = Slots(limiter)
    await slots.take(4)
    blocked = asyncio.ensure_future(slots.take(1))  # a fifth request waits: demand > limit
    await asyncio.sleep(0)
    assert not blocked.done()
    await slots.end()
    assert limiter.limit == 5  # slow start: +1 per success
    await asyncio.sleep(0)
    assert blocked.done()
    await slots.end()
    assert limiter.limit == 5, "four in flight under a limit of five: not in use"
    await slots.take(2)
    await slots.end()
    assert limiter.limit == 6


async def test_a_request_in_flight_long_enough_counts_as_accepted() -> None:
    """Slow start is paced by how fast a refusal would come back, not by the answers: four
    requests still in flight after ``accepted_after`` let more in, once each."""
    limiter = EndpointLimiter(64, initial=4, accepted_after=0.02)
    slots = Slots(limiter)
    await slots.take(4)
    blocked = asyncio.ensure_future(slots.take(4))  # demand beyond the limit
    await asyncio.wait_for(blocked, 10)  # let in while none of the first four has ended
    assert limiter.limit >= 8, "each unrefused request added one while the limit was in use"
    grown = limiter.limit
    for _ in range(8):
        await slots.end()
    assert limiter.limit == grown, "an accepted request does not count again when it ends"


async def test_without_early_acceptance_only_answers_grow_the_limit() -> None:
    """The control of the test above: the same requests, none answered, no growth."""
    limiter = EndpointLimiter(64, initial=4, accepted_after=math.inf)
    slots = Slots(limiter)
    await slots.take(4)
    blocked = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0.1)
    assert limiter.limit == 4 and not blocked.done()
    await slots.end()
    assert limiter.limit == 5
    await blocked


async def test_idle_endpoint_does_not_grow() -> None:
    limiter = EndpointLimiter(64, initial=4)
    slots = Slots(limiter)
    for _ in range(20):
        await slots.take(1)
        await slots.end()
    assert limiter.limit == 4, "one request at a time never tests a higher limit"


async def test_halves_once_per_round_trip_on_429() -> None:
    limiter = EndpointLimiter(64, initial=16)
    slots = Slots(limiter)
    await slots.take(16)
    for _ in range(16):  # sixteen 429s caused by one limit
        await slots.end(status_error(429))
    stats = limiter.stats()
    assert (stats.limit, stats.rate_limited, stats.backoffs) == (8, 16, 1)
    await slots.take(1)  # started after the cut: its 429 cuts again
    await slots.end(status_error(429))
    assert limiter.stats().limit == 4


async def test_recovers_additively_after_a_backoff() -> None:
    limiter = EndpointLimiter(64, initial=8)
    slots = Slots(limiter)
    await slots.take(8)
    await slots.end(status_error(429))  # 8 -> 4, and slow start ends at 4
    for _ in range(7):
        await slots.end()
    assert limiter.limit == 4
    for _ in range(16):  # a success while more requests wait than the limit lets in
        await slots.take(limiter.max_in_flight - limiter.in_flight)
        blocked = asyncio.ensure_future(slots.take(1))
        await asyncio.sleep(0)
        await slots.end()
        await blocked
    assert 6.5 < limiter.limit < 7, "about one more per limit's worth of successes"


async def test_a_high_limit_grows_back_a_tenth_per_round_trip() -> None:
    """At round trips of seconds, +1 per round trip would take minutes to undo a halving."""
    limiter = EndpointLimiter(256, initial=80)
    slots = Slots(limiter)
    await slots.take(80)
    await slots.end(status_error(429))  # 80 -> 40, slow start over
    while slots.held:
        await slots.end()
    for _ in range(40):  # one round trip's worth of busy successes
        await slots.take(limiter.max_in_flight - limiter.in_flight)
        blocked = asyncio.ensure_future(slots.take(1))
        await asyncio.sleep(0)
        await slots.end()
        await blocked
    assert limiter.limit == pytest.approx(44.0)


async def test_retry_after_backs_off_other_errors_do_not() -> None:
    limiter = EndpointLimiter(64, initial=8)
    slots = Slots(limiter)
    await slots.take(3)
    await slots.end(status_error(500))
    await slots.end(TimeoutError())
    assert limiter.limit == 8 and limiter.rate_limited == 0
    await slots.end(status_error(503, {"Retry-After": "1"}))
    assert limiter.limit == 4 and limiter.rate_limited == 1


async def test_bounded_by_ceiling_and_one() -> None:
    limiter = EndpointLimiter(5, initial=16)
    assert limiter.limit == 5
    slots = Slots(limiter)
    for _ in range(10):
        await slots.take(1)
        await slots.end(status_error(429))
    assert limiter.stats().limit == 1
    limiter.tighten(3, 60.0)
    assert (limiter.ceiling, limiter.per_minute) == (3, 60.0)


async def test_a_cancelled_waiter_leaks_no_slot() -> None:
    limiter = EndpointLimiter(1, adaptive=False)
    slots = Slots(limiter)
    await slots.take(1)
    blocked = asyncio.ensure_future(slots.take(1))
    await asyncio.sleep(0)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await slots.end()
    assert limiter.in_flight == 0
    await slots.take(1)  # the slot is free again
    assert limiter.in_flight == 1


async def test_a_request_waiting_for_a_slot_is_withdrawn_when_told() -> None:
    """A look-ahead's request waits for the one slot; its answer fails: it leaves the
    line without a slot, and the next request gets the slot when it is free."""
    limiter = EndpointLimiter(1, adaptive=False)
    verdicts = Verdicts()
    slots = Slots(limiter)
    await slots.take(1)
    turn = ("question", 1, "answer")

    async def lookahead() -> None:
        with verdicts.unless_failed(turn):
            await slots.take(1)

    waiting = asyncio.ensure_future(lookahead())
    await asyncio.sleep(0)
    assert limiter.queued == 1
    verdicts.fail(turn)
    with pytest.raises(Withdrawn):
        await waiting
    assert (limiter.queued, limiter.in_flight) == (0, 1)
    following = asyncio.ensure_future(slots.take(1))
    await slots.end()
    await following
    assert limiter.in_flight == 1
    verdicts.fail(turn)  # told before its look-ahead asks: withdrawn at once
    with pytest.raises(Withdrawn):
        await lookahead()
    waiting = asyncio.ensure_future(lookahead())
    await asyncio.sleep(0)
    await slots.end()  # the slot is handed to the look-ahead, and in the same turn
    verdicts.fail(turn)  # of the loop its answer fails: it passes the slot on
    with pytest.raises(Withdrawn):
        await waiting
    assert (limiter.queued, limiter.in_flight) == (0, 0)


class Provider:
    """An endpoint simulated on the event loop: a request takes ``ticks`` loop steps, and
    one beyond ``capacity`` in flight is refused at once with a 429. Deterministic: no
    clock, only the loop's order."""

    def __init__(self, capacity: int, ticks: int = 5) -> None:
        self.capacity = capacity
        self.ticks = ticks
        self.in_flight = 0
        self.refused = 0
        self.attempts = 0

    async def request(self) -> None:
        self.attempts += 1
        if self.in_flight >= self.capacity:
            self.refused += 1
            raise status_error(429)
        self.in_flight += 1
        try:
            for _ in range(self.ticks):
                await asyncio.sleep(0)
        finally:
            self.in_flight -= 1

    async def load(self, limiter: EndpointLimiter, workers: int, each: int) -> None:
        """``workers`` callers each getting ``each`` requests through, retrying 429s."""

        async def worker() -> None:
            done = 0
            while done < each:
                try:
                    async with limiter.slot():
                        await self.request()
                    done += 1
                except openai.APIStatusError:
                    await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(workers)))


async def test_a_simulated_provider_sees_no_429_storm_and_the_limit_recovers() -> None:
    limiter = EndpointLimiter(64)
    provider = Provider(capacity=6)
    await provider.load(limiter, workers=40, each=20)
    assert provider.refused <= 0.1 * provider.attempts, (provider.refused, provider.attempts)
    assert limiter.stats().limit <= 8, "settled near the provider's capacity"
    provider.capacity = 40  # the provider raises its limit: the limit climbs back
    await provider.load(limiter, workers=40, each=20)
    assert limiter.stats().limit >= 12


async def test_a_fixed_limit_storms_the_simulated_provider() -> None:
    """The same load with the limit held at its ceiling: most attempts are refused."""
    limiter = EndpointLimiter(64, adaptive=False)
    provider = Provider(capacity=6)
    await provider.load(limiter, workers=40, each=20)
    assert provider.refused >= provider.attempts / 2


def automatic(most: int) -> EndpointLimiter:
    """An adaptive limiter whose ceiling is automatic, granted up to ``most`` in all."""
    limiter = EndpointLimiter(64, reserve=lambda wanted: min(wanted, most - limiter.ceiling))
    return limiter


async def test_an_automatic_ceiling_grows_past_1024_when_the_load_asks() -> None:
    """3,000 callers against a provider taking 2,500 at once: the ceiling follows the
    limit past 1,024 (a fixed one stops there), still without a 429 storm."""
    limiter = automatic(20_000)
    provider = Provider(capacity=2_500)
    await provider.load(limiter, workers=3_000, each=4)
    stats = limiter.stats()
    assert stats.ceiling is None and limiter.ceiling > 1_024 and stats.peak_limit > 1_024
    assert provider.refused <= 0.1 * provider.attempts, (provider.refused, provider.attempts)
    fixed = EndpointLimiter(1_024)
    await Provider(capacity=2_500).load(fixed, workers=3_000, each=4)
    assert fixed.stats().peak_limit == 1_024, "the old default ceiling binds"


async def test_an_automatic_ceiling_still_backs_off_on_429s() -> None:
    limiter = automatic(20_000)
    provider = Provider(capacity=1_500)
    await provider.load(limiter, workers=3_000, each=4)
    assert limiter.backoffs >= 1 and limiter.stats().limit <= 1_650, limiter.stats()
    assert provider.refused <= 0.1 * provider.attempts, (provider.refused, provider.attempts)


async def test_an_automatic_ceiling_grows_only_as_far_as_it_is_granted() -> None:
    """Open files and memory leave room for 700 connections in all: the limit stops
    there, however many wait and however much more the provider takes."""
    limiter = automatic(700)
    await Provider(capacity=2_500).load(limiter, workers=3_000, each=2)
    assert limiter.ceiling == 700 and limiter.stats().peak_limit == 700


def test_eighty_endpoints_each_get_room_to_start() -> None:
    """A campaign of 80 models each at its own endpoint, a judge and an embedder: each
    starts at the initial limit. A fixed 1,024 per endpoint used to be reserved against
    the open files at once, and 62 of 82 endpoints got a ceiling of one request."""

    async def made() -> list[int]:
        factory = OpenAIServices()
        return [factory.limiter(f"host-{i}:1", Settings()).max_in_flight for i in range(82)]

    assert asyncio.run(made()) == [limits.INITIAL_LIMIT] * 82


def test_automatic_ceilings_share_what_open_files_and_memory_allow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Endpoints without ``--endpoint-concurrency`` start at the initial limit and reserve
    more as they grow, each ceiling counted against one allowance
    (``registry.CONNECTIONS_MOST``); one with it keeps its fixed ceiling."""
    monkeypatch.setattr(registry, "CONNECTIONS_MOST", 1_000)
    factory = OpenAIServices()

    async def made() -> list[EndpointLimiter]:
        first = factory.limiter("a:1", Settings())
        second = factory.limiter("b:1", Settings())
        fixed = factory.limiter("c:1", Settings(max_concurrency=100))
        assert first.stats().ceiling is None and fixed.stats().ceiling == 100
        assert first.ceiling == limits.INITIAL_LIMIT
        assert first.reserve is not None
        assert first.reserve(500) == 500
        first.ceiling += 500
        assert first.reserve(500) == 1_000 - 564 - 64 - 100
        return [first, second, fixed]

    asyncio.run(made())


class Capacity:
    """A provider that answers 429 to every request beyond ``capacity`` in flight."""

    def __init__(self, stub: OpenAIStub, capacity: int) -> None:
        self.stub = stub
        self.capacity = capacity
        self.started = 0
        self.lock = threading.Lock()

    def __call__(self, info: RequestInfo) -> Fault | None:
        with self.lock:
            in_flight = self.started - len(self.stub.requests)
            self.started += 1
            return rate_limited(0.01) if in_flight >= self.capacity else None


async def run_against_capacity(
    adaptive: bool, seconds: float = 0.04
) -> tuple[list[int], dict[str, int]]:
    questions = bundled_questions(12)
    brain = ScriptedBrain({q: 3 for q in questions})
    latency = Latency(generate=seconds, coherence=seconds, embed=seconds)
    with OpenAIStub(brain, latency=latency) as stub:
        stub.faults = Capacity(stub, 6)
        settings = stub_settings(stub, max_concurrency=16, max_retries=12)
        async with OpenAIServices(adaptive=adaptive) as factory:
            outs = await asyncio.gather(*(run_question(factory, q, settings) for q in questions))
            (stats,) = factory.endpoint_stats().values()
        refused = sum(1 for r in stub.requests if r.status == 429)
    assert refused == stats.rate_limited
    return [out["score"] for out in outs], {
        "requests": stats.requests,
        "rate_limited": stats.rate_limited,
        "backoffs": stats.backoffs,
    }


async def test_backs_off_under_a_provider_limit_without_a_429_storm(api_key: str) -> None:
    scores, seen = await run_against_capacity(True)
    assert scores == [3] * 12, "every question finishes with its scripted score"
    assert seen["backoffs"] >= 1, "the limit was cut (a fixed limit never is)"
    assert seen["rate_limited"] <= 0.25 * seen["requests"], seen


async def test_early_acceptance_backs_off_without_a_429_storm(
    api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers slower than the acceptance time: the limit grows on acceptance, and the
    provider's refusals (which come back at once) still cut it before a storm."""
    monkeypatch.setattr(limits, "ACCEPTED_AFTER_S", 0.05)
    scores, seen = await run_against_capacity(True, seconds=0.3)
    assert scores == [3] * 12
    assert seen["backoffs"] >= 1
    assert seen["rate_limited"] <= 0.25 * seen["requests"], seen


def test_run_records_each_endpoint_limit_and_429s(api_key: str, tmp_path: Path) -> None:
    questions = bundled_questions(2)
    brain = ScriptedBrain({q: 2 for q in questions})
    served = ("m1", "o1-mini", "text-embedding-3-large")  # listed: the preflight asks no model
    faults = fail_times("generate", 1, 429, match=questions[0])
    with OpenAIStub(brain, faults=faults, models=served) as stub:
        run_dir = tmp_path / "run"
        url = stub.base_url
        args = ["run", "--model", "m1", "--questions", "2", "--run-dir", str(run_dir)]
        args += stub_flags(url)
        assert main(args) == 0
        meta = json.loads((run_dir / "metadata.json").read_text())
        (host,) = meta["endpoint_limits"]
        stats = meta["endpoint_limits"][host]
        assert host == f"127.0.0.1:{stub.port}"
        refused = [r for r in stub.requests if r.status == 429]
        assert refused and stats["rate_limited"] == len(refused)
        assert stats["requests"] == stub.asked() - stub.asked("other"), (
            "the run's, not the preflight's"
        )
        assert stats["ceiling"] is None, "automatic, as by default"
        assert stats["limit"] >= 1


def test_live_table_shows_each_endpoint() -> None:
    limiter = EndpointLimiter(32, initial=8)
    progress = Progress(out=io.StringIO(), live=False, endpoints=lambda: {"api:1": limiter.stats()})
    console = Console(file=io.StringIO(), width=120)
    console.print(progress._table(width=120))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "api:1: 8 in flight allowed (ceiling 32), 0 now, 0 rate-limited" in text


def test_the_command_line_runs_on_aiohttp_pools(
    api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aidanbench run`` sends every request through the aiohttp transport, the one kept
    for costing less CPU per request than httpx (docs/performance.md: the ``httpx``
    variant of ``bench.lab``): a change of default, or an OpenAI client without its
    aiohttp extra, fails here instead of silently costing the CPU back."""
    made: list[object] = []
    real_pool = clients.http_pool

    def recording_pool(*args: Any, **kwargs: Any) -> Any:
        pool = real_pool(*args, **kwargs)
        made.append(pool)
        return pool

    monkeypatch.setattr(clients, "http_pool", recording_pool)
    questions = bundled_questions(2)
    with OpenAIStub(ScriptedBrain({q: 2 for q in questions})) as stub:
        args = ["run", "--model", "m1", "--questions", "2", "--run-dir", str(tmp_path / "run")]
        args += stub_flags(stub.base_url)
        assert main(args) == 0
        assert stub.count() > 0
    assert len(made) == 1, "one pool for the one host every role reaches"
    assert all(isinstance(pool, openai.DefaultAioHttpClient) for pool in made), made
