"""``aidanbench demo``: the real run, offline and without a key, on the published run.

A local server (``aidanbench.testing.published``, in a child process so its work is not charged to
the run) plays every model of the bundled published 2024 run, and the run engine scores its 49
questions exactly as ``aidanbench run`` would. The demo then compares every per-question score with
the published one and exits 1 on any difference: a self-test of an installation as much as a
showcase.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aidanbench import reference
from aidanbench.cli import add_command
from aidanbench.cli.run import print_failed, show_result
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import REFERENCE_EMBEDDING_MODEL, REFERENCE_JUDGE
from aidanbench.record.metadata import REPLAY_KIND, read_metadata
from aidanbench.record.results import QuestionResult, read_aidanbench_file
from aidanbench.runner.spec import RunSpec, build_tasks
from aidanbench.runner.tasks import Task

DEFAULT_RUN_DIR = "runs/demo"
DEFAULT_LATENCY_SCALE = 0.06
"""Scale of the published per-answer times: its slowest question (757 s) takes about 45 s."""
KEY_VARIABLE = "AIDANBENCH_DEMO_KEY"
"""The variable the demo's settings name; the local server needs no real key."""

SOURCE = {
    "kind": REPLAY_KIND,
    "file": reference.PUBLISHED_RUN,
    "sha256": reference.SHA256[reference.PUBLISHED_RUN],
}
"""The demo's question source as metadata records it: a directory recording another holds another
run."""

Expected = dict[str, dict[str, int]]
"""Model -> question -> score."""


def register(subparsers: Any) -> None:
    """Add ``demo`` to the command line."""
    p = add_command(
        subparsers,
        "demo",
        "Replay the published 2024 AidanBench run through the real pipeline "
        "against a local server (no network, no key), then check every score against the "
        "published ones. Run the same command again to resume.",
    )
    p.add_argument("--run-dir", type=Path, default=Path(DEFAULT_RUN_DIR))
    p.add_argument(
        "--latency-scale",
        type=float,
        default=DEFAULT_LATENCY_SCALE,
        metavar="S",
        help=f"answers take S times their published time (default {DEFAULT_LATENCY_SCALE}: "
        "about a minute; 0: no waiting)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="questions in flight (default: all of them, as in aidanbench run)",
    )
    p.add_argument(
        "--expect",
        type=Path,
        metavar="PATH",
        help="JSON {model: {question: score}} to check instead of the published scores",
    )
    p.set_defaults(handler=handle)


def published_scores(chains: Sequence[QuestionResult]) -> Expected:
    """Each question's score (its valid answers: all but the recorded failure), by model."""
    scores: Expected = {}
    for chain in chains:
        scores.setdefault(chain.model, {})[chain.question] = chain.score
    return scores


def read_expected(path: Path) -> Expected:
    """An ``--expect`` file, checked before anything runs."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --expect {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--expect {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict) or not all(
        isinstance(scores, dict) and all(isinstance(v, int) for v in scores.values())
        for scores in data.values()
    ):
        raise UsageError(f"--expect {path}: must be a JSON object {{model: {{question: score}}}}")
    return data


def demo_spec(
    chains: Sequence[QuestionResult], base_url: str, run_dir: Path, concurrency: int | None
) -> RunSpec:
    """The published run's grid, every role at the local server (its port is per session)."""
    settings: dict[str, Any] = {"judge_model": REFERENCE_JUDGE}
    settings["embedding_model"] = REFERENCE_EMBEDDING_MODEL
    for role in ("", "judge_", "embedding_"):
        settings |= {f"{role}base_url": base_url, f"{role}api_key_env": KEY_VARIABLE}
    return RunSpec(
        models=list(dict.fromkeys(c.model for c in chains)),
        temperatures=sorted({c.temperature for c in chains}),
        questions=list(dict.fromkeys(c.question for c in chains)),
        questions_source=SOURCE,
        settings=settings,
        run_dir=run_dir,
        concurrency=concurrency,
    )


def published_cells(chains: Sequence[QuestionResult]) -> set[tuple[str, float, str]]:
    """(model, temperature, question) of each published chain (one model lacks a question)."""
    return {(c.model, c.temperature, c.question) for c in chains}


def demo_tasks(chains: Sequence[QuestionResult], base_url: str, run_dir: Path) -> list[Task]:
    """The demo's tasks, for tests and benchmarks that drive them without a session."""
    spec = demo_spec(chains, base_url, run_dir, None)
    fields = {model: spec.settings for model in spec.models}
    cells = published_cells(chains)
    return [t for t in build_tasks(spec, fields, spec.questions_list) if t.cell in cells]


def refuse_another_run(run_dir: Path) -> None:
    """A run directory whose metadata records another source is refused (one line)."""
    try:
        stored = read_metadata(run_dir) if run_dir.is_dir() else None
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None
    if stored is None:
        return
    earlier_demo = stored.spec is not None and (stored.spec.model_extra or {}).get("demo")
    if stored.questions_source != SOURCE and not earlier_demo:
        raise UsageError(f"run directory {run_dir} holds another run; use another --run-dir")


SERVER_GRACE_S = 0.5
"""How long a local server is given to end once its stdin closes before it is killed: it
keeps nothing, and after a Ctrl-C its threads still sleep out the replayed answers' times,
which would hold the command's exit for seconds."""


@contextmanager
def served(
    module: str, args: Sequence[str], *, cwd: Path | None = None, kill: bool = False
) -> Iterator[str]:
    """``python -m module args`` in a child process of its own session: a local server that prints
    its URL (yielded) and serves until its stdin closes, so a Ctrl-C reaches only this process,
    which closes it; ``kill`` kills the child (a server holding requests that never finish)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        url = proc.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"the local server {module} did not start (see its error above)")
        yield url
    finally:
        if kill:
            proc.kill()
        else:
            proc.stdin.close()
        try:
            proc.wait(timeout=SERVER_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def differences(got: Expected, expected: Expected) -> list[str]:
    """Every way the run's scores differ from the expected ones, as readable lines."""
    problems = []
    for model in sorted({*expected, *got}):
        want, have = expected.get(model, {}), got.get(model, {})
        for question in [*want, *(q for q in have if q not in want)]:
            if want.get(question) != have.get(question):
                problems.append(
                    f"{model}: {question[:60]}: got {have.get(question)}, "
                    f"expected {want.get(question)}"
                )
        if sum(want.values()) != sum(have.values()):
            problems.append(f"{model}: total {sum(have.values())}, expected {sum(want.values())}")
    return problems


def handle(args: argparse.Namespace) -> int:
    """Run (or resume) the demo through the run engine, show it as ``run`` does, check it."""
    if args.latency_scale < 0:
        raise UsageError(f"--latency-scale must be at least 0, got {args.latency_scale}")
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    chains = read_aidanbench_file(reference.published_run())
    expected = read_expected(args.expect) if args.expect else published_scores(chains)
    refuse_another_run(args.run_dir)
    os.environ.setdefault(KEY_VARIABLE, "demo-key-for-the-local-server")
    cells = published_cells(chains)
    server = [repr(args.latency_scale), REFERENCE_JUDGE, REFERENCE_EMBEDDING_MODEL]
    from aidanbench.runner.command import run_session

    with served("aidanbench.testing.published", server) as base_url:
        spec = demo_spec(chains, base_url, args.run_dir, args.concurrency)
        result = run_session(spec, cells=cells)
    if isinstance(result, int):
        return result
    if (interrupted := show_result(result)) is not None:
        return interrupted
    print_failed(result)
    failed = result.failed
    problems = differences(published_scores(result.results), expected)
    if problems or failed:
        print(
            f"Demo check FAILED: {len(problems)} score(s) differ from the expected ones"
            + (f", {len(failed)} question(s) stopped on an error" if failed else "")
            + ":",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  {printable(problem)}", file=sys.stderr)
        return 1
    totals = " / ".join(str(sum(s.values())) for s in expected.values())
    print(
        f"Demo check passed: all {len(result.lines)} question scores equal the published "
        f"run's (totals {totals})."
    )
    return 0
