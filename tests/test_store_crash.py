"""A crash of the shared store's database in the middle of a campaign loses nothing.

The published run is replayed (``testing.replay``: each answer, judgment and embedding as
recorded, chosen by the prompt's content) to ``aidanbench run --store`` processes on a real
PostgreSQL 15 with a database of their own, whose postmaster and every process it started
are SIGKILLed mid-campaign (``LocalPostgres.crash``) and started again later. The WAL
writer is stalled for a second before the kill, as a slow disk holds it: what a commit that
does not wait for its WAL acknowledged in that second is surely among what the crash takes
back, so a store that acknowledged such commits shows it here every time.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.demo import published_scores
from aidanbench.core.settings import REFERENCE_EMBEDDING_MODEL, REFERENCE_JUDGE
from aidanbench.record.lines import QuestionLine, read_lines
from aidanbench.runner.drive import Plan
from aidanbench.testing import OpenAIStub
from aidanbench.testing.postgres import LocalPostgres, available, local_postgres
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain
from aidanbench.testing.settings import stub_flags

from .commands import generations
from .conftest import REPO
from .test_postgres_store import PASSWORD, campaign_lines, finished

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("psycopg") is None or not available(),
        reason="needs the [postgres] extra and PostgreSQL 15",
    ),
]

MODELS = ("openai/gpt-4o-mini-2024-07-18", "meta-llama/llama-3.1-70b-instruct")
"""Two published models with a chain on each of the ten questions (310 and 147 valid
answers, chains of 2 to 59 answers)."""
DOWN_S = 6.0
"""How long the database stays down (the issue's 5 to 9 s)."""


@pytest.fixture
def replay() -> Iterator[OpenAIStub]:
    """The published run of ``MODELS``, each answer taking a hundredth of its recorded time."""
    chains = [c for c in published_chains() if c.model in MODELS]
    served = [*MODELS, REFERENCE_JUDGE, REFERENCE_EMBEDDING_MODEL]
    with OpenAIStub(ReplayBrain(chains, 0.01), models=served) as stub:
        yield stub


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    """A PostgreSQL server for this test alone (it is crashed)."""
    with local_postgres(PASSWORD) as server:
        yield server


def machine(stub: OpenAIStub, run_dir: Path, store: str, key: str) -> subprocess.Popen[str]:
    """``aidanbench run --store`` of ``MODELS`` on the ten published questions, as one
    machine, its output to ``RUN_DIR.log``."""
    log = run_dir.with_name(run_dir.name + ".log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "aidanbench.cli.main", *machine_args(stub, run_dir, store)],
        cwd=REPO,
        env={**os.environ, "AIDANBENCH_TEST_KEY": key},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def machine_args(stub: OpenAIStub, run_dir: Path, store: str) -> list[str]:
    models = [arg for model in MODELS for arg in ("--model", model)]
    return [
        *("run", *models, "--questions", "10", "--run-dir", str(run_dir)),
        *("--judge-model", REFERENCE_JUDGE, "--embedding-model", REFERENCE_EMBEDDING_MODEL),
        *stub_flags(stub.base_url),
        *("--store", store, "--concurrency", "10", "--claim-poll", "0.3"),
    ]


def lines_in(store: str) -> int:
    """Question lines the store holds (0 before its tables exist)."""
    import psycopg

    with psycopg.connect(store) as conn:
        if conn.execute("SELECT to_regclass('aidanbench_lines')").fetchone() == (None,):
            return 0
        row = conn.execute("SELECT count(*) FROM aidanbench_lines").fetchone()
    return int(row[0]) if row else 0


def until_lines(store: str, count: int, procs: list[subprocess.Popen[str]]) -> None:
    """Wait (two minutes at most) until the store holds ``count`` lines."""
    deadline = time.monotonic() + 120
    while lines_in(store) < count and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a machine ended before the crash"
        time.sleep(0.05)


def exact(line: QuestionLine) -> str:
    """A line as JSON, to compare a run directory's with the store's."""
    return json.dumps(
        line.record() | {"answers": [a.record() for a in line.answers]}, sort_keys=True
    )


def published() -> dict[str, dict[str, int]]:
    return {m: s for m, s in published_scores(published_chains()).items() if m in MODELS}


def test_a_database_crash_mid_campaign_loses_nothing(
    tmp_path: Path, replay: OpenAIStub, own_postgres: LocalPostgres, api_key: str
) -> None:
    """Two machines, ten questions in flight each; the database killed once six questions
    are stored and started again ``DOWN_S`` later. Both runs wait it out and exit 0; every
    per-question score in the store is the published one; each run directory holds exactly
    the store's lines of its machine; a rerun asks nothing and repairs nothing; and no
    answer was asked for twice but those whose request was cut by the crash."""
    store = own_postgres.new_database()
    dirs = [tmp_path / "machine-a", tmp_path / "machine-b"]
    procs = [machine(replay, d, store, api_key) for d in dirs]
    until_lines(store, 6, procs)
    own_postgres.crash(stall_s=1.0)
    time.sleep(DOWN_S)
    own_postgres.start()
    outputs = [finished(p, timeout=300) for p in procs]

    in_store = campaign_lines(store)
    assert published_scores(in_store) == published()  # type: ignore[arg-type]
    by_thread = {line.thread: exact(line) for line in in_store}
    held = [read_lines(d) for d in dirs]
    assert sorted(line.thread for lines in held for line in lines) == sorted(by_thread)
    for lines in held:
        assert lines, "both machines ran questions"
        assert all(exact(line) == by_thread[line.thread] for line in lines)
    for out in outputs:
        assert "does not answer" in out and "answers again" in out
    asked = generations(replay)
    assert sum(n - 1 for n in asked.values()) <= 2, "at most a step cut by the crash, again"

    before = replay.asked()
    for d in dirs:
        out = finished(machine(replay, d, store, api_key))
        assert "lost steps" not in out and "lacked" not in out, out
    assert replay.asked() == before, "the rerun found everything done"


class Told:
    """What a worker's claims tell (``runner.claims.Waiting``), kept."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def elsewhere(self, count: int) -> None:
        self.lines.append(f"elsewhere {count}")

    def store(self, outage: str | None) -> None:
        self.lines.append(f"store {outage}")

    def note(self, text: str) -> None:
        self.lines.append(text)


class Unstarted:
    """A ``Questions`` backend whose every thread is new (claims plan it once taken)."""

    async def plan(self, tasks: Any) -> list[Plan]:
        return [Plan("run", {}) for _ in tasks]


def test_a_restart_of_the_database_gives_every_claim_a_full_lease(
    own_postgres: LocalPostgres,
) -> None:
    """A claim whose heartbeat is older than the lease when the database comes back from a
    crash stays its worker's for a lease from the restart: that worker, which waited the
    outage out, beats again as soon as the store answers, and no other worker runs its
    thread meanwhile. Once that lease has passed without a beat, the thread is taken over."""
    from aidanbench.core.settings import Settings
    from aidanbench.runner.campaign import connected, setup
    from aidanbench.runner.claims import Claims, ClaimTimes
    from aidanbench.runner.tasks import Task

    store = own_postgres.new_database()
    task = Task(Settings(model="m"), "Why?", 1)
    times = ClaimTimes(lease_s=2.0, poll_s=0.1)

    async def claims(owner: str, go: Any) -> Any:
        async with connected(store) as pool:
            await setup(pool)
            return await go(Claims(pool, owner, Told(), times))

    async def take(mine: Claims) -> Plan | None:
        return await mine.take(task, Unstarted(), waited=False)  # type: ignore[arg-type]

    async def first_freed(mine: Claims, within: float) -> Task | None:
        assert await take(mine) is None, "deferred: a live worker holds it"
        try:
            async with asyncio.timeout(within):
                async for freed in mine.freed(lambda: False):
                    return freed
        except TimeoutError:
            return None
        return None

    assert asyncio.run(claims("machine-a", take)) is not None
    time.sleep(times.lease_s + 0.5)  # machine-a's heartbeat is now older than the lease
    own_postgres.crash()
    own_postgres.start()
    assert asyncio.run(claims("machine-b", take)) is None, "a full lease from the restart"
    assert asyncio.run(claims("machine-b", lambda c: first_freed(c, 1.0))) is None
    time.sleep(times.lease_s)
    assert asyncio.run(claims("machine-b", take)) is not None, "then it is taken over"
