"""Long waits are shown while they last: a line in the log, a line under the live table.

A request that waits on purpose (the endpoint's ``Retry-After``, a back-off, the
``--requests-per-minute`` window) for more than five seconds is recorded by its
endpoint's limiter (``services.waits``) and shown from that record: within seconds in
log mode (a run whose stderr is not a terminal) and under the table on a terminal. A
``Retry-After`` above the cap is said once.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import Progress, RunSpec, run
from aidanbench.services import OpenAIServices, errors, limits, waits
from aidanbench.services.limits import EndpointLimiter
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, ScriptedBrain, rate_limited, when
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags, stub_settings

from .conftest import REPO
from .graphs import run_question

QUESTIONS = bundled_questions(2)
WAIT_LINE = re.compile(r"(\S+): (\d+) requests? waiting, (\d+) s left \(Retry-After of a 429\)")


def timed_lines(stream: io.TextIOBase, into: list[tuple[float, str]]) -> threading.Thread:
    """Read ``stream`` line by line in a thread, noting when each line arrived."""

    def read() -> None:
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


@pytest.mark.e2e
def test_a_long_retry_after_is_logged_within_seconds_of_its_start(
    tmp_path: Path, api_key: str
) -> None:
    """The issue's check: ``Retry-After: 300`` in log mode gives a line naming the host,
    the cause and the seconds left within 6 s of the wait's start, and the cap applied to
    it is said once, however many requests were refused."""
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    with OpenAIStub(brain, faults=when("generate", rate_limited(300))) as stub:
        host = f"127.0.0.1:{stub.port}"
        command = [sys.executable, "-m", "aidanbench.cli.main", "run", "-m", "m1"]
        command += ["--questions", "2", "--run-dir", str(tmp_path / "run")]
        proc = subprocess.Popen(
            [*command, *stub_flags(stub.base_url)],
            cwd=REPO,
            env={**os.environ, TEST_KEY_VARIABLE: api_key},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,  # not a terminal: log mode
            text=True,
        )
        lines: list[tuple[float, str]] = []
        assert proc.stderr is not None
        reader = timed_lines(proc.stderr, lines)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(WAIT_LINE.search(t) for _, t in lines):
                time.sleep(0.05)
            refused = [r for r in stub.requests if r.status == 429]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
            reader.join(timeout=10)
    told = [(at, WAIT_LINE.search(text)) for at, text in lines if WAIT_LINE.search(text)]
    assert told, "\n".join(text for _, text in lines)
    at, match = told[0]
    assert match is not None
    assert match.group(1) == host, "the host"
    assert 100 < int(match.group(3)) <= 120, "the seconds left, of the cap applied"
    assert refused, "the stub refused with Retry-After"
    assert at - min(r.ended for r in refused) <= 6.0, "logged within 6 s of the wait's start"
    capped = [text for _, text in lines if "above the cap" in text]
    assert len(refused) == 2 and capped == [
        f"[{capped[0][1:8]}s] {host}: asked for Retry-After 300 s, above the "
        "cap: waiting 120 s per attempt"
    ], "two refusals, the cap said once"


async def test_a_capped_retry_after_is_logged_once_over_every_attempt(
    tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four refusals asking for 300 s, each waited at the cap (shortened here), and the
    run finishes: one line about the cap, and the run's metadata counts the waits."""
    monkeypatch.setattr(errors, "RETRY_AFTER_LIMIT", 1.0)
    monkeypatch.setattr(waits, "VISIBLE_S", 0.2)
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    refusals = itertools.count()

    def first_four(request: RequestInfo) -> Fault | None:
        if request.kind == "generate" and next(refusals) < 4:
            return rate_limited(300)
        return None

    with OpenAIStub(brain, faults=first_four) as stub:
        settings = {f"{role}base_url": stub.base_url for role in ("", "judge_", "embedding_")}
        settings |= {
            f"{role}api_key_env": TEST_KEY_VARIABLE for role in ("", "judge_", "embedding_")
        }
        spec = RunSpec(models=["m1"], questions=2, run_dir=tmp_path / "run", settings=settings)
        out = io.StringIO()
        result = await run(spec, progress=Progress(out=out, live=False))
        refused = [r for r in stub.requests if r.status == 429]
    assert result.totals.score == 4 and len(refused) == 4
    capped = [line for line in out.getvalue().splitlines() if "above the cap" in line]
    assert len(capped) == 1, out.getvalue()
    assert capped[0].endswith("asked for Retry-After 300 s, above the cap: waiting 1 s per attempt")
    meta = json.loads((tmp_path / "run" / "metadata.json").read_text())
    (stats,) = meta["endpoint_limits"].values()
    assert stats["long_waits"] == 4 and stats["retry_after_capped"] == [300.0, 1.0]
    assert stats["waiting"] is None, "nothing waits once the run is over"


async def test_the_live_table_shows_a_long_wait(api_key: str) -> None:
    brain = ScriptedBrain({QUESTIONS[0]: 2})
    with OpenAIStub(brain, faults=when("generate", rate_limited(300))) as stub:
        host = f"127.0.0.1:{stub.port}"
        async with OpenAIServices("aiohttp", chat="openai") as factory:
            question = asyncio.create_task(
                run_question(factory, QUESTIONS[0], stub_settings(stub.base_url))
            )
            try:
                for _ in range(200):
                    if any(s.waiting for s in factory.endpoint_stats().values()):
                        break
                    await asyncio.sleep(0.05)
                progress = Progress(out=io.StringIO(), live=False)
                progress.endpoints = factory.endpoint_stats
                progress.queued("m1 (T=0.7)")
                console = Console(file=io.StringIO(), width=200)
                console.print(progress._table(width=200))
            finally:
                question.cancel()
                await asyncio.gather(question, return_exceptions=True)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    match = WAIT_LINE.search(text)
    assert match is not None, text
    assert match.group(1) == host and 100 < int(match.group(3)) <= 120
    assert "asked for Retry-After 300 s, above the cap: waiting 120 s per attempt" in text


async def test_the_request_rate_window_is_a_wait_with_its_cause() -> None:
    limiter = EndpointLimiter(8, per_minute=1)
    async with limiter.slot():
        pass
    assert limiter.stats().waiting is None

    async def second() -> None:
        async with limiter.slot():
            pass

    waiting = asyncio.create_task(second())
    await asyncio.sleep(0.05)
    try:
        now = limiter.stats()
        assert now.waiting is not None and now.long_waits == 1
        assert now.waiting.cause == "the rate limit of 1 requests per minute"
        assert 58 < now.waiting.left <= 60
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert limiter.stats().waiting is None, "a cancelled wait is no longer shown"


async def test_short_waits_are_not_recorded() -> None:
    record = waits.Waits()
    await record.sleep(0.01, "back-off after a 503")
    assert record.started == 0 and record.now() is None


async def test_a_model_that_stops_answering_is_named_at_its_endpoint() -> None:
    """Two models on one endpoint: the one whose request has waited past ``stalled_after``
    (its own usual time, else ``STALLED_S``) is named, with its age and time-outs, under the
    endpoint's line and in the log; the one answering as usual is not."""
    now = [0.0]
    limiter = EndpointLimiter(8, clock=lambda: now[0])
    for _ in range(3):  # judge-a usually answers in 6 s
        async with limiter.slot("judge-a"):
            now[0] += 6.0
    with pytest.raises(TimeoutError):
        async with limiter.slot("judge-c"):
            raise TimeoutError
    release = asyncio.Event()

    async def hold(model: str) -> None:
        async with limiter.slot(model):
            await release.wait()

    held = [asyncio.create_task(hold(model)) for model in ("judge-a", "judge-c", "judge-c")]
    await asyncio.sleep(0)
    now[0] += 20.0  # judge-a: 20 s < 4 x 6 s; judge-c: no answer yet, past 15 s
    try:
        stats = limiter.stats()
        (stalled,) = stats.stalled
        assert stalled == limits.Stalled("judge-c", 2, 20.0, None, 1)
        assert stats.timed_out == 1
        text = limits.describe({"h:1": stats})
        assert "h:1: 8 in flight allowed (ceiling 8), 3 now, 0 rate-limited, 1 timed out" in text
        said = "h:1: judge-c: 2 requests without an answer for 20 s (no answer yet), 1 timed out"
        assert f"  {said}" in text.splitlines() and "judge-a" not in text
        out = io.StringIO()
        progress = Progress(out=out, live=False, endpoints=lambda: {"h:1": limiter.stats()})
        progress.log_waits()
        progress.log_waits()  # once until it lasts STILL_WAITING_EVERY_S more
        (line,) = out.getvalue().splitlines()
        assert line.endswith(said)
    finally:
        release.set()
        await asyncio.gather(*held)
    assert limiter.stats().stalled == ()
