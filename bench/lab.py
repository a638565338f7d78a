"""The lab-scale benchmark: this project against a loop in the original's style.

    python -m bench.lab [--runs 3] [--scale 0.1] [--rate 400] [--workloads a,b,c]

Workloads, each in a child process of its own (so CPU seconds and peak memory are that
run's alone) against a provider in another process (``bench.lab_serve``):

* (a) the published run replayed (5 models, 49 chains, 1,112 valid answers) with every
  default of ``aidanbench run`` (adaptive endpoint limits, aiohttp, checkpoints,
  score cache), all chains in flight; latencies generate 300 ms / judge 250 ms / embed
  50 ms, no rate limit unless ``--a-rate`` sets one. The scores must come out exactly
  as published.
* (b) 10 models x 63 questions of scripted chains (lengths drawn per model and question,
  mean ``--mean-length``, at most ``--max-length``), latencies drawn log-normally
  (medians 3 s generate, 2 s judge, 0.3 s embed, sigma ``--sigma``: a long tail) times
  ``--scale``, and a provider answering 429 above ``--rate`` requests per second.
* (c) the same work as (b), same provider, through a plain loop in the original's style:
  20 threads, each question generate -> judge -> embed one after another, the OpenAI
  client's own retries (``max_retries=10``, which honour ``Retry-After``).

For each: wall time against the longest question's pipelined bound (computed exactly
from the provider's latency draws: g1 + sum over turns of max(judge, embed, next
generate)), 429s the provider sent, CPU seconds per turn of the measuring process, peak
memory (max RSS), prompt characters the provider received, and the ratio to (c).
With a rate limit, also the rate floor (``rate_floor``); ``python -m bench.schedule``
simulates (b) under both limits at once, for the order a run can know and for an oracle.

``--variant`` runs (a)/(b) otherwise: ``command`` through the run engine exactly as
``aidanbench run`` drives it with no flags but the endpoints (a ``RunSpec`` with no
concurrency, checked and run by ``runner.engine``: lock, metadata, usage ledger, log-mode
progress; on (a) the grid's one pair the published run lacks, gpt-4-turbo on its tenth
question, left out), ``concurrency-8`` with 8 questions in flight (the default before it
became automatic); or with one optimisation switched off, for deciding which earn
their place: ``fixed-limit`` (the limit held at 16, no adaptation: the old default),
``httpx`` (the httpx transport instead of aiohttp), ``no-batching`` (one embedding
request per answer), ``plain-saver`` (LangGraph's ``AsyncSqliteSaver`` instead of
``InlineCommitSaver``), ``write-always`` (output files rewritten on every finished
question), ``chatopenai`` (langchain-openai's ``ChatOpenAI`` for the chat roles instead of
``OpenAIChat``), ``client-post`` (requests through the OpenAI client instead of
``services.direct_post``), ``aiohttp-post`` (``services.direct_post`` through aiohttp's
session instead of ``services.http1``'s connections), ``thread-routers`` (routers in
LangGraph's worker threads),
``write-all`` (``decide`` writes every key), ``setup-lock`` (the saver's set-up lock on
every step), ``wait-for`` (``asyncio.wait_for``: a task per request), ``traced-routers``
(every router run traced, in a task of its own), ``shielded-ends`` (LangChain's shielded
task for every chain-run end, heard or not), ``traced-nodes`` (every node run reported to
LangChain's callback managers and awaited in a task of its own, heard or not),
``read-back`` (a question's final values read back from the checkpointer),
``settings-json`` (services found by the settings' JSON on every node call),
``pydantic-ledger`` (each usage line validated and dumped by pydantic); a variant joined to
another by ``+`` (``workers-1+pydantic-ledger``) runs the first's way with the
second's optimisation off too (only in the measuring process: the command's own worker
processes start afresh, so pair a switch with ``workers-1``); ``workers-1`` and
``workers-2`` run the command with that many worker processes (``--workers``; the
``command`` variant picks its own number, ``runner.workers.worker_count``), and count
their CPU too. uvloop was measured
the same way and removed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

from bench.processes import ROOT, parent_or_child, served
from bench.schedule import (
    LAB_MEDIANS,
    Floors,
    Lane,
    chains_of,
    floors,
    lab_models,
    rate_floor,
    simulate,
    workload_arguments,
)

KEY = "AIDANBENCH_LAB_KEY"
VARIANTS = (
    "default",
    "command",
    "concurrency-8",
    "fixed-limit",
    "httpx",
    "no-batching",
    "plain-saver",
    "write-always",
    "chatopenai",
    "thread-routers",
    "wait-for",
    "client-post",
    "write-all",
    "setup-lock",
    "workers-1",
    "workers-2",
    "traced-routers",
    "shielded-ends",
    "read-back",
    "settings-json",
    "pydantic-ledger",
    "traced-nodes",
    "aiohttp-post",
)


# --- the provider ---------------------------------------------------------------------


def provider(args: Sequence[str]) -> AbstractContextManager[str]:
    """``bench.lab_serve`` in a child process; yields its base URL."""
    return served("bench.lab_serve", args)


def run_command(models: list[str], questions: int, url: str, run_dir: Path) -> list[str]:
    """``aidanbench run`` of ``models`` on the first ``questions`` against the lab provider."""
    argv = [sys.executable, "-m", "aidanbench.cli.main", "run", "--run-dir", str(run_dir)]
    for model in models:
        argv += ["-m", model]
    argv += ["--questions", str(questions), "--judge-model", "lab-judge"]
    argv += ["--embedding-model", "lab-embedding"]
    for role in ("", "judge-", "embedding-"):
        argv += [f"--{role}base-url", url, f"--{role}api-key-env", KEY]
    return argv


def server_stats(url: str, reset: bool = False) -> dict[str, int]:
    root = url.split()[0].removesuffix("/v1")
    request = urllib.request.Request(f"{root}/stats", method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=30) as reply:
        stats: dict[str, int] = json.loads(reply.read())
    return stats


# --- bounds ---------------------------------------------------------------------------


def lab_floors(args: argparse.Namespace, lines: list[str]) -> Floors:
    """(b)'s floors under its provider's limits, and its simulated runs (the order a run
    can know, and an oracle's), each a line of ``lines``."""
    chains = chains_of(args)
    lane = Lane(rate=args.rate or None, burst=args.burst)
    floor = floors(chains, args.limits, lane)
    lines.append(
        f"(b)/(c) {args.models} models x {args.questions} questions, medians 3/2/0.3 s "
        f"x {args.scale}, sigma {args.sigma}, limits {args.limits}, 429 above {args.rate}/s "
        f"a bucket (burst {args.burst or args.rate:g}); bound {floor.bound:.1f} s, rate floor "
        f"{floor.rate:.1f} s, lower bound {floor.lower:.1f} s"
    )
    for order in ("arrival", "critical"):
        wall = simulate(chains, rate=lane.rate, burst=lane.burst, limits=args.limits, order=order)
        lines.append(
            f"    simulated (bench.schedule), {order} order: {wall:.1f} s "
            f"({wall / floor.bound:.2f}x bound, {wall / floor.lower:.2f}x lower bound)"
        )
        print(lines[-1], flush=True)
    return floor


def published_bound() -> float:
    from aidanbench.testing.published import published_chains

    turns = max(len(chain.answers) for chain in published_chains())
    return 0.3 + turns * 0.3


# --- one measured run (child process) -------------------------------------------------


def endpoints(urls: str, models: Sequence[str]) -> dict[str, str]:
    """Each model's, the judge's (``judge``) and the embedder's (``embedding``) base URL
    among the provider's ``urls`` (``bench.lab_serve --endpoints``): one each when it
    serves one per model and two more, else all the first."""
    served = urls.split()
    if len(served) < len(models) + 2:
        return dict.fromkeys([*models, "judge", "embedding"], served[0])
    return {**dict(zip(models, served, strict=False)), "judge": served[-2], "embedding": served[-1]}


def lab_settings(
    url: str, model: str, run_dir: Path, variant: str, models: Sequence[str] = ()
) -> Any:
    """Settings of ``model`` against the lab provider at ``url`` (its URLs line: each of
    ``models`` at its own endpoint when it serves one each, ``endpoints``)."""
    from aidanbench.core.settings import Settings

    urls = endpoints(url, models or [model])
    settings = Settings(
        model=model,
        base_url=urls[model],
        api_key_env=KEY,
        judge_model="lab-judge",
        judge_base_url=urls["judge"],
        judge_api_key_env=KEY,
        embedding_model="lab-embedding",
        embedding_base_url=urls["embedding"],
        embedding_api_key_env=KEY,
        cache_path=str(run_dir / "cache.sqlite"),
        request_timeout=120,
        max_retries=10,
    )
    if variant == "fixed-limit":
        return settings.model_copy(update={"max_concurrency": 16})
    return settings  # the default ceiling (--endpoint-concurrency)


def tasks_for(workload: str, url: str, run_dir: Path, args: argparse.Namespace) -> list[Any]:
    from aidanbench.cli.demo import demo_tasks
    from aidanbench.graph.questions import bundled_questions
    from aidanbench.runner.tasks import Task
    from aidanbench.testing.published import published_chains

    if workload == "a":
        update: dict[str, Any] = {}  # the drive loop alone: no ledger
        if args.variant == "fixed-limit":
            update["max_concurrency"] = 16
        return [
            Task(t.settings.model_copy(update=update), t.question, t.repeat)
            for t in demo_tasks(published_chains(), url, run_dir)
        ]
    out = []
    models = lab_models(args.models)
    for model in models:
        settings = lab_settings(url, model, run_dir, args.variant, models)
        out += [Task(settings, q, 1) for q in bundled_questions(args.questions)]
    return out


def apply_variant(variant: str) -> None:
    """Switch one optimisation off for this process (``--variant``)."""
    if variant == "no-batching":
        from aidanbench.services import batching

        batching.EmbeddingBatcher._schedule = _unbatched  # type: ignore[method-assign]
    elif variant == "plain-saver":
        from contextlib import asynccontextmanager

        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        from aidanbench.runner import local

        @asynccontextmanager
        async def plain(path: Path) -> Any:
            async with aiosqlite.connect(str(path)) as conn:
                saver = AsyncSqliteSaver(conn)
                await saver.setup()
                yield saver

        local.open_checkpointer = plain
    elif variant == "thread-routers":
        from aidanbench.graph import question

        question.on_event_loop = lambda router: router  # type: ignore[assignment, return-value]
    elif variant == "wait-for":
        from aidanbench.services import batching, retry

        retry.attempt_once = _attempt_in_task
        batching.EmbeddingBatcher._fetch = _fetch_in_task  # type: ignore[method-assign]
    elif variant == "client-post":
        from aidanbench.services.direct_post import DirectPost

        DirectPost.of = classmethod(lambda cls, client, pool: None)  # type: ignore[assignment, method-assign]
    elif variant == "aiohttp-post":
        from aidanbench.services import direct_post

        direct_post.connections_of = lambda pool, transport: None  # type: ignore[assignment, return-value]
    elif variant == "write-all":
        from aidanbench.nodes import decide

        decide.changes = lambda state, update: update
    elif variant == "setup-lock":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        from aidanbench.runner.checkpoints import InlineCommitSaver

        InlineCommitSaver.setup = AsyncSqliteSaver.setup  # type: ignore[method-assign]
    elif variant == "traced-routers":
        from aidanbench.graph import question

        question.on_event_loop = _traced_router
    elif variant == "shielded-ends":
        from aidanbench.runner import local, workers

        local.quiet_chain_ends = workers.quiet_chain_ends = lambda: None
    elif variant == "traced-nodes":
        from aidanbench.runner import local, workers

        local.quiet_node_runs = workers.quiet_node_runs = lambda: None
    elif variant == "read-back":
        from aidanbench.runner import local

        local.LocalQuestions.execute = _read_back  # type: ignore[method-assign]
    elif variant == "settings-json":
        from aidanbench.services import registry

        registry.OpenAIServices.__call__ = _json_keyed  # type: ignore[method-assign]
    elif variant == "pydantic-ledger":
        from aidanbench.record import usage

        usage.UsageLedger.write = _validated_write(usage.UsageLedger.write)  # type: ignore[method-assign]
    elif variant == "write-always":
        from aidanbench.record import recorder

        recorder.WRITE_EVERY_S = 0.0
        recorder.RunLines.__init__.__defaults__ = (0.0, time.monotonic, ())


def _validated_write(write: Any) -> Any:
    """``UsageLedger.write`` validating each line as a ``LedgerLine`` and writing its dump."""
    from aidanbench.record.usage import LedgerLine

    def validated(self: Any, line: Any) -> None:
        record = LedgerLine.model_validate({"t": round(time.time(), 3), **line})
        write(self, record.model_dump(mode="json", exclude_unset=True))

    return validated


def _traced_router(router: Any) -> Any:
    """A router as a plain coroutine function, which LangGraph traces on every call."""

    async def routed(state: Any, runtime: Any) -> Any:
        return router(state, runtime)

    routed.__name__ = router.__name__
    return routed


def _json_keyed(self: Any, settings: Any) -> Any:
    """``OpenAIServices.__call__`` keying every call by the settings' JSON."""
    state = self._state()
    key = settings.model_dump_json()
    if key not in state.services:
        state.services[key] = self._build(state, settings)
    return state.services[key]


async def _read_back(self: Any, task: Any, step: Any, progress: Any) -> dict[str, Any]:
    """``LocalQuestions.execute`` reading the thread's state back once it stops."""
    from aidanbench.runner import local

    async for event in self.graph.astream(
        step.start,
        {"configurable": {"thread_id": task.thread_id}},
        context=task.settings,
        stream_mode="custom",
        durability=local.DURABILITY,
    ):
        local.report(progress, task, event)
    state = await self.graph.aget_state({"configurable": {"thread_id": task.thread_id}})
    return dict(state.values)


async def _attempt_in_task(
    limiter: Any, limit_s: float | None, request: Any, model: str | None = None
) -> Any:
    """``services.retry.attempt_once`` with each request in a task of its own
    (``asyncio.wait_for``), as before ``asyncio.timeout``."""
    async with limiter.slot(model):
        return await asyncio.wait_for(request(), limit_s)


async def _fetch_in_task(self: Any, texts: list[str]) -> Any:
    """``EmbeddingBatcher._fetch`` with the request in a task of its own."""
    client = self.client()
    async with self.limiter.slot():
        self.requests += 1
        return await asyncio.wait_for(self._request(client, texts), self.timeout)


def _unbatched(self: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Send each waiting call as its own request at once (no coalescing)."""
    while self._waiting:
        call = self._waiting.pop(0)
        task = loop.create_task(self._send([call]))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)


async def graph_run(workload: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    from aidanbench.runner.local import drive_local
    from aidanbench.runner.progress import Progress
    from aidanbench.services import OpenAIServices

    transport: Literal["httpx", "aiohttp"] = "httpx" if args.variant == "httpx" else "aiohttp"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        tasks = tasks_for(workload, url, run_dir, args)
        cpu, start = time.process_time(), time.perf_counter()
        chat: Literal["langchain", "openai"] = (
            "langchain" if args.variant == "chatopenai" else "openai"
        )
        adaptive = args.variant != "fixed-limit"
        async with OpenAIServices(transport, chat=chat, adaptive=adaptive) as factory:
            lines = await drive_local(
                tasks,
                run_dir,
                concurrency=8 if args.variant == "concurrency-8" else None,
                progress=Progress(out=io.StringIO()),
                services=factory,
            )
            limits = {h: s.__dict__ for h, s in factory.endpoint_stats().items()}
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "wall": wall,
        "cpu": cpu,
        "turns": sum(len(line.answers) for line in lines),
        "score": sum(line.score or 0 for line in lines),
        "errored": sum(1 for line in lines if line.error),
        "limits": limits,
    }


async def command_run(workload: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The workload through the run engine as ``aidanbench run`` drives it: a ``RunSpec``
    with the endpoints and models only, checked and run by ``runner.engine`` with every
    default (clients, progress in log mode on stderr, questions in flight)."""
    from aidanbench.cli.demo import KEY_VARIABLE
    from aidanbench.core.settings import REFERENCE_EMBEDDING_MODEL, REFERENCE_JUDGE
    from aidanbench.graph.questions import bundled_questions
    from aidanbench.runner.engine import execute, prepare
    from aidanbench.runner.spec import RunSpec
    from aidanbench.testing.published import published_chains

    if workload == "a":
        chains = published_chains()
        models = list(dict.fromkeys(c.model for c in chains))
        questions = list(dict.fromkeys(c.question for c in chains))
        asked: set[tuple[str, str]] | None = {(c.model, c.question) for c in chains}
        key, judge, embedder = KEY_VARIABLE, REFERENCE_JUDGE, REFERENCE_EMBEDDING_MODEL
    else:
        models, questions = lab_models(args.models), bundled_questions(args.questions)
        asked = None
        key, judge, embedder = KEY, "lab-judge", "lab-embedding"
    settings: dict[str, Any] = {"judge_model": judge, "embedding_model": embedder}
    urls = endpoints(url, models)
    for role, where in (("", models[0]), ("judge_", "judge"), ("embedding_", "embedding")):
        settings |= {f"{role}base_url": urls[where], f"{role}api_key_env": key}
    with tempfile.TemporaryDirectory() as tmp:
        workers = int(args.variant.split("-")[1]) if args.variant.startswith("workers-") else None
        spec = RunSpec(
            models=models,
            questions=questions,
            run_dir=Path(tmp),
            settings=settings,
            workers=workers,
        )
        cpu, start = process_and_workers_cpu(), time.perf_counter()
        prepared = await prepare(spec)
        if asked is not None:
            kept = [t for t in prepared.tasks if (t.settings.model, t.question) in asked]
            prepared = dataclasses.replace(prepared, tasks=kept)
        prepared = dataclasses.replace(prepared, tasks=own_endpoints(prepared.tasks, urls))
        result = await execute(prepared)
        wall, cpu = time.perf_counter() - start, process_and_workers_cpu() - cpu
    return {
        "wall": wall,
        "cpu": cpu,
        "turns": sum(len(line.answers) for line in result.lines),
        "score": sum(line.score or 0 for line in result.lines),
        "errored": len(result.failed),
        "limits": result.metadata.endpoint_limits,
        "in_flight": result.metadata.sessions[-1].concurrency,
        "workers": result.metadata.sessions[-1].workers,
    }


def own_endpoints(tasks: Sequence[Any], urls: dict[str, str]) -> list[Any]:
    """``tasks`` each reaching its model at its own endpoint (``endpoints``), as a run's
    models on several providers do (a ``RunSpec`` gives its models one base URL)."""
    out = []
    for task in tasks:
        url = urls[task.settings.model]
        if url != task.settings.base_url:
            task = dataclasses.replace(
                task, settings=task.settings.model_copy(update={"base_url": url})
            )
        out.append(task)
    return out


def process_and_workers_cpu() -> float:
    """CPU seconds of this process and of its ended children (the run's worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def plain_work(workload: str, args: argparse.Namespace) -> list[tuple[str, str, float, str, str]]:
    """(model, question, temperature, judge, embedder) of each chain the plain loop runs:
    the published run's 49 on (a), the lab's models x questions on (b)."""
    if workload == "a":
        from aidanbench.core.settings import REFERENCE_EMBEDDING_MODEL, REFERENCE_JUDGE
        from aidanbench.testing.published import published_chains

        return [
            (c.model, c.question, c.temperature, REFERENCE_JUDGE, REFERENCE_EMBEDDING_MODEL)
            for c in published_chains()
        ]
    from aidanbench.graph.questions import bundled_questions

    return [
        (m, q, 0.7, "lab-judge", "lab-embedding")
        for m in lab_models(args.models)
        for q in bundled_questions(args.questions)
    ]


def plain_run(workload: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The original's shape: 20 threads, each question one step after another."""
    from openai import OpenAI

    from aidanbench.nodes.novelty import cosine_novelty
    from aidanbench.nodes.parsing import extract_answer, parse_score
    from aidanbench.nodes.prompts import render_coherence, render_generate

    client = OpenAI(base_url=url.split()[0], api_key="lab", timeout=120, max_retries=10)
    counted = {"turns": 0, "score": 0}
    lock = threading.Lock()

    def question(model: str, text: str, temperature: float, judge: str, embedder: str) -> None:
        answers: list[str] = []
        vectors: list[list[float]] = []
        while True:
            reply = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": render_generate(text, answers)}],
                temperature=temperature,
            )
            answer, _ = extract_answer(reply.choices[0].message.content or "")
            judged = client.chat.completions.create(
                model=judge,
                messages=[{"role": "user", "content": render_coherence(text, answer)}],
            )
            coherence = parse_score(judged.choices[0].message.content or "", "coherence_score")
            vector = client.embeddings.create(model=embedder, input=[answer]).data[0]
            novelty = cosine_novelty(vector.embedding, vectors)
            with lock:
                counted["turns"] += 1
            if not (coherence > 15 and novelty > 0.15):
                return
            answers.append(answer)
            vectors.append(vector.embedding)
            with lock:
                counted["score"] += 1

    work = plain_work(workload, args)
    cpu, start = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(20) as pool:
        for done in [pool.submit(question, *chain) for chain in work]:
            done.result()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"wall": wall, "cpu": cpu, **counted, "errored": 0, "limits": {}}


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault(KEY, "lab")
    os.environ.setdefault("AIDANBENCH_DEMO_KEY", "lab")
    args.variant, *switched_off = args.variant.split("+")
    for variant in (args.variant, *switched_off):
        apply_variant(variant)
    if args.child in ("c", "ca"):
        result = plain_run("a" if args.child == "ca" else "b", args.url, args)
    else:
        if args.variant == "command" or args.variant.startswith("workers-"):
            result = asyncio.run(command_run(args.child, args.url, args))
        else:
            result = asyncio.run(graph_run(args.child, args.url, args))
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["workers_peak_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


# --- the parent -----------------------------------------------------------------------


def measure(workload: str, url: str, args: argparse.Namespace, variant: str) -> dict[str, Any]:
    server_stats(url, reset=True)
    command = [
        sys.executable,
        "-m",
        "bench.lab",
        "--child",
        workload,
        "--url",
        url,
        "--variant",
        variant,
        *common_args(args),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"workload {workload} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(server_stats(url))
    return result


def common_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--models={args.models}",
        f"--questions={args.questions}",
        f"--mean-length={args.mean_length}",
        f"--max-length={args.max_length}",
        f"--scale={args.scale}",
        f"--sigma={args.sigma}",
    ]


def row(
    name: str,
    bound: float,
    r: dict[str, Any],
    plain: dict[str, Any] | None,
    lower: float | None = None,
) -> str:
    """One measured run; against (c) when ``plain`` is the original-style run beside it.
    With a ``lower`` bound above the pipelined one (a provider's rate or slots), against
    that too (``bench.schedule.floors``)."""
    versus = "-"
    if plain:
        chars = r["prompt_chars"] / plain["prompt_chars"] - 1
        versus = f"{plain['wall'] / r['wall']:.2f}x faster, {100 * chars:+.1f}% prompt chars"
    peaks = "/".join(str(s["peak_limit"]) for s in r["limits"].values()) or "-"
    turns = max(1, r["turns"])
    above = f"{r['wall'] / lower:4.2f}x lower bound  " if lower and lower > bound else ""
    return (
        f"{name:<28} {r['wall']:7.1f} s {r['wall'] / bound:5.2f}x bound  {above}"
        f"requests {r['requests']:6d} ({r['requests'] / turns:4.2f} per answer)  "
        f"429s {r['rate_limited']:5d}  "
        f"CPU/turn {1000 * r['cpu'] / turns:5.1f} ms  "
        f"CPU {r['cpu'] / r['wall']:4.2f} cores  "
        f"peak {r['peak_mb']:5.0f} MB  score {r['score']:5d}  errored {r['errored']}  "
        f"prompt chars {r['prompt_chars'] / 1e6:6.2f} M  peak limit {peaks}  "
        + (f"in flight {r['in_flight']}  " if "in_flight" in r else "")
        + f"against (c): {versus}"
    )


def one_round(
    url: str,
    args: argparse.Namespace,
    bound: float,
    workload: str,
    variants: Sequence[str],
    plain: tuple[str, str, str] | None,
    lines: list[str],
    results: dict[str, list[dict[str, Any]]],
    lower: float | None = None,
) -> None:
    """One interleaved round on one provider (whose limits make ``lower`` the lower
    bound): the original-style loop first when ``plain`` (its child workload, result key
    and label) is given, then ``workload`` with each variant, each row against that
    loop's run."""
    against = None
    if plain is not None:
        child_workload, key, label = plain
        against = measure(child_workload, url, args, "default")
        results.setdefault(key, []).append(against)
        lines.append(row(f"  {label}", bound, against, None, lower))
        print(lines[-1], flush=True)
    for variant in variants:
        r = measure(workload, url, args, variant)
        results.setdefault(f"{workload} {variant}", []).append(r)
        lines.append(row(f"  ({workload}) {variant}", bound, r, against, lower))
        print(lines[-1], flush=True)


def parent(args: argparse.Namespace) -> None:
    workloads = args.workloads.split(",")
    variants = args.variants.split(",")
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.1f}"
    ]
    results: dict[str, list[dict[str, Any]]] = {}
    if "a" in workloads:
        bound = published_bound()
        lines.append(f"(a) published replay, 49 chains, bound {bound:.1f} s")
        limited = [f"--rate={args.a_rate}", f"--burst={args.a_rate}"] if args.a_rate else []
        if args.a_rate:
            lines.append(f"    provider answering 429 above {args.a_rate:g} requests/s")
        from aidanbench.testing.published import published_chains

        answers = sum(len(chain.answers) for chain in published_chains())
        lower = rate_floor(2 * answers, Lane(rate=args.a_rate or None, burst=args.a_rate or None))
        with provider(["published", *limited]) as url:
            plain = ("ca", "c on (a)", "(c) original-style on (a)") if "c" in workloads else None
            for _ in range(args.runs):
                one_round(url, args, bound, "a", variants, plain, lines, results, lower)
    if "b" in workloads or "c" in workloads:
        floor = lab_floors(args, lines)
        serve = provider_args(args)
        with provider(serve) as url:
            plain = ("c", "c", "(c) original-style loop") if "c" in workloads else None
            graph_variants = variants if "b" in workloads else []
            for _ in range(args.runs):
                one_round(
                    url, args, floor.bound, "b", graph_variants, plain, lines, results, floor.lower
                )
    print("\n".join(lines))
    for name, runs in results.items():
        walls = [r["wall"] for r in runs]
        spread = f"{min(walls):.1f}-{max(walls):.1f}"
        print(f"{name:<20} wall median {statistics.median(walls):.1f} s ({spread})")


def provider_args(args: argparse.Namespace) -> list[str]:
    """``bench.lab_serve``'s arguments for workload (b) as ``args`` set it."""
    per_model = args.limits == "per-model"
    return [
        "lab",
        f"--lg={LAB_MEDIANS['generate'] * args.scale}",
        f"--lj={LAB_MEDIANS['coherence'] * args.scale}",
        f"--le={LAB_MEDIANS['embed'] * args.scale}",
        f"--sigma={args.sigma}",
        f"--models={args.models}",
        f"--questions={args.questions}",
        f"--mean-length={args.mean_length}",
        f"--max-length={args.max_length}",
        f"--spread={args.spread}",
        *([f"--rate={args.rate}", f"--burst={args.burst or args.rate}"] if args.rate else []),
        *([f"--trace={args.trace}"] if getattr(args, "trace", None) else []),
        f"--limits={args.limits}",
        f"--endpoints={args.models + 1 if per_model else 0}",
    ]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default="a,b,c")
    p.add_argument("--variants", default="default", help=f"comma-separated of {VARIANTS}")
    workload_arguments(p, models=10, scale=0.1)
    p.add_argument(
        "--a-rate",
        type=float,
        default=0.0,
        help="(a)'s provider answers 429 above this many requests/s (0: no limit)",
    )
    p.add_argument("--trace", help="the (b) provider's per-request trace file (bench.lab_serve)")
    p.add_argument("--child", choices=("a", "b", "c", "ca"), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="default", type=variant_name, help=argparse.SUPPRESS)
    args = p.parse_args()
    for variant in args.variants.split(","):
        variant_name(variant)
    return args


def variant_name(text: str) -> str:
    """A variant, or several joined by ``+`` (the first's path, each one's switch)."""
    unknown = [part for part in text.split("+") if part not in VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant {unknown[0]!r}: one of {VARIANTS}")
    return text


def main() -> None:
    parent_or_child(parse_args(), parent, child)


if __name__ == "__main__":
    main()
