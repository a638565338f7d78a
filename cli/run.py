"""``aidanbench run``: score one or more models on AidanBench, resumably.

The arguments become a ``RunSpec`` and the run engine (``aidanbench.runner``) does the rest: the
same command on the same run directory resumes, and more models, temperatures, questions or repeats
grow the run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from aidanbench.cli import add_command, env_args, estimate, options
from aidanbench.cli.inputs import check_run_args
from aidanbench.core.errors import UsageError, printable
from aidanbench.record import files

if TYPE_CHECKING:
    from aidanbench.runner.engine import RunResult
    from aidanbench.runner.spec import RunSpec
    from aidanbench.services import ServicesFactory

T = TypeVar("T")

DEFAULT_RUN_DIR = "runs/aidanbench"


def register(subparsers: Any) -> None:
    """Add ``run`` to the command line."""
    p = add_command(
        subparsers, "run", "Score models on AidanBench. Run the same command again to resume."
    )
    options.add_settings_flags(
        p.add_argument_group(
            "settings", "the run's settings (aidanbench.core.settings.Settings; docs/settings.md)"
        ),
        required={"model"},
    )
    options.add_variant_flag(p)
    options.add_question_flags(p)
    p.add_argument(
        "-r", "--repeats", type=int, default=1, metavar="K", help="runs of each question (1)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="questions in flight (default: every question of the run, up to a memory "
        "ceiling, started as fast as this machine keeps up; the endpoints' adaptive limits "
        "bound the requests)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes to spread the questions over (default: one per 256 question "
        "threads of the run, up to this machine's cores; 1: this process alone)",
    )
    p.add_argument("--run-dir", type=Path, default=Path(DEFAULT_RUN_DIR))
    p.add_argument(
        "--server",
        metavar="URL",
        help="run the questions on this LangGraph server (it holds the API keys and the "
        "checkpoints); results are written to --run-dir as usual",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="one campaign from several machines: keep the threads' checkpoints in this "
        "PostgreSQL database (postgresql://USER@HOST:PORT/DATABASE; password from "
        "PGPASSWORD or ~/.pgpass) and claim each thread before running it; --run-dir stays "
        "local to this machine (docs/performance.md, Scaling)",
    )
    p.add_argument(
        "--claim-lease",
        type=float,
        default=60.0,
        metavar="S",
        help="with --store: seconds a killed worker's threads wait before another takes "
        "them over (60)",
    )
    p.add_argument(
        "--claim-poll",
        type=float,
        default=5.0,
        metavar="S",
        help="with --store: seconds between looks at threads running elsewhere (5)",
    )
    p.add_argument(
        "--store-outage",
        type=float,
        default=60.0,
        metavar="S",
        help="with --store: seconds a store that stops answering is waited for, every "
        "request to it tried again, before the run gives up on it (60)",
    )
    p.add_argument(
        "--use-stored-settings",
        action="store_true",
        help="continue a run directory with the settings it was started with",
    )
    p.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="skip the check of every role's endpoint and model before the run (GET "
        "/models, or one minimal request per role), for an endpoint that objects to them",
    )
    env_args.register(p)
    estimate.add_run_cost_flags(p)
    p.set_defaults(handler=handle)


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The run's specification from the command line, as the Python API takes it. Settings equal to
    their defaults count as not given, so ``--use-stored-settings`` fills them from the run
    directory; every other value is applied (operational) or checked against the run (scoring)."""
    from aidanbench.runner.spec import RunSpec, given_settings

    env_args.apply(args)
    for name in ("repeats", "concurrency", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be at least 1, got {value}")
    for name in ("claim_lease", "claim_poll", "store_outage"):
        value = getattr(args, name)
        if not 0 < value < float("inf"):
            raise UsageError(f"--{name.replace('_', '-')} must be positive seconds, got {value}")
    question_set = options.question_set(args)
    source, *panel_sources = options.threshold_sources(args)
    try:
        return RunSpec(
            models=args.model,
            temperatures=options.repeated(args, "temperature"),
            questions=question_set.questions,
            questions_source=question_set.source,
            categories=question_set.categories,
            repeats=args.repeats,
            settings=given_settings(options.settings_values(args)),
            variants=options.variants(args),
            run_dir=args.run_dir,
            server=args.server,
            store=args.store,
            claim_lease=args.claim_lease,
            claim_poll=args.claim_poll,
            store_outage=args.store_outage,
            concurrency=args.concurrency,
            workers=args.workers,
            use_stored_settings=args.use_stored_settings,
            preflight=args.preflight,
            max_cost=args.max_cost,
            coherence_threshold_source=source,
            panel_threshold_sources=panel_sources,
        )
    except ValidationError as exc:
        raise UsageError(options.validation_line(exc, getattr(args, "given_as", None))) from None


def handle(args: argparse.Namespace, services: ServicesFactory | None = None) -> int:
    """Run (or resume, or grow) the benchmark through the run engine; print the summary.

    ``services`` defaults to OpenAI-compatible clients (``services.clients`` says why), closed when
    the run ends. Every check comes before the first write; a directory another run holds is refused
    before the run engine is even imported.
    """
    env_args.apply(args)
    check_run_args(args)
    if not args.dry_run:  # a dry run writes nothing: another run may hold the directory
        files.refuse_if_in_use(args.run_dir)

    from aidanbench.runner.spec import check_prices

    spec = run_spec(args)
    check_prices(spec)
    if args.dry_run:
        return estimate.dry_run(args, spec)
    from aidanbench.runner.command import run_session

    result = run_session(spec, services)
    if isinstance(result, int):
        return result
    if (interrupted := show_result(result)) is not None:
        return interrupted
    if spec.store is not None:
        from aidanbench.runner.campaign import redacted

        print(
            "these are the questions this machine stopped; the whole campaign: "
            f"aidanbench report --store {printable(redacted(spec.store))}"
        )
    if not result.failed:
        return 0
    print(
        f"{len(result.failed)} question(s) stopped on an error; run the same command again "
        "to retry them:",
        file=sys.stderr,
    )
    print_failed(result)
    return 1


def print_failed(result: RunResult) -> None:
    """One line per question that stopped on an error, with its message."""
    for line in result.failed:
        message = line.error_message or "no message recorded"
        print(printable(f"  {line.model}: {line.question[:60]} — {message}"), file=sys.stderr)


def show_result(result: RunResult) -> int | None:
    """The summary, the cost section and the HTML report, from what the session hands back (nothing
    is read again); 130 when Ctrl-C stops it (the session is saved: one line says so)."""
    try:
        _show_result(result)
    except KeyboardInterrupt:  # the page takes about half a minute with 80 models
        print(
            "\nInterrupted while writing the report page; every question is saved: "
            f"aidanbench view {printable(str(result.run_dir))} writes the page.",
            file=sys.stderr,
        )
        return 130
    return None


def _show_result(result: RunResult) -> None:
    from aidanbench.analysis.cost import cost_lines, run_cost
    from aidanbench.analysis.report import (
        cap_lines,
        headline_lines,
        truncation_lines,
        warning_lines,
    )
    from aidanbench.analysis.summary import warnings
    from aidanbench.analysis.summary_table import render_summary
    from aidanbench.analysis.view import Source, write_page  # after the run: not on its start-up
    from aidanbench.cli.report import make_console, print_lines
    from aidanbench.core.thresholds import Thresholds

    run_dir, rows = result.run_dir, result.summary
    console = make_console()
    render_summary(rows, console)
    print_lines(headline_lines(rows, result.results), console)
    print_lines(cap_lines(rows), console)
    print_lines(truncation_lines(rows, [str(run_dir)]), console)
    print_lines(cost_lines(result.results, [run_cost(result.metadata, result.results)]), console)
    source = Source(run_dir, result.results, result.metadata, Thresholds(), tuple(result.notes))
    print(f"report: {write_page([source], run_dir / files.REPORT)}")
    found = warning_lines([*result.notes, *warnings(result.results)])
    print_lines(found, console, style="yellow")
