"""``aidanbench run``: score one or more models on AidanBench, resumably.

The same command on the same run directory resumes: finished questions are skipped,
unfinished ones continue from their last completed step, errored ones are retried.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from aidanbench.analysis import rundir
from aidanbench.analysis.view import write_view
from aidanbench.cli import env_args, loop, question_source
from aidanbench.cli.driver import Task, drive, errored
from aidanbench.cli.errors import UsageError
from aidanbench.cli.preflight import check_reachable
from aidanbench.cli.progress import Progress
from aidanbench.cli.remote import drive_remote
from aidanbench.graph.questions import question_set_hash
from aidanbench.graph.settings import LOCAL_EMBEDDING_MODEL, Settings
from aidanbench.nodes.prompts import prompt_texts
from aidanbench.services import OpenAIServices, ServicesFactory, role_host

T = TypeVar("T")

DEFAULT_RUN_DIR = "runs/aidanbench"
REPORT = "report.html"
"""The run's offline HTML report (``aidanbench view``), rewritten at the end of every run."""


def register(subparsers: Any) -> None:
    """Add ``run`` to the command line."""
    p = subparsers.add_parser(
        "run",
        help="score models on AidanBench (resumable)",
        description="Score models on AidanBench. Run the same command again to resume.",
    )
    p.add_argument(
        "-m", "--model", action="append", required=True, help="model under test (repeatable)"
    )
    p.add_argument(
        "-T",
        "--temperature",
        action="append",
        type=float,
        help="sampling temperature (repeatable; 0.7)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--questions", type=int, metavar="N", help="the first N bundled questions")
    which.add_argument("--questions-file", type=Path, metavar="PATH", help="your own questions")
    question_source.register(p, which)
    p.add_argument(
        "-r", "--repeats", type=int, default=1, metavar="K", help="runs of each question (1)"
    )
    p.add_argument("-b", "--base-url", help="OpenAI-compatible URL of the model under test")
    p.add_argument("-k", "--api-key-env", default="OPENAI_API_KEY", metavar="VAR")
    p.add_argument("--judge-model", default="o1-mini")
    p.add_argument("--judge-base-url")
    p.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", metavar="VAR")
    p.add_argument("--embedding-model", default="text-embedding-3-large", help="or 'local'")
    p.add_argument("--embedding-base-url")
    p.add_argument("--embedding-api-key-env", default="OPENAI_API_KEY", metavar="VAR")
    p.add_argument("--llm-novelty", action="store_true", help="also judge similarity by LLM")
    p.add_argument("--coherence-threshold", type=float, default=15.0)
    p.add_argument("--novelty-threshold", type=float, help="0.15, or calibrated for 'local'")
    p.add_argument("--llm-novelty-threshold", type=float, default=0.15)
    p.add_argument("--max-answers", type=int, help="cap on valid answers per question (none)")
    p.add_argument("--cot", action="store_true", help="chain-of-thought generate prompt")
    p.add_argument(
        "--reward-mode",
        choices=("count", "novelty_sum"),
        default="count",
        help="headline score: valid answers (count) or their novelty sum",
    )
    p.add_argument("--model-kwargs", type=_json_object, default={}, metavar="JSON")
    p.add_argument("--no-pipeline", action="store_true", help="score before generating next")
    p.add_argument("--concurrency", type=int, default=8, metavar="N", help="questions in flight")
    p.add_argument("--endpoint-concurrency", type=int, default=16, metavar="N")
    p.add_argument("--requests-per-minute", type=float, metavar="N")
    p.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--max-retries", type=int, default=4)
    p.add_argument("--run-dir", type=Path, default=Path(DEFAULT_RUN_DIR))
    p.add_argument(
        "--server",
        metavar="URL",
        help="run the questions on this LangGraph server (it holds the API keys and the "
        "checkpoints); results are written to --run-dir as usual",
    )
    p.add_argument(
        "--use-stored-settings",
        action="store_true",
        help="continue a run directory with the settings it was started with",
    )
    env_args.register(p)
    p.set_defaults(handler=handle)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def run_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings as stored in metadata (no secrets: variable names only)."""
    env_args.apply(args)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    return {
        "models": args.model,
        "temperatures": args.temperature or [0.7],
        "repeats": args.repeats,
        "reward_mode": args.reward_mode,
        "settings": {
            "base_url": args.base_url,
            "api_key_env": args.api_key_env,
            "judge_model": args.judge_model,
            "judge_base_url": args.judge_base_url,
            "judge_api_key_env": args.judge_api_key_env,
            "embedding_model": args.embedding_model,
            "embedding_base_url": args.embedding_base_url,
            "embedding_api_key_env": args.embedding_api_key_env,
            "llm_novelty": args.llm_novelty,
            "coherence_threshold": args.coherence_threshold,
            "novelty_threshold": args.novelty_threshold,
            "llm_novelty_threshold": args.llm_novelty_threshold,
            "max_answers": args.max_answers,
            "cot": args.cot,
            "model_kwargs": args.model_kwargs,
            "pipeline": not args.no_pipeline,
            "max_concurrency": args.endpoint_concurrency,
            "requests_per_minute": args.requests_per_minute,
            "request_timeout": args.request_timeout,
            "max_retries": args.max_retries,
        },
    }


def build_tasks(spec: dict[str, Any], questions: list[str], run_dir: Path) -> list[Task]:
    """Every (model, temperature, question, repeat) of the run, in a stable order."""
    tasks: list[Task] = []
    for model in spec["models"]:
        for temperature in spec["temperatures"]:
            try:
                settings = Settings(
                    model=model,
                    temperature=temperature,
                    reward_mode=spec["reward_mode"],
                    cache_path=str(run_dir / rundir.CACHE),
                    **spec["settings"],
                )
            except ValidationError as exc:
                raise UsageError(_validation_line(exc)) from None
            for repeat in range(1, spec["repeats"] + 1):
                tasks.extend(Task(settings, q, repeat) for q in questions)
    return tasks


def _validation_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    flag = "--" + field.replace("_", "-")
    return f"invalid {flag}: {first['msg']} (got {first.get('input')!r})"


def check_keys(settings: Settings) -> None:
    """Every role's key variable must be set before anything starts."""
    needed = [("model", settings.api_key_env), ("judge", settings.judge_api_key_env)]
    if settings.embedding_model != LOCAL_EMBEDDING_MODEL:
        needed.append(("embeddings", settings.embedding_api_key_env))
    for role, variable in needed:
        if not os.environ.get(variable):
            raise UsageError(f"environment variable {variable} (API key of the {role}) is not set")


def _prompts_hash() -> str:
    return hashlib.sha256(json.dumps(prompt_texts(), sort_keys=True).encode()).hexdigest()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def metadata(spec: dict[str, Any], questions: list[str], tasks: list[Task]) -> dict[str, Any]:
    """Provenance written before the run starts (totals are added at the end)."""
    first = tasks[0].settings
    return {
        "spec": spec,
        "package_version": importlib_metadata.version("aidanbench"),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "endpoints": {role: role_host(first, role) for role in ("model", "judge", "embeddings")},
        "prompts_sha256": _prompts_hash(),
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
            "rule": "valid iff coherence > coherence threshold and novelty > novelty threshold "
            "(and llm novelty > its threshold when on); strictly greater",
            "temperatures_sent": spec["temperatures"],
            "pipeline": first.pipeline,
        },
    }


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock; a second writer is refused, not interleaved."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / rundir.LOCK, "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"run directory {run_dir} is in use by another aidanbench run"
            ) from None
        yield
    finally:
        handle.close()


def handle(args: argparse.Namespace, services: ServicesFactory | None = None) -> int:
    """Run (or resume) the benchmark and print the summary.

    ``services`` defaults to OpenAI-compatible clients on aiohttp pools, closed when the
    run ends (``services.clients`` says why this transport here).
    """
    run_dir: Path = args.run_dir
    spec = run_spec(args)
    stored = rundir.read_metadata(run_dir) if run_dir.exists() else None
    if stored is not None and stored.get("spec") != spec:
        if not args.use_stored_settings:
            changed = sorted(
                k for k in {*spec, *stored["spec"]} if spec.get(k) != stored["spec"].get(k)
            ) + sorted(
                k
                for k in {*spec["settings"], *stored["spec"].get("settings", {})}
                if spec["settings"].get(k) != stored["spec"].get("settings", {}).get(k)
            )
            raise UsageError(
                f"run directory {run_dir} holds a different run (differs in: "
                f"{', '.join(c for c in changed if c != 'settings')}); use another --run-dir, "
                "or --use-stored-settings to continue it as it was started"
            )
        spec = stored["spec"]
    question_set = question_source.resolve_questions(args)
    questions = question_set.questions
    if stored is not None and stored.get("questions_sha256") != question_set_hash(questions):
        raise UsageError(f"run directory {run_dir} was started with a different question set")
    tasks = build_tasks(spec, questions, run_dir)
    if args.server is None:
        check_keys(tasks[0].settings)  # a server reads the keys from its own environment
        check_reachable(tasks[0].settings)

    with run_lock(run_dir):
        meta = stored or {
            **metadata(spec, questions, tasks),
            "questions_source": question_set.source,
        }
        if args.server is not None:
            meta["server"] = args.server
        meta["started_at"] = meta.get("started_at") or _now()
        rundir.atomic_write(run_dir / rundir.METADATA, json.dumps(meta, indent=2))
        progress = Progress()
        try:
            with progress:
                if args.server is not None:
                    work = drive_remote(
                        tasks, run_dir, args.server, concurrency=args.concurrency, progress=progress
                    )
                else:
                    factory = services or OpenAIServices("aiohttp")
                    work = closing(
                        factory,
                        drive(
                            tasks,
                            run_dir,
                            concurrency=args.concurrency,
                            progress=progress,
                            services=factory,
                        ),
                    )
                lines = loop.run(work)
        except KeyboardInterrupt:
            where = run_dir if args.server is None else f"the server's threads ({args.server})"
            print(
                f"\nInterrupted. Every completed step is saved in {where}; run the same "
                "command again to resume.",
                file=sys.stderr,
            )
            return 130
        meta["finished_at"] = _now()
        meta["totals"] = _totals(lines)
        rundir.atomic_write(run_dir / rundir.METADATA, json.dumps(meta, indent=2))
    _print_summary(run_dir, spec["reward_mode"])
    print(f"report: {write_view([run_dir], run_dir / REPORT)}")
    failed = errored(lines)
    if failed:
        print(
            f"{len(failed)} question(s) stopped on an error; run the same command again to "
            "retry them:",
            file=sys.stderr,
        )
        for line in failed:
            print(
                f"  {line['model']}: {line['question'][:60]} — {line['error']['message']}",
                file=sys.stderr,
            )
        return 1
    return 0


async def closing(factory: ServicesFactory, work: Awaitable[T]) -> T:
    """``await work``, then close the factory's HTTP pools if it has any."""
    try:
        return await work
    finally:
        if isinstance(factory, OpenAIServices):
            await factory.aclose()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _totals(lines: list[dict[str, Any]]) -> dict[str, Any]:
    calls = tokens = 0
    for line in lines:
        spent = [answer["calls"] for answer in line["answers"]]
        if line.get("speculative"):
            spent.append({"speculative": line["speculative"]})
        for roles in spent:
            calls += sum(stats["calls"] for stats in roles.values())
            tokens += rundir.call_tokens(roles)
    return {
        "questions": len(lines),
        "answers": sum(len(line["answers"]) for line in lines),
        "score": sum(int(line.get("score") or 0) for line in lines),
        "api_calls": calls,
        "tokens": tokens,
        "errored": len(errored(lines)),
    }


def _print_summary(run_dir: Path, reward_mode: str) -> None:
    """The summary table, then the headline score of each row under the reward mode."""
    from aidanbench.analysis.summary import render_summary, summarise
    from aidanbench.cli.report import make_console

    rows = summarise(rundir.read_run_dir(run_dir))
    console = make_console()
    render_summary(rows, console)
    for row in rows:
        value = row.score if reward_mode == "count" else f"{row.novelty_sum:.2f}"
        console.print(f"headline ({reward_mode}): {row.model} @ {row.temperature:g}: {value}")
