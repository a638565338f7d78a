"""Thousands of chains in one process: steady progress, memory, Ctrl-C and resume.

    python -m bench.many_chains [--chains 5000] [--runs 3] [--run-for 90] [--resume-for 45]

Each round runs ``aidanbench run`` as a user would (a child process, every default: all
chains in flight up to the memory ceiling, preflight, log-mode progress on a pipe)
against ``bench.lab_serve`` in another process, with ``--chains`` rounded up to whole
models of 63 questions (5,000 → 80 models, 5,040 chains). The provider is fast (medians
generate 50 ms, judge 20 ms, embeddings 10 ms) and the chains are scaled down (lengths
drawn with mean ``--mean-length`` 5, capped at ``--max-length`` 10, against about 20 in
the published run) so a round takes minutes, and the run is CPU-bound: the question is
which chains the CPU serves.

Fresh run, interrupted after ``--run-for`` seconds with SIGINT (Ctrl-C):
  * first question request (a generate or judge call, not a preflight probe) after the
    command started, and the first finished question (its log line);
  * questions finished at ``--marks`` seconds;
  * seconds from SIGINT to the process's exit; its peak RSS and CPU seconds.
Resume of the same run directory, interrupted after ``--resume-for`` seconds:
  * first question request after the command started; questions finished; SIGINT to exit.

Every number is printed with the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.lab import KEY, lab_models, provider, run_command, server_stats

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = 63
FINISHED = re.compile(r" valid — ")


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _default_sigint() -> None:
    """Ctrl-C as at a terminal, even when this benchmark runs in the background (where
    the shell starts it with SIGINT ignored, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watched:
    """An ``aidanbench run`` child: when each question finished, read from its log."""

    def __init__(self, argv: list[str], url: str) -> None:
        self.url = url
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ | {KEY: "lab"},
            preexec_fn=_default_sigint,
        )
        self.finished: list[float] = []
        self.tail: list[str] = []
        self.first_asked: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.tree_peak_mb = 0.0
        """The most resident memory the command and its worker processes held together."""
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self.proc.poll() is None:
            self.tree_peak_mb = max(self.tree_peak_mb, tree_rss_mb(self.proc.pid))
            time.sleep(0.5)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if FINISHED.search(line):
                self.finished.append(time.monotonic() - self.started)
            self.tail = [*self.tail, line][-20:]

    def watch(self, seconds: float) -> None:
        """Poll the provider for the first question request until ``seconds`` have gone."""
        while (now := time.monotonic() - self.started) < seconds:
            if self.proc.poll() is not None:
                raise RuntimeError("the run ended early:\n" + "".join(self.tail))
            if self.first_asked is None and server_stats(self.url)["asked"] > 0:
                self.first_asked = now
            time.sleep(0.2)

    def done_by(self, second: float) -> int:
        return sum(1 for t in self.finished if t <= second)

    def interrupt(self) -> dict[str, float]:
        """SIGINT, then wait for the exit: seconds it took, peak RSS, CPU seconds."""
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(self.proc.pid, 0)
        exited = time.monotonic() - sent
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._reader.join(timeout=10)
        return {
            "exit_s": exited,
            "rss_mb": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "code": self.proc.returncode,
        }


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants now (Linux's /proc), in MB."""
    total, todo = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        one = todo.pop()
        try:
            total += int(Path(f"/proc/{one}/statm").read_text().split()[1]) * page
            for task in Path(f"/proc/{one}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total / 2**20


@contextmanager
def lab_provider(args: argparse.Namespace, models: int) -> Any:
    with provider(
        [
            "lab",
            "--lg=0.05",
            "--lj=0.02",
            "--le=0.01",
            f"--models={models}",
            f"--questions={QUESTIONS}",
            f"--mean-length={args.mean_length}",
            f"--max-length={args.max_length}",
        ]
    ) as url:
        yield url


def one_round(args: argparse.Namespace, models: list[str], url: str, index: int) -> None:
    marks = [float(m) for m in args.marks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        argv = run_command(models, QUESTIONS, url, Path(tmp) / "run")
        if args.workers is not None:
            argv += ["--workers", str(args.workers)]
        server_stats(url, reset=True)
        fresh = Watched(argv, url)
        fresh.watch(args.run_for)
        load_run = load()
        out = fresh.interrupt()
        first = f"{fresh.finished[0]:.1f} s" if fresh.finished else f"none in {args.run_for:g} s"
        asked = f"{fresh.first_asked:.1f} s" if fresh.first_asked is not None else "never"
        counts = ", ".join(f"{fresh.done_by(m)} by {m:g} s" for m in marks)
        print(
            f"round {index} fresh: first request {asked}, first finished {first}; "
            f"finished {counts}; SIGINT to exit {out['exit_s']:.1f} s (code {out['code']}); "
            f"peak RSS {out['rss_mb']:.0f} MB (with its workers {fresh.tree_peak_mb:.0f} MB); "
            f"CPU {out['cpu_s']:.0f} s; load {load_run}",
            flush=True,
        )
        server_stats(url, reset=True)
        resumed = Watched(argv, url)
        resumed.watch(args.resume_for)
        load_resume = load()
        again = resumed.interrupt()
        asked = f"{resumed.first_asked:.1f} s" if resumed.first_asked is not None else "never"
        print(
            f"round {index} resume: first request {asked}, finished "
            f"{resumed.done_by(args.resume_for)} in {args.resume_for:g} s; SIGINT to exit "
            f"{again['exit_s']:.1f} s (code {again['code']}); peak RSS {again['rss_mb']:.0f} MB "
            f"(with its workers {resumed.tree_peak_mb:.0f} MB); load {load_resume}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--chains", type=int, default=5000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--run-for", type=float, default=90.0)
    p.add_argument("--resume-for", type=float, default=45.0)
    p.add_argument("--marks", default="30,60,90")
    p.add_argument("--mean-length", type=float, default=5.0)
    p.add_argument("--max-length", type=int, default=10)
    p.add_argument("--workers", type=int, help="the command's --workers (default: its own choice)")
    args = p.parse_args()
    models = lab_models(math.ceil(args.chains / QUESTIONS))
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{len(models)} models x {QUESTIONS} questions = {len(models) * QUESTIONS} chains; "
        f"load at start {load()}",
        flush=True,
    )
    with lab_provider(args, len(models)) as url:
        for index in range(1, args.runs + 1):
            one_round(args, models, url, index)
    print(f"load at the end {load()}", flush=True)


if __name__ == "__main__":
    main()
