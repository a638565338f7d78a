"""Where a turn's CPU goes, by component, each against its own floor.

    python -m bench.turn_parts [--models 10] [--scale 0.1] [--limits per-model] [--runs 1]

Workload (b) of ``bench.lab`` (its provider in another process, its chains and latencies)
runs through the run engine exactly as ``bench.lab --variants workers-1`` runs it: the
command's path in one process, so one sampler sees all of it. The process
samples the main thread's stack every millisecond of the process's CPU time (``Sampler``)
and files each sample under the component of the innermost frame that belongs to one
(``COMPONENTS``, first match). Each component's share of the samples times the run's CPU
per turn is its milliseconds per turn.

Each component's floor is measured apart, in the same process, from the same run's counts
(requests, replies and embedding requests per turn, checkpoint rows and bytes per turn):

* LangGraph's runner, and asyncio and the rest: their shares of a graph of the question
  graph's shape whose nodes only count (``bench.turn_floor``'s ``empty-none``, no
  checkpointer), sampled alike;
* routers: the routing rule (``nodes.routing.next_steps``) called alone, once per turn;
* checkpoints: the turn's rows and bytes inserted into a fresh SQLite file in WAL mode, one
  commit per loop turn's worth (the run's own rows per commit);
* HTTP: the run's requests per turn, each a POST of a chat body read back over a kept-alive
  socket by a bare ``asyncio.Protocol`` against a server in another process;
* parsing: ``json.loads`` of a chat completion, once per reply;
* novelty: one cosine of a vector against the chain's earlier ones (``nodes.novelty``);
* the record: one ``os.write`` of a usage line per ledger line (two per request).

Our nodes and services and the drive loop have no floor here.
The sampler's own CPU is part of the run's (a few percent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from bench.processes import ROOT, parent_or_child

COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "checkpoints",
        (
            "aidanbench/runner/checkpoints.py",
            "langgraph/checkpoint/",
            "ormsgpack",
            "aiosqlite/",
        ),
    ),
    ("routers", ("aidanbench/nodes/routing.py", "langgraph/graph/_branch.py")),
    (
        "parsing",
        ("aidanbench/services/chat.py", "aidanbench/nodes/parsing.py", "langchain_core/messages/"),
    ),
    (
        "HTTP",
        (
            "aiohttp/",
            "aidanbench/services/direct_post.py",
            "aidanbench/services/http1.py",
            "asyncio/selector_events.py",
        ),
    ),
    (
        "novelty",
        (
            "aidanbench/nodes/novelty.py",
            "aidanbench/nodes/embed_novelty.py",
            "aidanbench/services/cache.py",
            "aidanbench/services/batching.py",
            "aidanbench/services/embeddings.py",
            "numpy/",
        ),
    ),
    (
        "the record",
        (
            "aidanbench/record/",
            "aidanbench/services/usage.py",
            "aidanbench/services/pricing.py",
            "aidanbench/runner/progress.py",
        ),
    ),
    ("our nodes and services", ("aidanbench/nodes/", "aidanbench/services/", "aidanbench/core/")),
    ("LangGraph's runner", ("langgraph/", "langchain_core/")),
    ("the drive loop", ("aidanbench/runner/",)),
)
"""Each component and the paths of its code; a sample goes to the first component its
innermost matching frame names."""

OTHER = "asyncio and the rest"


def component(filenames: list[str]) -> str:
    """The component of a sample, its frames' files innermost first."""
    for filename in filenames:
        for name, paths in COMPONENTS:
            if any(path in filename for path in paths):
                return name
    return OTHER


class Sampler:
    """Charges the main thread's CPU time to its stack, a sample about every ``every_s`` of
    the process's CPU time (``ITIMER_PROF``: waiting is never sampled), until stopped.

    Python runs the handler at the main thread's next bytecode, so signals that arrive
    during one C call (a commit, a send) come as one: each sample is weighed by the main
    thread's CPU seconds since the last, which charges the whole call to the frame that made
    it. (A thread sampling from outside would get the GIL mostly as such calls release it.)
    """

    def __init__(self, every_s: float = 0.001) -> None:
        self.every_s = every_s
        self.seconds: dict[str, float] = {}
        """CPU seconds of the main thread by component."""
        self._stacks: dict[tuple[str, ...], float] = {}
        self._before: Any = None
        self._last = 0.0

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        now = time.thread_time()
        files = []
        while frame is not None:
            files.append(frame.f_code.co_filename)
            frame = frame.f_back
        stack = tuple(files)  # filed after the run
        self._stacks[stack] = self._stacks.get(stack, 0.0) + now - self._last
        self._last = now

    def __enter__(self) -> Sampler:
        self._last = time.thread_time()
        self._before = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.every_s, self.every_s)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._before)
        for stack, spent in self._stacks.items():
            name = component([f.replace(os.sep, "/") for f in stack])
            self.seconds[name] = self.seconds.get(name, 0.0) + spent


def counting_checkpoints() -> Counter[str]:
    """Rows, bytes (estimated from every 16th commit: counting them all would cost the run
    a tenth of a millisecond a turn) and commits of the run's checkpointer from now on."""
    from aidanbench.runner import checkpoints

    counts: Counter[str] = Counter()
    real = checkpoints.InlineCommitSaver._commit_pending

    def commit(self: Any) -> None:
        counts["commits"] += 1
        for item in self._pending:
            counts["rows"] += len(item.rows)
            if counts["commits"] % 16 == 1:  # bytes of every 16th commit's rows, scaled
                for row in item.rows:
                    counts["bytes"] += 16 * sum(len(v) for v in row if isinstance(v, bytes | str))
        real(self)

    checkpoints.InlineCommitSaver._commit_pending = commit  # type: ignore[method-assign]
    return counts


def counting_requests() -> Counter[str]:
    """Requests the run's clients post, by path, from now on."""
    from aidanbench.services.direct_post import DirectPost

    counts: Counter[str] = Counter()
    real = DirectPost.post

    async def post(self: DirectPost, path: str, body: Any) -> bytes:
        counts[path] += 1
        return await real(self, path, body)

    DirectPost.post = post  # type: ignore[method-assign]
    return counts


def run_sampled(args: argparse.Namespace) -> dict[str, Any]:
    """Workload (b) through the run engine in this process, sampled."""
    from bench.lab import KEY, command_run, provider, provider_args

    os.environ.setdefault(KEY, "lab")
    rows = counting_checkpoints()
    posted = counting_requests()
    lab = argparse.Namespace(**vars(args), variant="workers-1", trace=None)
    with provider(provider_args(lab)) as url, Sampler() as sampler:
        from bench.lab import server_stats

        server_stats(url, reset=True)
        result = asyncio.run(command_run("b", url, lab))
        served = server_stats(url)
    return {
        **result,
        **served,
        "seconds": dict(sampler.seconds),
        "checkpoint": dict(rows),
        "posted": dict(posted),
    }


# --- floors -----------------------------------------------------------------------------


def cpu_of(work: Callable[[], Any], times: int) -> float:
    """CPU seconds per call of ``work``, the best of three passes of ``times`` calls."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(times):
            work()
        best = min(best, (time.process_time() - start) / times)
    return best


def runner_floor(args: argparse.Namespace) -> dict[str, float]:
    """CPU seconds per turn of the empty graph of the same shape, no checkpointer, by
    component (LangGraph's, asyncio's and the rest)."""
    from bench.turn_floor import empty_graph_run

    with Sampler() as sampler:
        result = asyncio.run(empty_graph_run("empty-none", args))
    per_turn = result["cpu"] / result["turns"]
    sampled = sum(sampler.seconds.values()) or 1.0
    return {name: per_turn * spent / sampled for name, spent in sampler.seconds.items()}


def router_floor() -> float:
    from aidanbench.core.settings import Settings
    from aidanbench.nodes.routing import next_steps

    settings = Settings()
    state: Any = {"question": "q", "stop_reason": None, "candidate": {"index": 2, "answer": "a"}}
    return cpu_of(lambda: next_steps(state, settings), 20_000)


def checkpoint_floor(rows_per_turn: float, bytes_per_turn: float, rows_per_commit: float) -> float:
    """CPU seconds per turn to insert and commit the turn's rows and bytes in WAL mode."""
    size = max(1, round(bytes_per_turn / max(rows_per_turn, 1.0)))
    batch = max(1, round(rows_per_commit))
    turns = 2_000
    total = round(rows_per_turn * turns)
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "floor.sqlite")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE rows (thread TEXT, id TEXT, value BLOB, PRIMARY KEY (thread, id))")
        payload = os.urandom(size)
        start = time.process_time()
        for first in range(0, total, batch):
            db.executemany(
                "INSERT OR REPLACE INTO rows VALUES (?, ?, ?)",
                [(f"t{k % 5040}", f"{k:012d}", payload) for k in range(first, first + batch)],
            )
            db.commit()
        spent = time.process_time() - start
        db.close()
    return spent / turns


SERVER = """
import asyncio, sys
reply = sys.stdin.readline().encode()
head = b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n"
class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while b"\\r\\n\\r\\n" in self.buffer:
            end = self.buffer.index(b"\\r\\n\\r\\n") + 4
            length = int(self.buffer.lower().split(b"content-length:")[1].split(b"\\r\\n")[0])
            if len(self.buffer) < end + length:
                return
            self.buffer = self.buffer[end + length:]
            self.transport.write(head % len(reply) + reply)
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


class _Client(asyncio.Protocol):
    """One kept-alive connection reading replies of a known length."""

    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: asyncio.Future[bytes] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiting is None:
            return
        length = int(self.buffer[:end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
        if len(self.buffer) >= end + 4 + length:
            body, self.buffer = self.buffer[end + 4 : end + 4 + length], b""
            self.waiting.set_result(body)


def http_floor(reply: bytes, body: bytes) -> float:
    """CPU seconds per request of a bare HTTP/1.1 POST and its reply, 50 connections."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(reply + b"\n")
    server.stdin.flush()
    port = int(server.stdout.readline())

    async def requests(count: int) -> float:
        loop = asyncio.get_running_loop()
        clients = [(await loop.create_connection(_Client, "127.0.0.1", port))[1] for _ in range(50)]
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        head += b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)

        async def post(client: _Client, times: int) -> None:
            for _ in range(times):
                client.waiting = loop.create_future()
                assert client.transport is not None
                client.transport.write(head + body)
                await client.waiting

        start = time.process_time()
        await asyncio.gather(*(post(client, count // 50) for client in clients))
        spent = time.process_time() - start
        for client in clients:
            assert client.transport is not None
            client.transport.close()
        return spent / count

    try:
        return min(asyncio.run(requests(3_000)) for _ in range(3))
    finally:
        server.stdin.close()
        server.wait(timeout=10)


def record_floor() -> float:
    """CPU seconds of one ``os.write`` of a usage line to an append-only file."""
    line = json.dumps({"t": 1.0, "event": "usage", "id": "0" * 16, "role": "judge"}).encode()
    line = line.ljust(300) + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(Path(tmp) / "usage.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            return cpu_of(lambda: os.write(fd, line), 20_000)
        finally:
            os.close(fd)


def floors(args: argparse.Namespace, run: dict[str, Any]) -> dict[str, float]:
    """Each component's floor in CPU milliseconds per turn, from the run's counts."""
    import numpy as np

    from aidanbench.nodes.novelty import cosine_novelty
    from bench.chat_client import REPLY

    turns = max(1, run["turns"])
    requests = run["requests"] / turns
    chat = run["posted"].get("chat/completions", 0) / turns
    rows = run["checkpoint"]
    reply = json.dumps(REPLY).encode()
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    earlier = [np.random.default_rng(k).standard_normal(1536) for k in range(3)]
    vector = np.random.default_rng(9).standard_normal(1536)
    empty = runner_floor(args)
    return {
        "LangGraph's runner": 1000 * empty.get("LangGraph's runner", 0.0),
        OTHER: 1000 * empty.get(OTHER, 0.0),
        "routers": 1000 * router_floor(),
        "checkpoints": 1000
        * checkpoint_floor(
            rows.get("rows", 0) / turns,
            rows.get("bytes", 0) / turns,
            rows.get("rows", 0) / max(1, rows.get("commits", 1)),
        ),
        "HTTP": 1000 * requests * http_floor(reply, body),
        "parsing": 1000 * chat * cpu_of(lambda: json.loads(reply), 20_000),
        "novelty": 1000 * cpu_of(lambda: cosine_novelty(vector, earlier), 5_000),
        "the record": 1000 * 2 * requests * record_floor(),
    }


def child(args: argparse.Namespace) -> None:
    run = run_sampled(args)
    run["floors"] = floors(args, run)
    print(json.dumps({k: v for k, v in run.items() if k != "limits"}))


def parent(args: argparse.Namespace) -> None:
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    per_turn: dict[str, list[float]] = {}
    floor_ms: dict[str, list[float]] = {}
    totals = []
    for _ in range(args.runs):
        command = [sys.executable, "-m", "bench.turn_parts", "--child", *common(args)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"the run failed:\n{done.stderr[-3000:]}")
        run = json.loads(done.stdout.strip().splitlines()[-1])
        turns = max(1, run["turns"])
        cpu_ms = 1000 * run["cpu"] / turns
        totals.append(cpu_ms)
        seconds = run["seconds"]
        sampled = sum(seconds.values()) or 1.0
        for name in [*(c for c, _ in COMPONENTS), OTHER]:
            per_turn.setdefault(name, []).append(cpu_ms * seconds.get(name, 0.0) / sampled)
        for name, ms in run["floors"].items():
            floor_ms.setdefault(name, []).append(ms)
        print(
            f"  round: {run['turns']} turns, {cpu_ms:.2f} ms of CPU per turn, "
            f"{run['requests'] / turns:.2f} requests per turn, score {run['score']}, "
            f"errored {run['errored']}, {sampled:.1f} s of the main thread's CPU sampled; "
            f"checkpoint {run['checkpoint']}",
            flush=True,
        )
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    print(f"CPU per turn {' / '.join(f'{t:.2f}' for t in totals)} ms (workers-1, sampled)")
    print("| component | ms per turn | share | floor, ms per turn | over its floor |")
    print("| --- | --- | --- | --- | --- |")
    total = statistics.median(totals)
    for name, values in sorted(per_turn.items(), key=lambda item: -statistics.median(item[1])):
        ms = statistics.median(values)
        floor = statistics.median(floor_ms[name]) if name in floor_ms else None
        over = "-" if floor is None or floor <= 0 else f"{ms / floor:.1f}x"
        shown = "-" if floor is None else f"{floor:.3f}"
        print(f"| {name} | {ms:.2f} | {100 * ms / total:.0f}% | {shown} | {over} |")


def common(args: argparse.Namespace) -> list[str]:
    return [
        f"--models={args.models}",
        f"--questions={args.questions}",
        f"--mean-length={args.mean_length}",
        f"--max-length={args.max_length}",
        f"--spread={args.spread}",
        f"--scale={args.scale}",
        f"--sigma={args.sigma}",
        f"--rate={args.rate}",
        *([f"--burst={args.burst}"] if args.burst else []),
        f"--limits={args.limits}",
    ]


def parse_args() -> argparse.Namespace:
    from bench.schedule import workload_arguments

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=1)
    workload_arguments(p, models=10, scale=0.1)
    p.set_defaults(limits="per-model")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def main() -> None:
    parent_or_child(parse_args(), parent, child)


if __name__ == "__main__":
    main()
