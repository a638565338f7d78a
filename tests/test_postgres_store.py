"""One campaign from several machines on a real PostgreSQL (``run --store``).

A session fixture starts Debian's PostgreSQL 15 on 127.0.0.1 (password authentication,
a free port, a temporary directory) and each test gets a fresh database. Workers are the
real command in separate processes with separate run directories, against one local
OpenAI-compatible server that counts every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.record.lines import QuestionLine, read_lines, write_lines
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain
from aidanbench.testing.postgres import LocalPostgres, available, free_port, local_postgres

from .commands import generations, stub_run
from .conftest import REPO
from .test_cli_run import QUESTIONS, SERVED, run_args

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("psycopg") is None, reason="needs the [postgres] extra"
    ),
]

PASSWORD = "pw-Campaign-7f3a9c"
"""The database password, in every store URL: it must appear in no file and no output."""
LATENCY = Latency(generate=0.08, coherence=0.04, embed=0.01)
"""Slow enough that two workers started together both find threads to run."""
FAST_CLAIMS = ("--claim-lease", "2", "--claim-poll", "0.3")


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """Debian's PostgreSQL 15 on 127.0.0.1 for the session (``testing.postgres``)."""
    if not available():
        pytest.skip("PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin)")
    with local_postgres(PASSWORD) as server:
        yield server


@pytest.fixture
def store(postgres: LocalPostgres) -> str:
    """A fresh database, as a store URL with its password."""
    return postgres.new_database()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 3 + i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=LATENCY, models=SERVED) as server:
        yield server


def worker(stub: OpenAIStub, run_dir: Path, *extra: str, key: str) -> subprocess.Popen[str]:
    """``aidanbench run`` in a process of its own, its output to ``RUN_DIR.log`` (a pipe
    nobody reads while the other worker runs could fill and stop it)."""
    log = run_dir.with_name(run_dir.name + ".log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "aidanbench.cli.main", *run_args(stub, run_dir, *extra)],
        cwd=REPO,
        env={**os.environ, "AIDANBENCH_TEST_KEY": key},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def until_generating(stub: OpenAIStub, generations: int = 6) -> None:
    """Wait (a minute at most) until the stub was asked for ``generations`` answers: a
    worker is well into its questions."""
    deadline = time.monotonic() + 60
    while stub.count("generate") < generations and time.monotonic() < deadline:
        time.sleep(0.01)


def finished(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """The worker's output once it exited 0."""
    args = [str(arg) for arg in proc.args]  # type: ignore[union-attr]
    log = Path(args[args.index("--run-dir") + 1] + ".log")
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    return text


def scores(lines: list[QuestionLine]) -> dict[tuple[str, str, int], Any]:
    """Each line's score, stop and answer texts, by (model, question, repeat)."""
    return {
        (line.model, line.question, line.repeat): (
            line.score,
            line.stop_reason,
            [a.answer for a in sorted(line.answers, key=lambda a: a.index)],
        )
        for line in lines
    }


def campaign_lines(url: str) -> list[QuestionLine]:
    from aidanbench.runner.campaign import read_campaign

    return asyncio.run(read_campaign(url)).lines


@dataclass(frozen=True)
class OneProcess:
    scores: dict[tuple[str, str, int], Any]
    generations: Counter[tuple[str, str]]
    """Each generation prompt, with how often it was asked (look-aheads included)."""


@pytest.fixture
def one_process(tmp_path: Path, stub: OpenAIStub, api_key: str) -> OneProcess:
    """The same grid run by one process on a run directory (no store)."""
    finished(worker(stub, tmp_path / "alone", "--concurrency", "2", key=api_key))
    found = OneProcess(scores(read_lines(tmp_path / "alone")), generations(stub))
    stub.clear()
    return found


def without_calls(value: Any) -> Any:
    """``value`` as JSON (NaN is not NaN) without its request counts: embeddings are
    batched across the questions in flight, so how many requests carried them depends
    on timing, in one process as in two."""
    if isinstance(value, dict):
        return {k: without_calls(v) for k, v in value.items() if k != "api_calls"}
    if isinstance(value, list):
        return [without_calls(v) for v in value]
    return value


def assert_no_password(texts: list[str], *run_dirs: Path) -> None:
    for text in texts:
        assert PASSWORD not in text
    for run_dir in run_dirs:
        for path in run_dir.rglob("*"):
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), path


def test_two_machines_finish_one_campaign_running_each_thread_once(
    tmp_path: Path,
    stub: OpenAIStub,
    store: str,
    api_key: str,
    one_process: OneProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    extra = ("--store", store, "--concurrency", "2", *FAST_CLAIMS)
    started = time.monotonic()
    procs = [worker(stub, d, *extra, key=api_key) for d in (a, b)]
    outputs = [finished(p) for p in procs]
    print(f"two workers: {time.monotonic() - started:.1f} s")

    assert scores(campaign_lines(store)) == one_process.scores
    assert max(one_process.generations.values()) == 1
    assert generations(stub) == one_process.generations, "each generation asked once"

    ran = [{line.thread_id for line in read_lines(d)} for d in (a, b)]
    assert ran[0] and ran[1], "both workers ran questions"
    assert not ran[0] & ran[1] and len(ran[0] | ran[1]) == len(one_process.scores)

    capsys.readouterr()
    assert main(["report", "--store", store, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["report", str(tmp_path / "alone"), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert json.dumps(without_calls(report["runs"])) == json.dumps(without_calls(alone["runs"]))
    sent = [json.loads((d / "metadata.json").read_text())["usage"]["api_calls"] for d in (a, b)]
    assert report["cost"]["sent"]["api_calls"] == sum(sent), "each machine's ledger, added"
    page = tmp_path / "campaign.html"
    assert main(["view", "--store", store, "-o", str(page)]) == 0
    html = page.read_text()
    assert "m1" in html and "m2" in html
    assert main(["report", "--store", store]) == 0
    text = capsys.readouterr()
    assert "m1" in text.out
    assert_no_password([*outputs, text.out, text.err, html], a, b)
    meta = json.loads((a / "metadata.json").read_text())
    assert meta["sessions"][-1]["store"] == store.replace(f":{PASSWORD}", "")

    asked = stub.asked()
    late = tmp_path / "machine-c"
    assert main(run_args(stub, late, "--store", store)) == 0, "a late machine finds it done"
    assert stub.asked() == asked
    assert read_lines(late) == []


def test_a_killed_worker_loses_nothing(
    tmp_path: Path,
    stub: OpenAIStub,
    store: str,
    api_key: str,
    one_process: OneProcess,
) -> None:
    # a lease longer than the survivor takes to start: it finds the claims alive and waits
    extra = ("--store", store, "--concurrency", "3", "--claim-lease", "8", "--claim-poll", "0.3")
    doomed = worker(stub, tmp_path / "killed", *extra, key=api_key)
    until_generating(stub)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    assert doomed.returncode == -signal.SIGKILL
    asked_before = stub.count("generate")

    out = finished(worker(stub, tmp_path / "survivor", *extra, key=api_key))
    assert "running on other workers" in out, "the killed worker's claims were waited for"
    assert scores(campaign_lines(store)) == one_process.scores
    asked = generations(stub)
    assert set(asked) == set(one_process.generations)
    redone = sum(n - 1 for n in asked.values())
    assert redone <= 3, "at most the steps in flight when it was killed are asked again"
    assert asked_before > 0
    assert_no_password([out], tmp_path / "killed", tmp_path / "survivor")


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err, err
    return err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://u@127.0.0.1:1/db", "must be a postgresql://"),
        (f"postgresql://u:{PASSWORD}@127.0.0.1:5432", "names no database"),
        (f"postgresql://u:{PASSWORD}@127.0.0.1:notaport/db", "--store"),
    ],
)
def test_bad_store_url_is_one_line_before_anything_is_written(
    tmp_path: Path, url: str, says: str, capsys: pytest.CaptureFixture[str], api_key: str
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(models=SERVED) as stub:
        assert main(run_args(stub, run_dir, "--store", url)) == 2
    err = one_line_error(capsys)
    assert says in err and PASSWORD not in err
    assert not run_dir.exists()


def test_unreachable_or_refusing_store_is_one_line(
    tmp_path: Path,
    postgres: LocalPostgres,
    store: str,
    capsys: pytest.CaptureFixture[str],
    api_key: str,
) -> None:
    closed = postgres.url("db").replace(str(postgres.port), str(free_port()))
    wrong = store.replace(PASSWORD, "not-the-Password-91")
    run_dir = tmp_path / "run"
    with OpenAIStub(models=SERVED) as stub:
        for url, says in ((closed, "cannot reach the store"), (wrong, "password")):
            assert main(run_args(stub, run_dir, "--store", url)) == 2
            err = one_line_error(capsys)
            assert says in err, err
            assert PASSWORD not in err and "not-the-Password-91" not in err
            assert not run_dir.exists()
        assert stub.asked() == 0


def test_missing_extra_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    api_key: str,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg.conninfo", None)
    with OpenAIStub(models=SERVED) as stub:
        assert main(run_args(stub, tmp_path / "run", "--store", "postgresql://u@h/db")) == 2
    assert "pip install -e '.[postgres]'" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_report_of_an_empty_store_is_one_line(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--store", store]) == 2
    err = one_line_error(capsys)
    assert "no campaign" in err and PASSWORD not in err
    with contextlib.suppress(SystemExit):
        assert main(["report"]) == 2


def test_a_store_that_stops_answering_ends_the_run_in_one_line(
    tmp_path: Path, stub: OpenAIStub, api_key: str
) -> None:
    run_dir = tmp_path / "run"
    with local_postgres(PASSWORD) as own:
        url = own.new_database()
        proc = worker(
            stub, run_dir, "--store", url, *FAST_CLAIMS, "--store-outage", "5", key=api_key
        )
        until_generating(stub)
    stopped = time.monotonic()  # the server is stopped and gone
    try:
        proc.wait(timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
    waited = time.monotonic() - stopped
    log = run_dir.with_name("run.log").read_text()
    assert proc.returncode == 2, log[-2000:]
    assert log.strip().splitlines()[-1].startswith("aidanbench run: error: the store "), log
    assert "run the same command again" in log and PASSWORD not in log
    assert waited < 40, f"{waited:.0f} s to give up on the store"
    assert json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]["status"] != (
        "running"
    )


def test_ctrl_c_releases_the_claims_at_once(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str, one_process: OneProcess
) -> None:
    # a lease longer than the test: only released claims can be taken over in time
    extra = ("--store", store, "--concurrency", "3", "--claim-lease", "600", "--claim-poll", "0.3")
    stopped = worker(stub, tmp_path / "stopped", *extra, key=api_key)
    until_generating(stub)
    stopped.send_signal(signal.SIGINT)
    assert stopped.wait(timeout=30) == 130
    assert "run the same command again to resume" in (tmp_path / "stopped.log").read_text()

    finished(worker(stub, tmp_path / "next", *extra, key=api_key), timeout=90)
    assert scores(campaign_lines(store)) == one_process.scores


def test_machines_with_worker_processes_share_one_campaign(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str, one_process: OneProcess
) -> None:
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    extra = ("--store", store, "--workers", "2", *FAST_CLAIMS)
    outputs = [finished(p) for p in [worker(stub, d, *extra, key=api_key) for d in (a, b)]]
    assert scores(campaign_lines(store)) == one_process.scores
    assert generations(stub) == one_process.generations, "each generation asked once"
    for run_dir in (a, b):
        meta = json.loads((run_dir / "metadata.json").read_text())
        assert meta["sessions"][-1]["workers"] == 2
    assert_no_password(outputs, a, b)


def test_the_store_rebuilds_no_foreign_type(store: str, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint another program wrote to the shared store holding a type not ours nor
    LangGraph's safe ones is read as its data, never constructed."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from aidanbench.runner.campaign import connected, setup, store_questions
    from aidanbench.testing.fakes import brain_services

    from .test_checkpoints import Gadget, put_gadget

    async def go() -> Any:
        async with connected(store) as pool:
            await setup(pool)
            config = await put_gadget(AsyncPostgresSaver(pool))
        async with store_questions(store, brain_services(ScriptedBrain())) as questions:
            return await questions.graph.checkpointer.aget_tuple(config)

    found = asyncio.run(go())
    value = found.checkpoint["channel_values"]["gadget"]
    assert not isinstance(value, Gadget) and value == {"command": "rm -rf /"}
    assert "Blocked deserialization" in caplog.text


def test_a_store_stopped_for_ten_seconds_is_waited_out(
    tmp_path: Path, stub: OpenAIStub, api_key: str, one_process: OneProcess
) -> None:
    """PostgreSQL stopped mid-campaign and started again 10 s later: the run waits (and
    says so, without the pool's own logging), then finishes; the run directory holds
    exactly what the store holds, every score is exact, and each question is asked
    once, but for at most the steps in flight."""
    run_dir = tmp_path / "run"
    with local_postgres(PASSWORD) as own:
        url = own.new_database()
        proc = worker(stub, run_dir, "--store", url, "--concurrency", "2", key=api_key)
        until_generating(stub)
        own.stop()
        time.sleep(10)
        own.start()
        out = finished(proc, timeout=180)
        in_store = campaign_lines(url)
    assert scores(in_store) == one_process.scores
    assert scores(read_lines(run_dir)) == scores(in_store), "the run directory equals the store"
    asked = generations(stub)
    assert set(asked) == set(one_process.generations)
    assert sum(n - 1 for n in asked.values()) <= 2, "at most the steps in flight, again"
    assert "does not answer: waiting up to 60 s" in out and "answers again" in out
    assert "psycopg" not in out and "connection" not in out.lower(), "no pool logging"


def test_a_rerun_restores_lines_the_run_directory_lacks(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str, one_process: OneProcess
) -> None:
    """The run directory lost two lines the store holds as this machine's (an outage
    ended a run before they were written): a rerun restores them, says so, and asks
    nothing; damaged line files are rebuilt from the store."""
    run_dir = tmp_path / "run"
    finished(worker(stub, run_dir, "--store", store, key=api_key))
    lines = read_lines(run_dir)
    write_lines(run_dir, lines[2:])
    asked = stub.asked()
    out = finished(worker(stub, run_dir, "--store", store, key=api_key))
    assert stub.asked() == asked
    assert "lacked 2 question line(s) this machine had finished" in out
    assert scores(read_lines(run_dir)) == scores(campaign_lines(store)) == one_process.scores
    (run_dir / "answers.jsonl").write_text("damaged\n")
    out = finished(worker(stub, run_dir, "--store", store, "--questions", "1", key=api_key))
    assert "rebuilt 8 question lines from the run's threads" in out
    assert scores(read_lines(run_dir)) == one_process.scores


def stored_values(store: str, thread: str) -> dict[str, Any]:
    """A thread's values as the store's backend reads them."""
    from aidanbench.runner.campaign import store_questions
    from aidanbench.testing.fakes import brain_services

    async def read() -> dict[str, Any]:
        async with store_questions(store, brain_services(ScriptedBrain())) as questions:
            config = {"configurable": {"thread_id": thread}}
            return dict((await questions.graph.aget_state(config)).values)  # type: ignore[arg-type]

    return asyncio.run(read())


def numbers(values: dict[str, Any]) -> list[int]:
    """The numbers of a thread's answers, in order."""
    return [answer["index"] for answer in values["answers"]]


def test_a_rerun_runs_again_a_thread_that_lost_steps(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str, one_process: OneProcess
) -> None:
    """A thread missing a checkpoint in the middle of its chain, as a crash of a database
    whose commits did not wait for the disk left it (an older version's campaign): its
    answers before the hole are gone, and its line was made from what was left. A rerun
    finds it, says so, forgets it and runs it again from its first answer: every score is
    exact again, the run directory equals the store, and nothing else is asked."""
    import psycopg

    run_dir = tmp_path / "run"
    finished(worker(stub, run_dir, "--store", store, key=api_key))
    longest = max(campaign_lines(store), key=lambda line: len(line.answers))
    thread = longest.thread
    with psycopg.connect(store, autocommit=True) as conn:
        ids = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id",
            (thread,),
        ).fetchall()
        hole = ids[len(ids) // 2][0]
        conn.execute("DELETE FROM checkpoints WHERE checkpoint_id = %s", (hole,))
        conn.execute("DELETE FROM aidanbench_lines WHERE thread_id = %s", (thread,))
    write_lines(run_dir, [line for line in read_lines(run_dir) if line.thread != thread])
    assert numbers(stored_values(store, thread))[0] > 1, "the thread lost its first answers"

    stub.clear()
    out = finished(worker(stub, run_dir, "--store", store, key=api_key))
    assert scores(campaign_lines(store)) == one_process.scores
    assert scores(read_lines(run_dir)) == one_process.scores
    assert "lost steps it had recorded (answer(s) 1" in out and "run again from its first" in out
    kept = numbers(stored_values(store, thread))
    assert kept == list(range(1, len(longest.answers) + 1))
    asked = {(model, prompt) for model, prompt in generations(stub)}
    again = {key for key in one_process.generations if key[1].count(longest.question) > 0}
    assert asked == {key for key in again if key[0] == longest.model}, "that thread alone"


TEXT = "\x00\u2028\u2029\x1e\rlone CR, \ufdd0 and \\u0000 written out"
"""NUL (which PostgreSQL text cannot hold), line and record separators, a lone CR, the
store's own escape character (``runner.campaign.ESCAPE``) and an escape written out."""


class Texting(ScriptedBrain):
    """The scripted answers with ``TEXT`` inside each one, and a first answer of a megabyte."""

    def answer_text(self, question: str, k: int, previous: Sequence[str] = ()) -> str:
        text = super().answer_text(question, k, previous)
        if previous and text == previous[0]:
            return text  # the repeat that ends the chain stays a repeat
        if not previous:
            return f"{text} {'megabyte ' * 120_000}{TEXT}"
        return f"{text[:12]}{TEXT}{text[12:]}"


def test_any_text_round_trips_through_the_store(
    tmp_path: Path, store: str, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A question holding NUL and the store's escape, answers holding NUL, separators, a
    lone CR and a megabyte: the campaign runs to its end, and the store, the run directory
    and a run without a store hold the same lines, every text exact."""
    questions = [f"What is a name{TEXT}for a river?", "What can a lantern light?"]
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(questions), "utf-8")
    brain = Texting(dict.fromkeys(questions, 2))
    with OpenAIStub(brain, models=SERVED) as stub:
        alone, shared = tmp_path / "alone", tmp_path / "shared"
        flags = ("--questions-file", str(path))
        assert main(stub_run(stub.base_url, alone, *flags)) == 0
        assert main(stub_run(stub.base_url, shared, *flags, "--store", store)) == 0
    lines = read_lines(alone)
    assert "\x00" in lines[0].question and "\ufdd0" in lines[0].question
    assert all(TEXT in a.answer for line in lines for a in line.answers[:-1])
    assert max(len(a.answer) for line in lines for a in line.answers) > 1_000_000
    texts = scores(lines)
    assert scores(campaign_lines(store)) == texts
    assert scores(read_lines(shared)) == texts
    capsys.readouterr()
    assert main(["report", "--store", store, "--json"]) == 0


def test_a_rerun_records_lines_the_store_lacks_and_says_so(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str, one_process: OneProcess
) -> None:
    """Two finished threads without their line in the store (a run ended by an outage
    between the last checkpoint and the line): a rerun records them from their threads as
    this machine's, says so, and asks nothing."""
    import psycopg

    run_dir = tmp_path / "run"
    finished(worker(stub, run_dir, "--store", store, key=api_key))
    gone = [line.thread for line in campaign_lines(store)[:2]]
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute("DELETE FROM aidanbench_lines WHERE thread_id = ANY(%s)", (gone,))
    asked = stub.asked()
    out = finished(worker(stub, run_dir, "--store", store, key=api_key))
    assert "the store lacked the line of 2 finished question(s)" in out
    assert stub.asked() == asked
    assert scores(campaign_lines(store)) == scores(read_lines(run_dir)) == one_process.scores


def test_a_line_its_worker_is_recording_is_left_to_it(
    tmp_path: Path, stub: OpenAIStub, store: str, api_key: str
) -> None:
    """A thread finished in the store whose worker, still holding its claim, has not yet
    recorded its line (the moment between its last checkpoint and its line): another
    machine waits for it instead of recording the line as its own, so one run directory
    holds each line."""
    import psycopg
    from psycopg.types.json import Jsonb

    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    finished(worker(stub, a, "--store", store, key=api_key))
    line = campaign_lines(store)[0]
    with psycopg.connect(store, autocommit=True) as conn:
        kept = conn.execute(
            "SELECT line, machine FROM aidanbench_lines WHERE thread_id = %s", (line.thread,)
        ).fetchone()
        assert kept is not None
        conn.execute("DELETE FROM aidanbench_lines WHERE thread_id = %s", (line.thread,))
        conn.execute(
            "UPDATE aidanbench_claims SET owner = 'machine-a', heartbeat = now(), "
            "released = false WHERE thread_id = %s",
            (line.thread,),
        )
    late = worker(
        stub, b, "--store", store, "--claim-lease", "600", "--claim-poll", "0.3", key=api_key
    )
    log = b.with_name(b.name + ".log")
    deadline = time.monotonic() + 60
    while "running on other workers" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "1 question(s) running on other workers" in log.read_text(), "it waits for it"
    with psycopg.connect(store, autocommit=True) as conn:  # machine-a records it now
        conn.execute(
            "INSERT INTO aidanbench_lines (thread_id, line, machine) VALUES (%s, %s, %s)",
            (line.thread, Jsonb(kept[0]), kept[1]),
        )
        conn.execute(
            "UPDATE aidanbench_claims SET released = true WHERE thread_id = %s", (line.thread,)
        )
    finished(late)
    assert read_lines(b) == [], "machine-b ran nothing and holds no line"
    assert {x.thread for x in read_lines(a)} == {x.thread for x in campaign_lines(store)}
