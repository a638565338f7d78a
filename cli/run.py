"""``aidanbench run``: score one or more models on AidanBench, resumably.

The same command on the same run directory resumes: finished questions are skipped,
unfinished ones continue from their last completed step, errored ones are retried.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import fcntl
import json
import os
import platform
import signal
import sqlite3
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
from aidanbench.cli import env_args, loop, question_source
from aidanbench.cli.driver import Task, check_recorded_measurements, drive, errored
from aidanbench.cli.errors import UsageError, printable
from aidanbench.cli.inputs import check_run_args
from aidanbench.cli.preflight import check_reachable
from aidanbench.cli.progress import Progress
from aidanbench.graph.questions import question_set_hash
from aidanbench.graph.settings import LOCAL_EMBEDDING_MODEL, Settings
from aidanbench.nodes.prompts import prompts_sha256
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
    p.add_argument("--model-kwargs", type=env_args.json_object, default={}, metavar="JSON")
    p.add_argument("--no-pipeline", action="store_true", help="score before generating next")
    p.add_argument("--concurrency", type=int, default=8, metavar="N", help="questions in flight")
    p.add_argument(
        "--endpoint-concurrency",
        type=int,
        default=256,
        metavar="N",
        help="most requests in flight per endpoint; the limit adapts below it (256)",
    )
    p.add_argument("--requests-per-minute", type=float, metavar="N")
    p.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--max-retries", type=int, default=4)
    p.add_argument("--run-dir", type=_run_dir, default=Path(DEFAULT_RUN_DIR))
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


def _run_dir(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; name a directory (for example runs/mine)")
    return Path(text)


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
    """The first error as one line; the value is shown only when it cannot be a secret."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    flag = "--" + field.replace("_", "-")
    message = printable(str(first["msg"]))
    value = first.get("input")
    if "got " in message or field.endswith(("url", "_env", "kwargs")):
        return f"invalid {flag}: {message}"
    return f"invalid {flag}: {message} (got {printable(repr(value))})"


def check_keys(settings: Settings) -> None:
    """Every role's key variable must be set before anything starts."""
    needed = [("model", settings.api_key_env), ("judge", settings.judge_api_key_env)]
    if settings.embedding_model != LOCAL_EMBEDDING_MODEL:
        needed.append(("embeddings", settings.embedding_api_key_env))
    for role, variable in needed:
        if not os.environ.get(variable):
            raise UsageError(f"environment variable {variable} (API key of the {role}) is not set")


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
    run ends (``services.clients`` says why this transport here). Every check of the
    arguments and of the run directory comes before the first write.
    """
    env_args.apply(args)
    check_run_args(args)
    run_dir: Path = args.run_dir
    spec = run_spec(args)
    stored = stored_metadata(run_dir)
    if stored is not None and stored.get("spec") != spec:
        if not args.use_stored_settings:
            raise UsageError(
                f"run directory {printable(str(run_dir))} holds a different run (differs in: "
                f"{', '.join(spec_differences(spec, stored.get('spec')))}); use another "
                "--run-dir, or --use-stored-settings to continue it as it was started"
            )
        spec = stored["spec"]
    question_set = question_source.resolve_questions(args)
    questions = question_set.questions
    check_question_set(stored, questions, run_dir)
    tasks = build_tasks(spec, questions, run_dir)
    check_checkpoints(run_dir / rundir.CHECKPOINTS)
    if stored is None and (run_dir / rundir.CHECKPOINTS).exists():
        loop.run(check_recorded_measurements(tasks, run_dir / rundir.CHECKPOINTS))
    if args.server is None:
        check_keys(tasks[0].settings)  # a server reads the keys from its own environment
        check_reachable(tasks[0].settings)

    with run_lock(run_dir):
        rundir.remove_leftovers(run_dir)
        set_aside_damaged_cache(run_dir / rundir.CACHE)
        meta = stored or {
            **metadata(spec, questions, tasks),
            "questions_source": question_set.source,
        }
        meta.setdefault("question_set_sha256", unordered_set_hash(questions))
        if args.server is not None:
            meta["server"] = args.server
        meta["started_at"] = meta.get("started_at") or _now()
        rundir.atomic_write(run_dir / rundir.METADATA, json.dumps(meta, indent=2))
        progress = Progress()
        try:
            with progress:
                if args.server is not None:
                    from aidanbench.cli.remote import drive_remote  # only with --server

                    work = drive_remote(
                        tasks, run_dir, args.server, concurrency=args.concurrency, progress=progress
                    )
                else:
                    factory = services or OpenAIServices("aiohttp")
                    if isinstance(factory, OpenAIServices):
                        progress.endpoints = factory.endpoint_stats
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
                lines = loop.run(until_terminated(work))
        except (KeyboardInterrupt, Terminated) as exc:
            where = run_dir if args.server is None else f"the server's threads ({args.server})"
            print(
                f"\nInterrupted. Every completed step is saved in {where}; run the same "
                "command again to resume.",
                file=sys.stderr,
            )
            return 143 if isinstance(exc, Terminated) else 130
        except (OSError, sqlite3.Error) as exc:
            if not is_disk_full(exc):
                raise
            raise UsageError(
                f"no space left to write in {printable(str(run_dir))} ({one_line(exc)}); every "
                "step completed before is saved: free space and run the same command again"
            ) from None
        meta["finished_at"] = _now()
        if progress.endpoints is not None:
            meta["endpoint_limits"] = {
                host: dataclasses.asdict(stats) for host, stats in progress.endpoints().items()
            }
        meta["totals"] = _totals(lines)
        rundir.atomic_write(run_dir / rundir.METADATA, json.dumps(meta, indent=2))
    _print_summary(run_dir, spec["reward_mode"])
    from aidanbench.analysis.view import write_view  # after the run: not on its start-up

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
                printable(f"  {line['model']}: {line['question'][:60]} — ")
                + printable(str(line["error"]["message"])),
                file=sys.stderr,
            )
        return 1
    return 0


def stored_metadata(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's ``metadata.json``; a damaged one is a one-line ``UsageError``."""
    if not run_dir.is_dir():
        return None
    try:
        return rundir.read_metadata(run_dir)
    except ValueError as exc:
        raise UsageError(
            f"{printable(str(exc))}; restore it from a backup, or move it away to continue "
            "(each question thread records its own settings)"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {run_dir / rundir.METADATA}: {exc.strerror}") from None


def spec_differences(spec: dict[str, Any], stored: Any) -> list[str]:
    """Names of the settings in which two run specs differ."""
    if not isinstance(stored, dict):
        return ["all settings (the stored ones are unreadable)"]
    stored_settings = stored.get("settings")
    stored_settings = stored_settings if isinstance(stored_settings, dict) else {}
    top = sorted(k for k in {*spec, *stored} if k != "settings" and spec.get(k) != stored.get(k))
    inner = sorted(
        k
        for k in {*spec["settings"], *stored_settings}
        if spec["settings"].get(k) != stored_settings.get(k)
    )
    return top + inner


def unordered_set_hash(questions: list[str]) -> str:
    """The question set's hash regardless of order: order changes no thread and no score."""
    return question_set_hash(sorted(questions))


def check_question_set(stored: dict[str, Any] | None, questions: list[str], run_dir: Path) -> None:
    """The same questions as the run directory's run, in any order.

    Threads are keyed by question text, so reordering changes nothing measured; only the
    order of lines in the results files follows the command line. Directories written
    before the unordered hash was recorded can only be matched in their own order.
    """
    if stored is None:
        return
    unordered = stored.get("question_set_sha256")
    if unordered is not None:
        same = unordered == unordered_set_hash(questions)
    else:
        same = stored.get("questions_sha256") == question_set_hash(questions)
    if not same:
        raise UsageError(
            f"run directory {printable(str(run_dir))} was started with a different question "
            f"set ({stored.get('questions', '?')} questions; this command gives "
            f"{len(questions)}); use another --run-dir"
        )


def sqlite_problem(path: Path) -> str | None:
    """What is wrong with the SQLite file at ``path`` (None when it reads as sound).

    Opened read-only and immutable, so checking it writes nothing beside it.
    """
    try:
        with closing_db(sqlite3.connect(rundir.read_only_uri(path), uri=True)) as db:
            db.execute("SELECT name FROM sqlite_master").fetchall()
            status = db.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.Error as exc:
        return str(exc)
    if status is None:
        return "?"
    return None if status[0] == "ok" else str(status[0])


def check_checkpoints(path: Path) -> None:
    """Refuse a damaged ``checkpoints.sqlite`` before anything runs, saying what it means."""
    if not path.exists():
        return
    problem = sqlite_problem(path)
    if problem is not None:
        raise UsageError(
            f"{printable(str(path))} is damaged ({printable(problem)}): "
            "the saved progress of this run's questions cannot be read; the results files "
            "keep what finished. Move it away to run the unfinished questions again from "
            "the start, or use another --run-dir"
        )


def set_aside_damaged_cache(path: Path) -> None:
    """``cache.sqlite`` only saves recomputation: a damaged one is moved aside and rebuilt."""
    if not path.exists() or sqlite_problem(path) is None:
        return
    aside = path.with_name(f"{path.name}.damaged")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    print(
        f"{printable(str(path))} was damaged and is only a cache: moved to {aside.name}, "
        "rebuilt as the run goes",
        file=sys.stderr,
    )


@contextmanager
def closing_db(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A sqlite3 connection closed on exit (its own context manager only commits)."""
    try:
        yield db
    finally:
        db.close()


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_disk_full(exc: BaseException) -> bool:
    """An error meaning the disk (or the file size limit) is full."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL_ERRNOS
    text = str(exc).lower()
    return "disk is full" in text or "disk i/o error" in text


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return printable(" ".join(str(exc).split()) or type(exc).__name__)


class Terminated(Exception):
    """SIGTERM arrived during the run: handled like Ctrl-C, with exit status 143."""


async def until_terminated(work: Awaitable[T]) -> T:
    """``await work``; SIGTERM cancels it like Ctrl-C does and raises ``Terminated``.

    Cancelling (rather than dying at once) lets the driver write what is known and close
    the checkpointer, as it does on Ctrl-C.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_term() -> None:
        received.append(signal.SIGTERM)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError):  # no signal handlers on this platform/thread
        return await work
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


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
