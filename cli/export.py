"""``aidanbench export``: runs in Inspect, Every Eval Ever or Hugging Face Hub format.

Every input is read first (a bad one is one line and nothing is written); files are written whole or
not at all (``analysis.export``), their paths printed one per line on stdout for scripts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aidanbench.analysis.export import WRITERS, export
from aidanbench.cli import add_command
from aidanbench.cli.report import one_line
from aidanbench.core.errors import UsageError, printable


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench export``."""
    paths = [Path(p) for p in args.paths]
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file or directory: {printable(str(path))}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"cannot use {printable(str(out))} as the output directory: not a folder")
    try:
        written = export(
            paths,
            args.format,
            out,
            organization=args.organization,
            dataset=args.hf_dataset,
            task=args.hf_task,
            source_url=args.hf_source_url,
        )
    except ImportError as exc:
        raise UsageError(one_line(exc)) from exc
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(printable(one_line(exc))) from exc
    for path in written:
        print(printable(str(path)))
    said = f"aidanbench export: wrote {len(written)} {args.format} file(s) under {out}"
    if opener := WRITERS[args.format].open_with:
        said += f"; open them with: {opener.format(out=out)}"
    print(printable(said), file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``export`` command."""
    parser = add_command(
        subparsers,
        "export",
        (
            "Write each model of each run (run directory or results file) in FORMAT under "
            "DIR: inspect (one Inspect .eval log per model, one sample per question chain; "
            "'inspect view DIR'), every-eval-ever (aggregate JSON and per-chain JSONL in "
            "its datastore layout, data/aidanbench/DEVELOPER/MODEL/), hf (the Hub's "
            ".eval_results/aidanbench.yaml per model repo). Needs the [export] extra."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="RUN", help="run directories or results files")
    parser.add_argument("--format", required=True, choices=WRITERS, help="the format to write")
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--organization",
        default="unknown",
        metavar="NAME",
        help="every-eval-ever: who ran the evaluation (source_organization_name)",
    )
    parser.add_argument(
        "--hf-dataset",
        metavar="REPO_ID",
        help="hf: the Hub dataset (registered as a benchmark) the results are of",
    )
    parser.add_argument(
        "--hf-task", default="default", metavar="ID", help="hf: the benchmark's task id"
    )
    parser.add_argument(
        "--hf-source-url",
        metavar="URL",
        help="hf: a link to the run's details (for example the uploaded Inspect logs)",
    )
    parser.set_defaults(handler=run)
