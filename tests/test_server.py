"""The graphs on a real LangGraph server (``langgraph dev``), driven with langgraph-sdk.

One server per module (it takes several seconds to start), fed by one local
``OpenAIStub`` that plays the model, the judge and the embeddings; the stub's URL travels
in each run's ``context`` and the key in the server's environment, never in a run.
The stub's chains end on gibberish rather than on a repeat, so in a correct run every
request is different: a request seen twice is work done twice.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import langgraph_sdk  # a dependency of langgraph itself
import pytest

from aidanbench.cli.main import build_parser, main
from aidanbench.cli.run import run_spec
from aidanbench.runner.progress import Progress
from aidanbench.runner.remote import follow, plan, remote_context, server_thread_id, state_values
from aidanbench.runner.session import model_fields
from aidanbench.runner.spec import build_tasks
from aidanbench.runner.tasks import Task
from aidanbench.services import default_services
from aidanbench.testing import Latency, OpenAIStub, RecordedRequest, ScriptedBrain, when
from aidanbench.testing.faults import http_error

from .commands import interrupt_after
from .conftest import REPO, TEST_KEY
from .graphs import comparable, run_question
from .test_cli_run import QUESTIONS, read_results, run_args
from .test_http import stub_settings

pytestmark = [pytest.mark.server, pytest.mark.e2e]

LANGGRAPH = Path(sys.executable).with_name("langgraph")
if not LANGGRAPH.exists() and shutil.which("langgraph"):
    LANGGRAPH = Path(str(shutil.which("langgraph")))
if not LANGGRAPH.exists():
    pytest.skip("langgraph CLI not installed (pip install -e '.[server]')", allow_module_level=True)

QUESTION = "aidanbench_question"
BENCHMARK = "aidanbench_benchmark"
STREAMED = "Name a use for a paperclip."
PAUSED = "What could a mirror be used for?"
JOINED = "How could a city use its rooftops?"
FANNED = ["Invent a new board game.", "Describe a new colour.", "Name a new sport."]
CHAINS = {STREAMED: 3, PAUSED: 3, JOINED: 3, **dict(zip(FANNED, (2, 3, 4), strict=True))}
CHAINS |= {q: 3 + i for i, q in enumerate(QUESTIONS)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    """Poll ``/ok`` until the server answers; fail with its log if it dies or hangs."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with direct.open(f"{url}/ok", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"langgraph dev not ready after {timeout} s:\n{log.read_text()[-3000:]}")


@dataclass
class Server:
    """A running ``langgraph dev``: its URL and its process (the leader of its group)."""

    url: str
    proc: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL to the whole group, as a crash would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)

    def stop(self) -> None:
        """SIGTERM to the group; SIGKILL if it is still there after 15 s."""
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


@contextmanager
def langgraph_dev(workdir: Path, *extra: str) -> Iterator[Server]:
    """``langgraph dev`` serving this checkout's ``langgraph.json`` on a free port, from
    ``workdir`` (its log in ``server.log`` there), with the test key; ready when yielded,
    stopped with its group at the end."""
    log = workdir / "server.log"
    port = free_port()
    env = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "1",
        "AIDANBENCH_TEST_KEY": TEST_KEY,
    }
    command = [
        str(LANGGRAPH),
        *("dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)),
        *("--config", str(REPO / "langgraph.json"), *extra),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    running = Server(f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(running.url, proc, log)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def model_stub() -> Iterator[OpenAIStub]:
    """The one OpenAI-compatible endpoint every role of every run in this module uses."""
    with OpenAIStub(ScriptedBrain(CHAINS, default_ending="coherence")) as stub:
        yield stub


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``langgraph dev`` on a free port, in a scratch directory, stopped with its group."""
    workdir = tmp_path_factory.mktemp("langgraph-dev")
    with langgraph_dev(workdir, "--n-jobs-per-worker", "16") as running:
        yield running.url


@pytest.fixture
def stub(model_stub: OpenAIStub) -> Iterator[OpenAIStub]:
    """The module's stub with nothing recorded, no faults and no latency."""
    model_stub.clear()
    yield model_stub
    model_stub.faults = None
    model_stub.latency = Latency()


def context(stub: OpenAIStub, **overrides: Any) -> dict[str, Any]:
    """A run's context: settings as JSON, every role at the stub, no key."""
    return stub_settings(stub, **overrides).model_dump(mode="json")


Asked = tuple[str, str | None, str, tuple[str, ...]]


def asked(request: RecordedRequest) -> Asked:
    """What a request asked, and of which model."""
    return (request.kind, request.model, request.prompt, request.texts)


def repeated(requests: list[RecordedRequest]) -> list[Asked]:
    """Requests asked more than once: work done twice, within one thread."""
    return [key for key, n in Counter(asked(r) for r in requests).items() if n > 1]


def beyond(requests: list[RecordedRequest], clean: Counter[Asked]) -> Counter[Asked]:
    """Model and judge requests asked more often than in a clean run of the same work.

    Across threads identical requests are legitimate (two models give the stub's same
    answer, and the judge is asked about each), so runs are compared as multisets.
    Embeddings are left out: they are cached by content, and two threads embedding the
    same text at the same moment may both miss the cache, whatever the run.
    """
    return Counter(asked(r) for r in requests if r.kind != "embed") - clean


async def assistant_id(client: Any, graph_id: str) -> str:
    """The id of the assistant the server made for a graph of ``langgraph.json``."""
    (assistant,) = await client.assistants.search(graph_id=graph_id, limit=2)
    return str(assistant["assistant_id"])


async def new_thread(client: Any) -> str:
    thread_id = str(uuid.uuid4())
    await client.threads.create(thread_id=thread_id)
    return thread_id


async def test_schemas_describe_the_graphs(server: str) -> None:
    client = langgraph_sdk.get_client(url=server)
    try:
        question = await client.assistants.get_schemas(await assistant_id(client, QUESTION))
        benchmark = await client.assistants.get_schemas(await assistant_id(client, BENCHMARK))
    finally:
        await client.aclose()

    fields = question["input_schema"]["properties"]
    assert list(fields) == ["question"]
    assert fields["question"]["description"].startswith("The open-ended question")
    output = question["output_schema"]["properties"]
    assert {"score", "stop_reason", "answers", "novelty_sum"} <= set(output)
    assert all(spec.get("description") for spec in output.values()), output
    record = question["output_schema"]["$defs"]["AnswerRecord"]["properties"]
    assert record["coherence"]["description"].startswith("Judge's coherence score, 0-100")

    settings = question["context_schema"]["properties"]
    assert settings["model"]["default"] == "gpt-4o-mini"
    assert settings["coherence_threshold"]["default"] == 15.0
    assert settings["interrupt_on_reject"]["default"] is False
    assert all(spec.get("description") for spec in settings.values())

    inputs = benchmark["input_schema"]["properties"]
    assert set(inputs) == {"questions", "question_limit"}
    assert all(spec.get("description") for spec in inputs.values())
    assert set(benchmark["output_schema"]["properties"]) == {"results", "summary"}
    assert benchmark["context_schema"] == question["context_schema"]


async def test_question_run_streams_and_checkpoints(
    server: str, stub: OpenAIStub, api_key: str
) -> None:
    client = langgraph_sdk.get_client(url=server)
    try:
        thread_id = await new_thread(client)
        parts = [
            part
            async for part in client.runs.stream(
                thread_id,
                QUESTION,
                input={"question": STREAMED},
                context=context(stub),
                stream_mode=["updates", "custom"],
            )
        ]
        state = await client.threads.get_state(thread_id)
        history = await client.threads.get_history(thread_id, limit=100)
    finally:
        await client.aclose()
    assert not [p for p in parts if p.event == "error"], parts

    nodes = [name for p in parts if p.event == "updates" for name in p.data]
    assert nodes[0] == "prepare"
    assert Counter(nodes)["decide"] == 4
    assert {"generate", "judge", "embed_novelty", "generate_next"} <= set(nodes)
    events = [p.data for p in parts if p.event == "custom" and p.data.get("event") == "answer"]
    assert [(e["index"], e["valid"], e["score"]) for e in events] == [
        (1, True, 1),
        (2, True, 2),
        (3, True, 3),
        (4, False, 3),
    ]
    assert [e["coherence"] for e in events] == [80.0, 80.0, 80.0, 5.0]
    assert events[-1]["stop_reason"] == "coherence"

    values = state["values"]
    assert isinstance(values, dict)
    assert (values["score"], values["stop_reason"], len(values["answers"])) == (3, "coherence", 4)
    assert not state["next"]
    assert len(history) >= 1 + 2 * 4, "a checkpoint per step: scoring and deciding each turn"
    scores = [h["values"].get("score") for h in reversed(history) if h["values"].get("score")]
    assert scores == sorted(scores) and scores[-1] == 3

    assert not repeated(stub.requests)
    assert {r.headers["authorization"] for r in stub.requests} == {f"Bearer {TEST_KEY}"}
    local = await run_question(default_services, STREAMED, stub_settings(stub))
    assert comparable(values["answers"]) == comparable(local["answers"])


async def test_pause_and_resume_repeat_no_work(server: str, stub: OpenAIStub) -> None:
    """A pause after every answer; resuming re-runs only ``decide``, which calls nothing."""
    client = langgraph_sdk.get_client(url=server)
    paused = context(stub, interrupt_every=1)
    pauses: list[dict[str, Any]] = []
    try:
        thread_id = await new_thread(client)
        out = await client.runs.wait(
            thread_id, QUESTION, input={"question": PAUSED}, context=paused
        )
        while (await client.threads.get(thread_id))["status"] == "interrupted":
            assert isinstance(out, dict)
            (pause,) = out["__interrupt__"]
            pauses.append(pause["value"])
            calls = stub.count()
            out = await client.runs.wait(
                thread_id, QUESTION, command={"resume": "looked"}, context=paused
            )
            if len(pauses) < 4:
                assert stub.count() > calls, "the next turn ran"
        state = await client.threads.get_state(thread_id)
    finally:
        await client.aclose()
    assert [(p["reason"], p["answer"]["index"], p["score"]) for p in pauses] == [
        ("review", 1, 1),
        ("review", 2, 2),
        ("review", 3, 3),
        ("review", 4, 3),
    ]
    values = state["values"]
    assert isinstance(values, dict)
    assert (values["score"], values["stop_reason"]) == (3, "coherence")
    assert not repeated(stub.requests), "resuming asked for finished work again"
    assert Counter(r.kind for r in stub.requests)["coherence"] == 4


async def test_benchmark_graph_totals_three_questions(server: str, stub: OpenAIStub) -> None:
    client = langgraph_sdk.get_client(url=server)
    try:
        thread_id = await new_thread(client)
        out = await client.runs.wait(
            thread_id, BENCHMARK, input={"questions": FANNED}, context=context(stub)
        )
    finally:
        await client.aclose()
    assert isinstance(out, dict)
    summary = out["summary"]
    assert summary["score"] == 2 + 3 + 4
    assert summary["questions"] == 3
    assert summary["stop_reasons"] == {"coherence": 3}
    assert summary["errored"] == []
    assert sorted(r["question"] for r in out["results"]) == sorted(FANNED)
    assert summary["novelty_sum"] == pytest.approx(sum(r["novelty_sum"] for r in out["results"]))
    assert not repeated(stub.requests)


@dataclass(frozen=True)
class LocalRun:
    """The same run as the remote ones, driven locally: what they must match."""

    run_dir: Path
    asked: Counter[Asked]


@pytest.fixture(scope="module")
def local_run(model_stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory) -> LocalRun:
    run_dir = tmp_path_factory.mktemp("local") / "run"
    model_stub.clear()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIDANBENCH_TEST_KEY", TEST_KEY)
        assert main(run_args(model_stub, run_dir)) == 0
    return LocalRun(run_dir, Counter(asked(r) for r in model_stub.requests))


def remote_args(stub: OpenAIStub, run_dir: Path, server: str, *extra: str) -> list[str]:
    return [*run_args(stub, run_dir, *extra), "--server", server]


def own_threads(name: str) -> tuple[str, str]:
    """A scoring setting the stub ignores, so a test's threads are its own on the shared
    server: threads are keyed by scoring settings only (operational ones are shared)."""
    return ("--model-kwargs", json.dumps({"user": name}))


def answer_keys(run_dir: Path) -> list[tuple[str, str, int]]:
    lines = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    return [(a["model"], a["question"], a["index"]) for a in lines]


def test_remote_run_matches_the_local_run(
    server: str,
    local_run: LocalRun,
    stub: OpenAIStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIDANBENCH_TEST_KEY", raising=False)  # the client needs no key
    run_dir = tmp_path / "remote"
    assert main(remote_args(stub, run_dir, server)) == 0
    assert read_results(run_dir) == read_results(local_run.run_dir)
    assert answer_keys(run_dir) == answer_keys(local_run.run_dir)
    assert json.loads((run_dir / "metadata.json").read_text())["server"] == server
    assert not (run_dir / "checkpoints.sqlite").exists(), "the server holds the checkpoints"
    assert not beyond(stub.requests, local_run.asked)

    asked_once = stub.count()
    assert main(remote_args(stub, run_dir, server)) == 0, "rerun of a finished run"
    moved = remote_args(stub, run_dir, server, "--request-timeout", "60", "--max-retries", "2")
    assert main(moved) == 0, "operational settings changed: the same threads, found finished"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert [s["operational"]["max_retries"] for s in meta["sessions"]] == [4, 4, 2]
    assert main(remote_args(stub, tmp_path / "same-settings", server)) == 0
    assert stub.count() == asked_once, "finished threads are found by their ids and skipped"
    assert read_results(tmp_path / "same-settings") == read_results(local_run.run_dir)


def test_errored_questions_are_retried_on_the_server(
    server: str, local_run: LocalRun, stub: OpenAIStub, tmp_path: Path
) -> None:
    run_dir = tmp_path / "remote"
    args = remote_args(stub, run_dir, server, "--max-retries", "0", *own_threads("errored"))
    stub.faults = when("coherence", http_error(500, "judge down"), match="Idea 2 ")
    assert main(args) == 1
    lines = [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]
    assert {line["stop_reason"] for line in lines} == {"error"}
    assert {line["score"] for line in lines} == {1}
    failed = Counter(asked(r) for r in stub.requests if r.status == 500)
    assert failed.total() == 2 * len(QUESTIONS)

    stub.faults = None
    assert main(args) == 0
    assert read_results(run_dir) == read_results(local_run.run_dir)
    assert beyond(stub.requests, local_run.asked) == failed, "only failed calls are asked again"


def test_a_refused_model_stops_a_server_run_with_one_line(
    server: str, stub: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server's graph raises ``EndpointRefused`` like the local one: the client
    stops with its one line and exit 2, and no question is charged an error."""
    run_dir = tmp_path / "remote"
    args = remote_args(stub, run_dir, server, *own_threads("refused"))
    refusal = http_error(404, "The model does not exist", code="model_not_found")
    stub.faults = when("generate", refusal)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.search(r"does not serve m[12] \(HTTP 404 model_not_found", err[-1]), err
    assert (run_dir / "questions.jsonl").read_text() == ""
    assert json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]["status"] == (
        "refused"
    )


def test_killed_client_rerun_collects_the_server_runs(
    server: str, local_run: LocalRun, stub: OpenAIStub, tmp_path: Path
) -> None:
    """Killing the client leaves its runs going on the server; the rerun joins them,
    skips the ones that finished and starts the rest, asking nothing twice."""
    stub.latency = Latency(generate=0.03, coherence=0.04, embed=0.01)
    run_dir = tmp_path / "remote"
    args = remote_args(
        stub, run_dir, server, "--max-retries", "1", "--concurrency", "3", *own_threads("killed")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "aidanbench.cli.main", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    interrupt_after(proc, stub, 8, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    written = answer_keys(run_dir) if (run_dir / "answers.jsonl").exists() else []
    assert len(written) < 2 * (4 + 5 + 6 + 7), "killed before the end"

    assert main(args) == 0
    assert read_results(run_dir) == read_results(local_run.run_dir)
    keys = answer_keys(run_dir)
    assert len(keys) == len(set(keys)) == 2 * (4 + 5 + 6 + 7)
    assert not beyond(stub.requests, local_run.asked), "work was done twice"


def test_thread_paused_in_studio_is_continued_by_the_cli(
    server: str, local_run: LocalRun, stub: OpenAIStub, tmp_path: Path
) -> None:
    """A question someone paused (``interrupt_every`` in Studio) is pending, not busy:
    the CLI continues it from its checkpoint, with its own settings (no more pauses)."""
    run_dir = tmp_path / "remote"
    args = remote_args(stub, run_dir, server, "--max-retries", "2", *own_threads("paused"))
    spec = run_spec(build_parser().parse_args(args))
    first = build_tasks(spec, model_fields(spec, None), spec.questions_list)[0]

    async def pause_first_question() -> str:
        client = langgraph_sdk.get_client(url=server)
        try:
            thread_id = server_thread_id(first)
            await client.threads.create(thread_id=thread_id)
            paused = {**remote_context(first), "interrupt_every": 2}
            await client.runs.wait(
                thread_id, QUESTION, input={"question": first.question}, context=paused
            )
            return str((await client.threads.get(thread_id))["status"])
        finally:
            await client.aclose()

    assert asyncio.run(pause_first_question()) == "interrupted"
    assert main(args) == 0
    assert read_results(run_dir) == read_results(local_run.run_dir)
    assert not beyond(stub.requests, local_run.asked), "work was done twice"


async def test_a_run_started_elsewhere_is_joined_not_repeated(
    server: str, stub: OpenAIStub
) -> None:
    """Two clients on the same settings: the second is refused a new run and joins."""
    stub.latency = Latency(generate=0.05, coherence=0.05, embed=0.02)
    task = Task(stub_settings(stub, max_retries=3), JOINED, 1)
    client = langgraph_sdk.get_client(url=server)
    try:
        step = await plan(client, task)
        assert step.action == "run" and step.start == {"question": JOINED}
        await client.runs.create(
            server_thread_id(task), QUESTION, input=step.start, context=remote_context(task)
        )
        progress = Progress(out=io.StringIO(), live=False)
        await follow(client, task, step, progress)
        values = state_values(await client.threads.get_state(server_thread_id(task)))
        runs = await client.runs.list(server_thread_id(task))
    finally:
        await client.aclose()
    assert len(runs) == 1
    assert (values["score"], values["stop_reason"]) == (3, "coherence")
    assert not repeated(stub.requests)
