"""One campaign from one or two workers on PostgreSQL (``run --store``), against one alone.

    python -m bench.store [--models 10] [--questions 20] [--rounds 3] [--variants ...]

Each round runs the same grid (``--models`` lab models × ``--questions`` questions,
chains scripted by ``bench.lab_serve`` with a fast provider: medians generate 50 ms,
judge 20 ms, embeddings 10 ms) as a user would (``aidanbench run`` in child processes,
every default):

* ``alone``: one process on a run directory (the SQLite checkpointer);
* ``store-1``: one process on a fresh PostgreSQL database (``--store``);
* ``store-2``: two processes started together on another fresh database, each with its
  own run directory, as two machines would be.

``--variants`` runs the two store configurations again in the same round with one choice
of the store undone (``VARIANTS``), so each is compared with the shipped one under the same
load; each round starts with another of them. It prints each one's wall time (from the
first start to the last exit), the questions each worker stopped, and the provider's count
of question requests (generate and judge: equal in all when no thread runs twice), and
first how long one commit takes on this disk, waiting for it or not. PostgreSQL is
Debian's 15 on 127.0.0.1 (``aidanbench.testing.postgres``, fsync on). Two workers on one
2-core machine share its cores with the provider and the database, so this measures the
store's overhead and what a second process buys here, not what a second machine would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aidanbench.record.lines import read_lines
from aidanbench.testing.postgres import local_postgres
from bench.lab import KEY, lab_models, provider, run_command, server_stats

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "async-commit": "commits that do not wait for the disk (synchronous_commit=off)",
    "saver-lock": "LangGraph's saver lock kept: one request to the store at a time",
    "pool-2": "two connections for a process's checkpoints (CHECKPOINT_CONNECTIONS)",
    "pool-6": "six connections for a process's checkpoints (CHECKPOINT_CONNECTIONS)",
}
"""The store's choices a variant undoes (``undo``), in a child process of its own."""


def undo(variant: str) -> None:
    """Undo one of the store's choices in this process (``VARIANTS``)."""
    from aidanbench.runner import campaign

    if variant == "async-commit":
        campaign.CONNECTION["options"] = "-c synchronous_commit=off"
    elif variant == "saver-lock":
        shipped = campaign.riding_saver

        def locked(pool: Any, outage: campaign.Outage) -> Any:
            saver = shipped(pool, outage)
            saver.lock = asyncio.Lock()
            return saver

        campaign.riding_saver = locked
    elif variant.startswith("pool-"):
        campaign.CHECKPOINT_CONNECTIONS = int(variant.removeprefix("pool-"))
    else:
        raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def timed(argvs: list[list[str]], logs: list[Path]) -> float:
    """Start every command together; seconds until the last one exited (each must exit 0)."""
    started = time.monotonic()
    procs = []
    for argv, log in zip(argvs, logs, strict=True):
        out = log.open("w")
        procs.append(
            subprocess.Popen(
                argv, cwd=ROOT, env=os.environ | {KEY: "lab"}, stdout=out, stderr=subprocess.STDOUT
            )
        )
    for proc, log in zip(procs, logs, strict=True):
        if proc.wait() != 0:
            raise SystemExit(f"{log} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
    return time.monotonic() - started


def child(variant: str, args: list[str]) -> None:
    """``aidanbench ARGS`` with ``variant`` undone (the one process of a store run here:
    every default keeps one process for this grid)."""
    from aidanbench.cli.main import main as aidanbench

    undo(variant)
    raise SystemExit(aidanbench(args))


def commit_ms(store: str, synchronous: str, count: int = 500) -> float:
    """Milliseconds per commit of one small row, one connection, ``synchronous_commit``."""
    import psycopg

    options = f"-c synchronous_commit={synchronous}"
    with psycopg.connect(store, autocommit=True, options=options) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS commits (n int PRIMARY KEY, pad text)")
        conn.execute("TRUNCATE commits")
        started = time.perf_counter()
        for n in range(count):
            conn.execute("INSERT INTO commits VALUES (%s, %s)", (n, "x" * 500))
        return (time.perf_counter() - started) / count * 1000


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", nargs="*", default=[], choices=list(VARIANTS))
    args = p.parse_args()
    models = lab_models(args.models)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load()}")
    chains = len(models) * args.questions
    print(f"{args.models} models x {args.questions} questions = {chains} chains")
    for variant in args.variants:
        print(f"variant {variant}: {VARIANTS[variant]}")
    lab = ["lab", "--lg=0.05", "--lj=0.02", "--le=0.01", f"--models={args.models}"]
    lab += [f"--questions={args.questions}", "--mean-length=5", "--max-length=10"]
    with (
        provider(lab) as url,
        local_postgres(secrets.token_hex(8), durable=True) as pg,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store = pg.new_database()
        waits = "/".join(f"{commit_ms(store, 'on'):.2f}" for _ in range(3))
        not_waiting = "/".join(f"{commit_ms(store, 'off'):.2f}" for _ in range(3))
        print(f"one commit: {waits} ms waiting for the disk, {not_waiting} ms not (3 x 500)")
        for n in range(1, args.rounds + 1):
            root = Path(tmp) / f"round-{n}"
            root.mkdir()
            runs: list[tuple[str, int, str | None]] = [("alone", 1, None)]
            shift = (n - 1) % (len(args.variants) + 1)  # each goes first in turn: the load drifts
            order = ["", *args.variants]
            for variant in order[shift:] + order[:shift]:
                runs += [(f"store-{w}{variant and ' ' + variant}", w, variant) for w in (1, 2)]
            for name, workers, variant in runs:
                dirs = [root / f"{name.replace(' ', '-')}-{i}" for i in range(workers)]
                argvs = [run_command(models, args.questions, url, d) for d in dirs]
                if variant is not None:
                    store = pg.new_database()
                    argvs = [[*argv, "--store", store] for argv in argvs]
                if variant:
                    prefix = [sys.executable, "-m", "bench.store", "child", variant]
                    argvs = [[*prefix, *argv[3:]] for argv in argvs]
                server_stats(url, reset=True)
                seconds = timed(argvs, [d.with_suffix(".log") for d in dirs])
                asked = server_stats(url)["asked"]
                stopped = [len(read_lines(d)) for d in dirs]
                print(
                    f"round {n} {name}: {seconds:.1f} s, questions stopped per worker "
                    f"{stopped}, question requests {asked}, load {load()}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
