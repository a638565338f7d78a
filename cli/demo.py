"""``aidanbench demo``: the real run, offline and without a key, on the published run.

A local OpenAI-compatible server (``aidanbench.testing.published``, in a child process so
its work is not charged to the run) plays the five models, the judge and the embedder of
the bundled published 2024 run, and the same driver as ``aidanbench run`` scores all 49
questions through it: checkpoints, live table, run directory, summary. The published
scores are known, so the demo ends by comparing every per-question score with them and
exits 1 on any difference: it is a self-test of an installation as much as a showcase.
Interrupted, it resumes like ``run``: the same command continues where it stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from aidanbench import reference
from aidanbench.analysis import rundir
from aidanbench.analysis.summary import summarise
from aidanbench.analysis.view import write_view
from aidanbench.cli.run import REPORT, _print_summary
from aidanbench.core.errors import UsageError
from aidanbench.core.results import QuestionResult, read_aidanbench_file
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import question_set_hash
from aidanbench.nodes.prompts import prompts_sha256
from aidanbench.runner import store
from aidanbench.runner.local import drive_local
from aidanbench.runner.progress import Progress
from aidanbench.runner.tasks import Task, errored
from aidanbench.runner.tasks import totals as run_totals
from aidanbench.services import OpenAIServices

DEFAULT_RUN_DIR = "runs/demo"
DEFAULT_LATENCY_SCALE = 0.06
"""Scale of the published per-answer times: its slowest question (757 s) takes about 45 s."""
KEY_VARIABLE = "AIDANBENCH_DEMO_KEY"
"""The variable the demo's settings name; the local server needs no real key."""
JUDGE_MODEL = "o1-mini"
EMBEDDING_MODEL = "text-embedding-3-large"

Expected = dict[str, dict[str, int]]
"""Model -> question -> score."""


def register(subparsers: Any) -> None:
    """Add ``demo`` to the command line."""
    p = subparsers.add_parser(
        "demo",
        help="run the benchmark offline on the published run (no key; a self-test)",
        description="Replay the published 2024 AidanBench run through the real pipeline "
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
    """Each question's published score: its valid answers (all but the recorded failure)."""
    expected: Expected = {}
    for chain in chains:
        expected.setdefault(chain.model, {})[chain.question] = chain.score
    return expected


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


def demo_tasks(chains: Sequence[QuestionResult], base_url: str, run_dir: Path) -> list[Task]:
    """One task per published chain, every role at the local server."""
    settings: dict[str, Settings] = {}
    for chain in chains:
        if chain.model not in settings:
            settings[chain.model] = Settings(
                model=chain.model,
                temperature=chain.temperature,
                base_url=base_url,
                api_key_env=KEY_VARIABLE,
                judge_model=JUDGE_MODEL,
                judge_base_url=base_url,
                judge_api_key_env=KEY_VARIABLE,
                embedding_model=EMBEDDING_MODEL,
                embedding_base_url=base_url,
                embedding_api_key_env=KEY_VARIABLE,
                cache_path=str(run_dir / rundir.CACHE),
            )
    return [Task(settings[c.model], c.question, 1) for c in chains]


def demo_spec(chains: Sequence[QuestionResult]) -> dict[str, Any]:
    """What the run directory records as the run's settings (no ports: they change)."""
    return {
        "models": list(dict.fromkeys(c.model for c in chains)),
        "temperatures": sorted({c.temperature for c in chains}),
        "repeats": 1,
        "reward_mode": "count",
        "settings": {
            "base_url": "local replay of the published run",
            "judge_model": JUDGE_MODEL,
            "embedding_model": EMBEDDING_MODEL,
        },
        "demo": {
            "replays": reference.PUBLISHED_RUN,
            "sha256": reference.SHA256[reference.PUBLISHED_RUN],
        },
    }


def demo_metadata(spec: dict[str, Any], questions: list[str], tasks: list[Task]) -> dict[str, Any]:
    """Provenance written before the demo starts (totals are added at the end)."""
    first = tasks[0].settings
    return {
        "spec": spec,
        "package_version": importlib_metadata.version("aidanbench"),
        "git_commit": store.git_commit(),
        "python": platform.python_version(),
        "endpoints": store.endpoints(first),
        "prompts_sha256": prompts_sha256(),
        "questions_sha256": question_set_hash(questions),
        "questions": len(questions),
        "settings": {
            "embedding_model": first.embedding_model,
            "judge_model": first.judge_model,
            "thresholds": {
                "coherence": first.thresholds.coherence,
                "novelty": first.thresholds.novelty,
                "llm_novelty": first.thresholds.llm_novelty,
            },
            "temperatures_sent": spec["temperatures"],
            "pipeline": first.pipeline,
        },
    }


@contextmanager
def replay_server(latency_scale: float) -> Iterator[str]:
    """The published run's local server in a child process; yields its base URL.

    The child has its own session, so a Ctrl-C at the terminal reaches only this
    process, which then closes the child's stdin: the child stops when the run does.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "aidanbench.testing.published", repr(latency_scale)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url:
            raise RuntimeError("the demo's local server did not start (see its error above)")
        yield url
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def differences(lines: Sequence[Mapping[str, Any]], expected: Expected) -> list[str]:
    """Every way the run's scores differ from the expected ones, as readable lines."""
    got: Expected = {}
    for line in lines:
        got.setdefault(line["model"], {})[line["question"]] = int(line.get("score") or 0)
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


async def _drive(
    tasks: list[Task], run_dir: Path, concurrency: int | None, progress: Progress
) -> list[dict[str, Any]]:
    """The run engine's local drive loop on HTTP pools closed when it ends."""
    factory = OpenAIServices("aiohttp", chat="openai")
    try:
        return await drive_local(
            tasks, run_dir, concurrency=concurrency, progress=progress, services=factory
        )
    finally:
        await factory.aclose()


def handle(args: argparse.Namespace) -> int:
    """Run (or resume) the demo, print the summary and check it."""
    if args.latency_scale < 0:
        raise UsageError(f"--latency-scale must be at least 0, got {args.latency_scale}")
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    chains = read_aidanbench_file(reference.published_run())
    expected = read_expected(args.expect) if args.expect else published_scores(chains)
    run_dir: Path = args.run_dir
    spec = demo_spec(chains)
    stored = rundir.read_metadata(run_dir) if run_dir.exists() else None
    if stored is not None and stored.get("spec") != spec:
        raise UsageError(f"run directory {run_dir} holds another run; use another --run-dir")
    os.environ.setdefault(KEY_VARIABLE, "demo-key-for-the-local-server")
    questions = list(dict.fromkeys(c.question for c in chains))
    with rundir.run_lock(run_dir), replay_server(args.latency_scale) as base_url:
        tasks = demo_tasks(chains, base_url, run_dir)
        meta = stored or demo_metadata(spec, questions, tasks)
        meta["started_at"] = meta.get("started_at") or store.now()
        store.write_metadata(run_dir, meta)
        progress = Progress()
        try:
            with progress:
                lines = asyncio.run(_drive(tasks, run_dir, args.concurrency, progress))
        except KeyboardInterrupt:
            print(
                f"\nInterrupted. Every completed step is saved in {run_dir}; run the same "
                "command again to resume.",
                file=sys.stderr,
            )
            return 130
        meta["finished_at"] = store.now()
        meta["totals"] = run_totals(lines)
        store.write_metadata(run_dir, meta)
    _print_summary(summarise(rundir.read_run_dir(run_dir)), "count", run_dir)
    print(f"report: {write_view([run_dir], run_dir / REPORT)}")
    failed = errored(lines)
    for line in failed:
        print(f"  {line['model']}: {line['question'][:60]} — {line['error']}", file=sys.stderr)
    problems = differences(lines, expected)
    if problems or failed:
        print(
            f"Demo check FAILED: {len(problems)} score(s) differ from the expected ones"
            + (f", {len(failed)} question(s) stopped on an error" if failed else "")
            + ":",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    totals = " / ".join(str(sum(s.values())) for s in expected.values())
    print(
        f"Demo check passed: all {len(lines)} question scores equal the published run's "
        f"(totals {totals})."
    )
    return 0
