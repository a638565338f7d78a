"""Worker processes (``runner.workers``): one run over several processes, as one process
would run it; Ctrl-C stops them all; a killed worker loses nothing; the budget and the
endpoints' limits are shared."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aidanbench.core.settings import Settings
from aidanbench.record.lines import QuestionLine
from aidanbench.record.recorder import RunLines
from aidanbench.record.usage import UsageLedger, summarise_ledger
from aidanbench.runner import workers
from aidanbench.runner.progress import Progress
from aidanbench.runner.tasks import Task
from aidanbench.services import OpenAIServices
from aidanbench.services.pricing import Price
from aidanbench.services.usage import Usage, bound, usage_line
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain, parse_generate_prompt

from .commands import generations
from .conftest import REPO
from .test_cli_run import QUESTIONS, read_results, run_args

ANSWERS = 2 * (4 + 5 + 6 + 7)
"""Answers of the grid ``run_args`` asks for: 2 models, 4 questions of 3-6 valid answers."""


def test_worker_count_follows_the_run() -> None:
    assert workers.worker_count(3, 10) == 3
    assert workers.worker_count(8, 2) == 2, "at most one worker per question thread"
    assert workers.worker_count(None, 49) == 1, "a small run stays in one process"
    assert workers.worker_count(None, 5040) == min(workers.cores(), 20)
    assert workers.worker_count(4, 5040, remote=True) == 1, "a server runs its own"


def test_shares_deal_the_tasks_out_in_turn() -> None:
    tasks = [Task(Settings(model=f"m{i % 2}"), f"q{i}", 1) for i in range(5)]
    assert [[t.question for t in share] for share in workers.shares(tasks, 2)] == [
        ["q0", "q2", "q4"],
        ["q1", "q3"],
    ]


async def test_each_worker_holds_its_share_of_every_endpoint() -> None:
    settings = Settings(model="m", max_concurrency=100, requests_per_minute=600)
    async with OpenAIServices(share=2) as shared, OpenAIServices() as whole:
        half, full = shared.limiter("h:1", settings), whole.limiter("h:1", settings)
    assert (half.ceiling, half.per_minute) == (50, 300.0)
    assert (full.ceiling, full.per_minute) == (100, 600.0)


def test_each_ledger_counts_what_the_others_spent(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    price = Price(input=1.0, cached_input=None, output=1.0)
    where = {"thread": "t", "node": "generate"}
    one = UsageLedger(path)
    probe = one.sent(  # a preflight's
        "model", "m", where, input_tokens=10, output_tokens=10, bound_usd=bound(price, 10, 10)
    )
    usage = Usage(input_tokens=500_000, output_tokens=0)
    one.write(usage_line("model", "m", usage, price, where, request=probe))
    one.follow()
    one.catch_up()
    assert one.spent == pytest.approx(0.5), "what it wrote before following counts once"
    other = UsageLedger(path)
    other.follow()
    assert other.spent == pytest.approx(0.5)
    one.spent = other.spent = 0.0  # from here: this session's spending
    request = one.sent(
        "model", "m", where, input_tokens=10, output_tokens=10, bound_usd=bound(price, 10, 10)
    )
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    one.write(usage_line("model", "m", usage, price, where, request=request))
    assert one.spent == pytest.approx(2.0)
    assert other.spent == 0.0
    other.catch_up()
    assert other.spent == pytest.approx(2.0), "the other's reply counts once it is read"
    one.catch_up()
    assert one.spent == pytest.approx(2.0), "its own lines are not counted twice"
    other.max_cost = 1.5
    assert other.exhausted
    failed = other.sent(
        "model", "m", where, input_tokens=10, output_tokens=4096, bound_usd=bound(price, 10, 4096)
    )
    other.failed("model", "m", failed, None)
    one.catch_up()
    assert one.spent == pytest.approx(other.spent), "a failed request counts at its bound"


async def test_without_a_cap_no_process_reads_the_others_ledger_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The others' lines are read only to keep ``--max-cost``: without one, every process
    would parse every other process's lines again, twice a second, for nothing."""
    from aidanbench.record.recorder import worker_ledger

    read: list[int] = []
    looked = asyncio.Event()
    real = UsageLedger._read_from

    def reading(self: UsageLedger, offset: int) -> bytes:
        read.append(offset)
        looked.set()
        return real(self, offset)

    monkeypatch.setattr(UsageLedger, "_read_from", reading)
    monkeypatch.setattr(workers, "FOLLOW_S", 0.0)
    uncapped = worker_ledger(tmp_path, None)
    read.clear()
    await asyncio.wait_for(workers.follow(uncapped), 5.0)  # returns: nothing to keep
    uncapped.catch_up()
    assert read == []
    capped = worker_ledger(tmp_path, 1.0)
    looked.clear()
    following = asyncio.ensure_future(workers.follow(capped))
    await asyncio.wait_for(looked.wait(), 60.0)  # a cap: the others' lines are read
    following.cancel()


def test_a_reopened_ledger_counts_what_earlier_sessions_spent(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    price = Price(input=1.0, cached_input=None, output=1.0)
    where = {"thread": "t", "node": "generate"}
    earlier = UsageLedger(path)

    def sent(tokens: int) -> str:
        return earlier.sent(
            "model",
            "m",
            where,
            input_tokens=tokens,
            output_tokens=0,
            bound_usd=bound(price, tokens, 0),
        )

    replied = sent(10)
    earlier.write(
        usage_line("model", "m", Usage(1_000_000, None, 0), price, where, request=replied)
    )
    earlier.failed("model", "m", sent(250_000), None)
    earlier.failed("model", "m", sent(400_000), 429)
    sent(2_000_000)  # in flight when the session died
    earlier.close()
    reopened = UsageLedger(path)
    assert reopened.spent == pytest.approx(1.0 + 0.25 + 2.0), "refused requests are not billed"
    assert reopened.spent == pytest.approx(summarise_ledger(path).dollars_bound)


def _line(task: Task, stop: str = "novelty") -> QuestionLine:
    return task.line({"question": task.question, "answers": [], "stop_reason": stop})


async def test_the_relay_counts_a_share_started_again_once(tmp_path: Path) -> None:
    tasks = [Task(Settings(model="m"), f"q{i}", 1) for i in range(2)]
    progress = Progress(out=io.StringIO(), live=False)
    lines = RunLines(tmp_path)
    relay = workers.Relay(progress, lines, {t.thread_id: t for t in tasks})
    progress.queued(tasks[0].label, 2)
    done, running = tasks
    await relay.apply(0, ("skipped", done.thread_id, _line(done), True))
    await relay.apply(0, ("started", running.thread_id))
    await relay.apply(0, ("answer", running.thread_id, {"valid": True, "calls": 3}))
    row = progress.rows[done.label]
    assert (row.queued, row.running, row.done) == (0, 1, 1)
    relay.died(0)
    assert (row.queued, row.running, row.done) == (1, 0, 1), "its running question requeued"
    assert row.flight == {}, "the dead worker's answer events are dropped"
    await relay.apply(0, ("skipped", done.thread_id, _line(done), True))
    await relay.apply(0, ("started", running.thread_id))
    await relay.apply(0, ("finished", running.thread_id, _line(running)))
    assert (row.queued, row.running, row.done) == (0, 0, 2)
    assert [line.question for line in lines.lines()] == ["q0", "q1"]


# ---------------------------------------------------------------- the command, end to end


def command(
    stub: OpenAIStub, run_dir: Path, api_key: str, *extra: str, log: Path | None = None
) -> subprocess.Popen[str]:
    """``aidanbench run`` in a child process; its log to a pipe, or to ``log`` (a file,
    as a terminal, outlives the command)."""
    return subprocess.Popen(
        [sys.executable, "-m", "aidanbench.cli.main", *run_args(stub, run_dir, *extra)],
        cwd=REPO,
        env={**os.environ, "AIDANBENCH_TEST_KEY": api_key},
        stdout=subprocess.PIPE if log is None else log.open("w"),
        stderr=subprocess.PIPE if log is None else subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return err


def worker_pids(parent: int) -> list[int]:
    """The parent's children that are worker processes (multiprocessing's spawn)."""
    found = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for pid in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                found.append(int(pid))
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(stub: OpenAIStub, generations: int) -> None:
    deadline = time.monotonic() + 120
    while stub.count("generate") < generations and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_for_every_thread(stub: OpenAIStub) -> None:
    """Until every (model, question) thread of the grid has asked for an answer: the
    command deals its threads out between itself and its worker, so the worker then runs
    its share, and it made itself die with the command (``PR_SET_PDEATHSIG``) before its
    first request. A command killed sooner, while its worker still imports (seconds on a
    loaded machine), tests a worker that has not started: it exits only once its imports
    are done and it finds its parent gone, however long that takes."""
    threads = {(m, q) for m in ("m1", "m2") for q in QUESTIONS}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        asked = {(r.model, parse_generate_prompt(r.prompt)[0]) for r in stub.of_kind("generate")}
        if asked >= threads:
            return
        time.sleep(0.01)
    raise AssertionError(f"threads never asked: {threads - asked}")


@pytest.fixture
def slow_stub() -> OpenAIStub:
    brain = ScriptedBrain({q: 3 + i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=Latency(generate=0.05, coherence=0.04, embed=0.01)) as stub:
        yield stub


@pytest.mark.e2e
def test_two_workers_write_what_one_process_writes(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    finish(command(slow_stub, tmp_path / "one", api_key, "--workers", "1"))
    one = generations(slow_stub)
    slow_stub.clear()
    err = finish(command(slow_stub, tmp_path / "two", api_key, "--workers", "2"))
    two = generations(slow_stub)
    assert set(two) == set(one), "the same prompts (answers and look-aheads)"
    assert max(two.values()) == 1, "each asked for once: no question ran in two workers"
    assert read_results(tmp_path / "two") == read_results(tmp_path / "one")
    meta = json.loads((tmp_path / "two" / "metadata.json").read_text())
    assert meta["sessions"][-1]["workers"] == 2
    ledger = [json.loads(x) for x in (tmp_path / "two" / "usage.jsonl").read_text().splitlines()]
    asked = [x for x in ledger if x["event"] == "sent" and str(x.get("node")).startswith("gen")]
    assert len(asked) == slow_stub.count("generate"), "every worker's requests in the ledger"
    assert meta["endpoint_limits"], "the workers' endpoint limits, summed"
    assert err.count("valid —") == 8, "every finished question in the log, once"


@pytest.mark.e2e
def test_ctrl_c_stops_every_worker_and_a_rerun_finishes(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    finish(command(slow_stub, tmp_path / "clean", api_key, "--workers", "1"))
    slow_stub.clear()
    run_dir = tmp_path / "stopped"
    proc = command(slow_stub, run_dir, api_key, "--workers", "2")
    wait_for(slow_stub, 8)
    pids = worker_pids(proc.pid)
    assert len(pids) == 1, "this process runs one share, one worker the other"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "run the same command again to resume" in err
    assert all(gone(pid) for pid in pids), "no worker outlives the command"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["sessions"][-1]["status"] == "interrupted"
    finish(command(slow_stub, run_dir, api_key, "--workers", "2"))
    assert read_results(run_dir) == read_results(tmp_path / "clean")


@pytest.mark.e2e
def test_a_killed_worker_loses_nothing(slow_stub: OpenAIStub, tmp_path: Path, api_key: str) -> None:
    finish(command(slow_stub, tmp_path / "clean", api_key, "--workers", "1"))
    slow_stub.clear()
    run_dir = tmp_path / "killed"
    proc = command(slow_stub, run_dir, api_key, "--workers", "2")
    wait_for(slow_stub, 8)
    os.kill(worker_pids(proc.pid)[0], signal.SIGKILL)
    err = finish(proc)
    assert "its questions continue in a new worker" in err
    assert read_results(run_dir) == read_results(tmp_path / "clean")
    answers = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    keys = [(a["model"], a["question"], a["index"]) for a in answers]
    assert len(keys) == len(set(keys)) == ANSWERS


@pytest.mark.e2e
def test_workers_die_with_the_command(tmp_path: Path, api_key: str) -> None:
    brain = ScriptedBrain({q: 3 + i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=Latency(generate=0.4, coherence=0.1)) as stub:
        run_dir = tmp_path / "killed"
        proc = command(stub, run_dir, api_key, "--workers", "2", log=tmp_path / "log")
        wait_for_every_thread(stub)
        pids = worker_pids(proc.pid)
        assert len(pids) == 1
        proc.kill()
        proc.communicate(timeout=60)
        time.sleep(0.5)  # requests in flight at the kill end
        asked = stub.count()
        time.sleep(4.0)  # the worker's share has seconds of answers left
        assert stub.count() == asked, "no worker goes on running the run's threads"
        assert all(gone(pid) for pid in pids)
        finish(command(stub, run_dir, api_key, "--workers", "2"))
        stub.clear()
        finish(command(stub, tmp_path / "clean", api_key, "--workers", "1"))
    assert read_results(run_dir) == read_results(tmp_path / "clean")
