"""Memory per chain in flight: what ``runner.admission.BYTES_PER_CHAIN`` is decided from.

    python -m bench.in_flight_memory [--chains 100,300,600] [--answers 5,20] [--runs 3]

For each number of chains K and answers L: a child process runs K question chains of the
lab's scripted models (``bench.lab``) through the run engine's drive loop, every chain in
flight, against ``bench.lab_serve`` holding each chain's generate request once the chain
has L answers (``--hold-at``). When the provider holds all K, every chain is in flight
with L answers in its state, its next prompt sent, and its vectors in the score cache;
the child then reads its resident memory (``VmRSS``) and exits. The slope of RSS over K
(least squares over the chain counts, per L) is the memory one more chain in flight
costs; the vectors' share (K x L x the cache's bytes per vector) is reported apart,
because the score cache keeps them after the chain finishes: they grow with the run's
answers, not with the chains in flight.

Embeddings are ``--dim`` floats (3,072: text-embedding-3-large, the default embedding
model) and answers ``--answer-size`` characters.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from bench.lab import KEY, lab_models, lab_settings, server_stats
from bench.processes import ROOT, parent_or_child, served

QUESTIONS = 63


def holding_provider(answers: int, args: argparse.Namespace) -> AbstractContextManager[str]:
    """``bench.lab_serve`` holding every chain at ``answers`` answers; killed at the end
    (its held requests never finish)."""
    return served(
        "bench.lab_serve",
        [
            "lab",
            "--lg=0.01",
            "--lj=0.01",
            "--le=0.005",
            f"--models={args.max_models}",
            f"--questions={QUESTIONS}",
            "--mean-length=1000000",
            f"--max-length={answers + 5}",
            f"--hold-at={answers}",
            f"--dim={args.dim}",
            f"--answer-size={args.answer_size}",
        ],
        kill=True,
    )


def rss_bytes() -> int:
    """This process's resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def hold(url: str, chains: int) -> dict[str, Any]:
    """Run ``chains`` chains, all in flight, until the provider holds every one."""
    from aidanbench.runner.local import drive_local
    from aidanbench.runner.progress import Progress
    from aidanbench.runner.tasks import Task
    from aidanbench.services import OpenAIServices

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        models = lab_models((chains + QUESTIONS - 1) // QUESTIONS)
        from aidanbench.graph.questions import bundled_questions

        tasks = [
            Task(lab_settings(url, model, run_dir, "default"), question, 1)
            for model in models
            for question in bundled_questions(QUESTIONS)
        ][:chains]
        async with OpenAIServices("aiohttp", chat="openai") as factory:
            before = rss_bytes()
            started = time.perf_counter()
            run = asyncio.ensure_future(
                drive_local(
                    tasks,
                    run_dir,
                    concurrency=chains,
                    progress=Progress(out=io.StringIO(), live=False),
                    services=factory,
                )
            )
            while server_stats(url)["held"] < chains:
                if run.done():
                    raise RuntimeError(f"the run ended before every chain was held: {run}")
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # replies already sent are handled
            held = rss_bytes()
            return {
                "chains": chains,
                "rss_before": before,
                "rss_held": held,
                "seconds": time.perf_counter() - started,
            }


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault(KEY, "lab")

    result = asyncio.run(hold(args.url, args.child))
    print(json.dumps(result), flush=True)
    os._exit(0)  # the held chains are abandoned, not wound down


def measure(url: str, chains: int) -> dict[str, Any]:
    server_stats(url, reset=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench.in_flight_memory", "--child", str(chains), "--url", url],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{chains} chains failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of bytes over chains."""
    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def parent(args: argparse.Namespace) -> None:
    from aidanbench.services.cache import VECTOR_OVERHEAD_BYTES

    counts = [int(c) for c in args.chains.split(",")]
    args.max_models = (max(counts) + QUESTIONS - 1) // QUESTIONS
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.1f}; "
        f"vectors of {args.dim} floats, answers of {args.answer_size} characters",
        flush=True,
    )
    vector = 4 * args.dim + VECTOR_OVERHEAD_BYTES
    for answers in [int(a) for a in args.answers.split(",")]:
        with holding_provider(answers, args) as url:
            slopes = []
            for _ in range(args.runs):
                points = []
                for chains in counts:
                    r = measure(url, chains)
                    points.append((chains, r["rss_held"]))
                    print(
                        f"  {answers:3d} answers, {chains:5d} chains in flight: "
                        f"RSS {r['rss_held'] / 2**20:6.0f} MB (before the run "
                        f"{r['rss_before'] / 2**20:4.0f} MB), held after {r['seconds']:5.1f} s",
                        flush=True,
                    )
                slopes.append(slope(points))
            cache = answers * vector
            print(
                f"{answers} answers: {', '.join(f'{s / 1024:.0f}' for s in slopes)} KB per chain "
                f"in flight (slope over {args.chains} chains); of which the cached vectors "
                f"{cache / 1024:.0f} KB, the rest {(statistics.median(slopes) - cache) / 1024:.0f}"
                " KB (median)",
                flush=True,
            )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--chains", default="100,300,600", help="chains in flight, comma-separated")
    p.add_argument("--answers", default="5,20", help="answers each chain holds, comma-separated")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dim", type=int, default=3072)
    p.add_argument("--answer-size", type=int, default=400)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    parent_or_child(p.parse_args(), parent, child)


if __name__ == "__main__":
    main()
