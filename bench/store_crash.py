"""A PostgreSQL crash in the middle of a two-machine campaign, against the published run.

    python -m bench.store_crash [--trials 3] [--after 6] [--scale 0.02] [--durable] [--stall S]

Each trial starts the published run's replay (``aidanbench.testing.published``), a fresh
PostgreSQL 15 on 127.0.0.1 (``aidanbench.testing.postgres``) and two ``aidanbench run
--store`` processes, each with its own run directory, on the four models that answered all
ten published questions (``--concurrency 10`` each). Once the store holds ``--after``
finished questions it SIGKILLs the postmaster and every process it started
(``LocalPostgres.crash``; ``--stall`` stops its WAL writer that long before, as a slow disk
would), waits 5 to 9 s and starts it again. Both runs must exit 0; then
every per-question score in the store must equal the published one, and each run directory
must hold exactly the store's lines of its machine. A rerun of each must then ask nothing.
It prints what differs and exits 1 if anything does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aidanbench.cli.demo import published_scores, served
from aidanbench.core.settings import REFERENCE_EMBEDDING_MODEL, REFERENCE_JUDGE
from aidanbench.record.lines import QuestionLine, read_lines
from aidanbench.testing.postgres import LocalPostgres, local_postgres
from aidanbench.testing.published import published_chains

ROOT = Path(__file__).resolve().parents[1]
KEY = "AIDANBENCH_CRASH_KEY"
QUESTIONS = 10
CONCURRENCY = 10


def models() -> list[str]:
    """The published models with a chain on each of the ten questions."""
    chains = published_chains()
    return [
        model
        for model in dict.fromkeys(c.model for c in chains)
        if sum(c.model == model for c in chains) == QUESTIONS
    ]


def command(url: str, store: str, run_dir: Path) -> list[str]:
    """``aidanbench run --store`` of the published grid's four full models."""
    argv = [sys.executable, "-m", "aidanbench.cli.main", "run", "--run-dir", str(run_dir)]
    for model in models():
        argv += ["-m", model]
    argv += ["--questions", str(QUESTIONS), "--judge-model", REFERENCE_JUDGE]
    argv += ["--embedding-model", REFERENCE_EMBEDDING_MODEL]
    for role in ("", "judge-", "embedding-"):
        argv += [f"--{role}base-url", url, f"--{role}api-key-env", KEY]
    return [*argv, "--store", store, "--concurrency", str(CONCURRENCY)]


def same(line: QuestionLine) -> str:
    """A line as JSON (NaN equals NaN), for comparing a run directory's with the store's."""
    return json.dumps(
        line.record() | {"answers": [a.record() for a in line.answers]}, sort_keys=True
    )


def stored_lines(store: str) -> list[QuestionLine]:
    from aidanbench.runner.campaign import read_campaign

    return asyncio.run(read_campaign(store)).lines


def finished_in_store(store: str) -> int:
    """Lines in the store (0 while its tables do not exist yet or it does not answer)."""
    import psycopg

    try:
        with psycopg.connect(store, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM aidanbench_lines").fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("w")
    return subprocess.Popen(
        argv, cwd=ROOT, env=os.environ | {KEY: "crash"}, stdout=out, stderr=subprocess.STDOUT
    )


def trial(n: int, url: str, pg: LocalPostgres, root: Path, args: argparse.Namespace) -> list[str]:
    """One crash trial: what is wrong with it (nothing: an empty list)."""
    store = pg.new_database()
    dirs = [root / f"trial-{n}-machine-{m}" for m in "ab"]
    procs = [start(command(url, store, d), d.with_suffix(".log")) for d in dirs]
    deadline = time.monotonic() + 600
    while finished_in_store(store) < args.after and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.05)
    held = finished_in_store(store)
    pg.crash(args.stall)
    down = random.uniform(5, 9)
    time.sleep(down)
    pg.start()
    codes = [p.wait(timeout=900) for p in procs]
    problems = [
        f"{d.name} exited {code}: {d.with_suffix('.log').read_text()[-1500:]}"
        for d, code in zip(dirs, codes, strict=True)
        if code != 0
    ]
    lines = stored_lines(store)
    got = published_scores(lines)  # type: ignore[arg-type]
    want = {m: s for m, s in published_scores(published_chains()).items() if m in models()}
    for model, scores in want.items():
        for question, score in scores.items():
            have = got.get(model, {}).get(question)
            if have != score:
                problems.append(f"{model} on {question[:50]!r}: store {have}, published {score}")
    by_thread = {line.thread: same(line) for line in lines}
    for d in dirs:
        for line in read_lines(d):
            if by_thread.get(line.thread) != same(line):
                problems.append(f"{d.name} holds a line the store does not: {line.thread}")
    if sum(len(read_lines(d)) for d in dirs) != len(lines):
        problems.append("the run directories do not hold every line of the store between them")
    for d in dirs:
        before = len(lines)
        rerun = subprocess.run(
            command(url, store, d), cwd=ROOT, env=os.environ | {KEY: "crash"}, capture_output=True
        )
        if rerun.returncode != 0 or len(stored_lines(store)) != before:
            said = rerun.stderr.decode()[-500:]
            problems.append(f"rerun of {d.name}: exit {rerun.returncode}: {said}")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"trial {n}: killed with {held} question(s) in the store, down {down:.1f} s; "
        f"{len(lines)} lines; {len(problems)} problem(s); load {load}",
        flush=True,
    )
    for problem in problems:
        print(f"  {problem}", flush=True)
    return problems


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--after", type=int, default=6, help="finished questions before the kill")
    p.add_argument("--scale", type=float, default=0.02, help="the replay's latency scale")
    p.add_argument("--durable", action="store_true", help="PostgreSQL with fsync on")
    p.add_argument("--seed", type=int, default=47)
    p.add_argument(
        "--stall",
        type=float,
        default=0.0,
        metavar="S",
        help="stop PostgreSQL's WAL writer S seconds before the kill (a disk that stalls)",
    )
    args = p.parse_args()
    random.seed(args.seed)
    server = [repr(args.scale), REFERENCE_JUDGE, REFERENCE_EMBEDDING_MODEL]
    failed: list[Any] = []
    with (
        served("aidanbench.testing.published", server) as url,
        local_postgres(secrets.token_hex(8), args.durable) as pg,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for n in range(1, args.trials + 1):
            failed += trial(n, url, pg, Path(tmp), args)
    print(f"{args.trials} trial(s), {len(failed)} problem(s)")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
