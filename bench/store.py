"""One campaign from one or two workers on PostgreSQL (``run --store``), against one alone.

    python -m bench.store [--models 10] [--questions 20] [--rounds 3]

Each round runs the same grid (``--models`` lab models × ``--questions`` questions,
chains scripted by ``bench.lab_serve`` with a fast provider: medians generate 50 ms,
judge 20 ms, embeddings 10 ms) three ways, each as a user would (``aidanbench run`` in
child processes, every default):

* ``alone``: one process on a run directory (the SQLite checkpointer);
* ``store-1``: one process on a fresh PostgreSQL database (``--store``);
* ``store-2``: two processes started together on another fresh database, each with its
  own run directory, as two machines would be.

It prints each one's wall time (from the first start to the last exit), the questions
each worker stopped, and the provider's count of question requests (generate and judge:
equal in all three when no thread runs twice). PostgreSQL is Debian's 15 on 127.0.0.1
(``aidanbench.testing.postgres``, fsync on). Two workers on one 2-core machine share its
cores with the provider and the database, so this measures the claims' overhead and what
a second process buys here, not what a second machine would.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from aidanbench.record.lines import read_lines
from aidanbench.testing.postgres import local_postgres
from bench.lab import KEY, lab_models, provider, run_command, server_stats

ROOT = Path(__file__).resolve().parents[1]


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    models = lab_models(args.models)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load()}")
    chains = len(models) * args.questions
    print(f"{args.models} models x {args.questions} questions = {chains} chains")
    lab = ["lab", "--lg=0.05", "--lj=0.02", "--le=0.01", f"--models={args.models}"]
    lab += [f"--questions={args.questions}", "--mean-length=5", "--max-length=10"]
    with (
        provider(lab) as url,
        local_postgres(secrets.token_hex(8), durable=True) as pg,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for n in range(1, args.rounds + 1):
            root = Path(tmp) / f"round-{n}"
            root.mkdir()
            for name, workers, store in (
                ("alone", 1, None),
                ("store-1", 1, pg.new_database()),
                ("store-2", 2, pg.new_database()),
            ):
                dirs = [root / f"{name}-{i}" for i in range(workers)]
                argvs = [run_command(models, args.questions, url, d) for d in dirs]
                if store is not None:
                    argvs = [[*argv, "--store", store] for argv in argvs]
                server_stats(url, reset=True)
                seconds = timed(argvs, [d.with_suffix(".log") for d in dirs])
                asked = server_stats(url)["asked"]
                stopped = [len(read_lines(d)) for d in dirs]
                print(
                    f"round {n} {name}: {seconds:.1f} s, questions stopped per worker "
                    f"{stopped}, question requests {asked}, load {load()}"
                )


if __name__ == "__main__":
    main()
