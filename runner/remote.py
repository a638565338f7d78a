"""Question threads run on a LangGraph server (``aidanbench run --server URL``).

Scaling out without changing the benchmark: the server hosts the same
``aidanbench_question`` graph (``langgraph.json``), keeps the threads and checkpoints, and
spreads runs over its workers; ``runner.drive`` schedules, shows progress and writes the run
directory as for a local run. This backend only runs one thread on the server.

Each thread has a deterministic UUID, so the same command run again finds it as
``runner.tasks`` says, and a run still going on the server is joined. Runs go on when the
client disconnects: killing the client loses no work.

Settings travel as each run's ``context``; API keys never do: the server reads them from its
own environment, from the variables the settings name. The client authenticates to a
deployed server with ``LANGSMITH_API_KEY`` (read by ``langgraph_sdk``), never a model key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError
from langgraph_sdk.schema import ThreadState

from aidanbench.core.errors import EndpointRefused, UsageError, printable
from aidanbench.core.setting_kinds import scoring_settings
from aidanbench.runner.drive import Answers, Plan, report
from aidanbench.runner.tasks import Task, is_finished, start_input

ASSISTANT = "aidanbench_question"
"""The graph id of the per-question graph in ``langgraph.json``."""

THREAD_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/aidanmclaughlin/AidanBench")
"""Namespace of the UUID5 thread ids (server thread ids must be UUIDs)."""

INSPECT_CONCURRENCY = 16
"""Threads looked up at once before the run starts."""


class RemoteRunError(RuntimeError):
    """A run failed inside the server (a bug or a server error, not an API error)."""


def remote_context(task: Task) -> dict[str, Any]:
    """The settings sent as the run's context, without ``cache_path`` (a file on this
    machine: the server keeps its own cache)."""
    return task.settings.model_copy(update={"cache_path": None}).model_dump(mode="json")


def server_thread_id(task: Task) -> str:
    """A UUID5 of the task's thread id and its scoring settings: a server is shared, so runs
    that differ in a scoring setting never share a thread, and runs that agree share the
    work whatever their operational settings (each sent as the run's context)."""
    settings = json.dumps(scoring_settings(task.settings), sort_keys=True)
    digest = hashlib.sha256(settings.encode("utf-8")).hexdigest()[:16]
    return str(uuid.uuid5(THREAD_NAMESPACE, f"{task.thread_id}|s={digest}"))


def thread_metadata(task: Task) -> dict[str, Any]:
    """What the thread is, for searching threads on the server (and in Studio)."""
    s = task.settings
    return {
        "aidanbench_thread": task.thread_id,
        "model": s.model,
        "temperature": s.temperature,
        "question": task.question,
        "repeat": task.repeat,
    }


def state_values(state: ThreadState) -> dict[str, Any]:
    """A thread's state values (empty for a new thread)."""
    values = state["values"]
    return dict(values) if isinstance(values, dict) else {}


async def active_run(client: LangGraphClient, thread_id: str) -> str | None:
    """The run in progress on a thread, if any (a previous client's)."""
    for status in ("running", "pending"):
        runs = await client.runs.list(thread_id, status=status, limit=1)
        if runs:
            return str(runs[0]["run_id"])
    return None


async def check_server(client: LangGraphClient, server_url: str) -> None:
    """Fail with one line when the server is unreachable or lacks the question graph."""
    try:
        found = await client.assistants.search(graph_id=ASSISTANT, limit=1)
    except httpx.TransportError as exc:
        raise UsageError(f"cannot reach the LangGraph server at {server_url}: {exc}") from None
    if not found:
        raise UsageError(
            f"the LangGraph server at {server_url} does not serve the {ASSISTANT!r} graph "
            "(deploy it with this package's langgraph.json)"
        )


async def plan(client: LangGraphClient, task: Task) -> Plan:
    """Create the task's thread if new, and decide how to bring it to a stop."""
    thread_id = server_thread_id(task)
    thread = await client.threads.create(
        thread_id=thread_id,
        if_exists="do_nothing",
        metadata=thread_metadata(task),
        graph_id=ASSISTANT,
    )
    state = await client.threads.get_state(thread_id)
    values = state_values(state)
    pending = bool(state["next"])
    if thread["status"] == "busy":
        run_id = await active_run(client, thread_id)
        if run_id is not None:
            return Plan("join", values, run_id=run_id)
    if is_finished(values, pending):
        return Plan("skip", values)
    return Plan("run", values, start=start_input(task, pending))


def _events(client: LangGraphClient, task: Task, step: Plan) -> AsyncIterator[Any]:
    thread_id = server_thread_id(task)
    if step.action == "join":
        assert step.run_id is not None
        return client.runs.join_stream(thread_id, step.run_id, stream_mode="custom")
    return client.runs.stream(
        thread_id,
        ASSISTANT,
        input=step.start,
        context=remote_context(task),
        stream_mode="custom",
        on_disconnect="continue",
        multitask_strategy="reject",
    )


async def follow(client: LangGraphClient, task: Task, step: Plan, progress: Answers) -> None:
    """Start (or join) the thread's run and pass its answer events to ``progress``; a run
    another client started meanwhile is joined instead of refused."""
    failure: Any = None
    try:
        parts = _events(client, task, step)
        async for part in parts:
            if part.event == "custom":
                report(progress, task, part.data)
            elif part.event == "error":
                failure = part.data  # raised once the stream has ended, not inside it
    except ConflictError:
        run_id = await active_run(client, server_thread_id(task))
        if run_id is None:
            raise
        await follow(client, task, Plan("join", run_id=run_id), progress)
        return
    if failure is not None:
        if isinstance(failure, dict) and failure.get("error") == EndpointRefused.__name__:
            raise EndpointRefused(printable(" ".join(str(failure.get("message")).split())))
        raise RemoteRunError(_failure_text(failure))


def _failure_text(data: Any) -> str:
    """The server's error event as one line (its ``error`` and ``message`` when present)."""
    if isinstance(data, dict):
        parts = [str(data.get(k)) for k in ("error", "message") if data.get(k)]
        text = ": ".join(parts) or json.dumps(data)
    else:
        text = str(data)
    return " ".join(text.split())[:300]


class ServerLost(UsageError):
    """The LangGraph server stopped answering during a run."""


def failed_run(values: dict[str, Any], exc: RemoteRunError) -> dict[str, Any]:
    """A thread's values with the server-side failure as the question's error; the thread
    on the server is left as it was, so the same command run again invokes it again."""
    error = {
        "kind": "error",
        "role": "server",
        "message": f"server: the run failed: {exc}",
        "status": None,
        "retryable": True,
    }
    return {**values, "stop_reason": "error", "error": error}


class RemoteQuestions:
    """The question graph on a LangGraph server, through one SDK client."""

    def __init__(self, client: LangGraphClient) -> None:
        self.client = client

    async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
        lookups = asyncio.Semaphore(INSPECT_CONCURRENCY)

        async def inspect(task: Task) -> Plan:
            async with lookups:
                return await plan(self.client, task)

        return list(await asyncio.gather(*(inspect(task) for task in tasks)))

    def backlog(self) -> float:
        return 0.0  # the server's workers wait, not this client

    def warm(self, tasks: Sequence[Task]) -> None:
        """Nothing to prepare here: the server builds its own clients."""

    async def execute(self, task: Task, step: Plan, progress: Answers) -> dict[str, Any]:
        try:
            await follow(self.client, task, step, progress)
            failure = None
        except RemoteRunError as exc:
            failure = exc
        values = state_values(await self.client.threads.get_state(server_thread_id(task)))
        return values if failure is None else failed_run(values, failure)


@asynccontextmanager
async def remote_questions(server_url: str) -> AsyncIterator[RemoteQuestions]:
    """The server backend; a lost server ends the block as one ``ServerLost`` line. The
    drive loop bounds the runs this client follows; the server's workers, how many execute."""
    client = get_client(url=server_url)
    # A lost connection is reported once, as ServerLost, after the SDK's reconnects; its
    # warning about each reconnect would only add lines before it.
    warnings.filterwarnings("ignore", message="Reconnecting without a Last-Event-ID")
    try:
        await check_server(client, server_url)
        yield RemoteQuestions(client)
    except httpx.TransportError as exc:
        raise ServerLost(
            f"lost the LangGraph server at {server_url} ({type(exc).__name__}: "
            f"{printable(' '.join(str(exc).split()))[:200]}); the finished questions are "
            "saved in the run directory and runs already started go on there if it is "
            "up: run the same command again to resume"
        ) from None
    finally:
        await client.aclose()
