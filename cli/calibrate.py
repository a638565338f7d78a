"""``aidanbench calibrate``: a threshold for another embedding model or another judge.

With ``--embedding-model``: replays a reference results file with that embedding model
and reports the cut on its novelty scale that reproduces the reference's ``novelty >
0.15`` decisions best, next to what 0.15 unchanged would give
(``aidanbench.analysis.calibrate``).

With ``--judge-model``: judges every answer of the reference again with the benchmark's
coherence prompt and reports how that judge's scale relates to o1-mini's, the threshold
that reproduces o1-mini's ``> 15`` decisions best, and what the published totals become
(``aidanbench.analysis.judge_calibration``). It writes a calibration file, which ``run
--coherence-threshold FILE`` takes (recording the file's sha256 with the run).

The reference is the bundled published run unless ``--reference`` names another.

The embedding model is built by a factory looked up in ``EMBEDDING_FACTORIES`` (``local``
is the bundled all-MiniLM-L6-v2); any other name is an OpenAI-compatible embeddings model.
Tests register a fake factory there, which is the seam that keeps them free of torch and
of the network.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from aidanbench.analysis.calibrate import (
    CENSORING_NOTE,
    Calibration,
    EmbedFn,
    RuleFigures,
    calibrate,
    plot_calibration,
)
from aidanbench.analysis.plots import require_matplotlib
from aidanbench.cli import add_command, judge_calibration, judging, options
from aidanbench.cli.env_args import NotGiven
from aidanbench.core.errors import UsageError
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL
from aidanbench.record.results import read_aidanbench_file
from aidanbench.reference import published_run


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _local_factory(args: argparse.Namespace) -> EmbedFn:
    """The bundled model, loaded now so its load time is not counted as embedding time."""
    try:
        from aidanbench.services.local_embeddings import load_model, local_embeddings

        embeddings = local_embeddings()
        load_model()
    except ImportError as exc:
        raise UsageError(_one_line(exc)) from exc
    return embeddings.encode


def _openai_factory(args: argparse.Namespace) -> EmbedFn:
    """An OpenAI-compatible embeddings model named by ``--embedding-model``."""
    import openai

    from aidanbench.core.errors import ConfigError
    from aidanbench.services.clients import api_key as key_of

    try:
        api_key = key_of(args.embedding_api_key_env, "embeddings").get_secret_value()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None

    from aidanbench.core.errors import MalformedReply
    from aidanbench.services.embeddings import embed_all

    client = openai.OpenAI(api_key=api_key, base_url=args.embedding_base_url, timeout=60)

    def embed(texts: list[str]) -> np.ndarray:
        try:
            return embed_all(client, args.embedding_model, texts)
        except (openai.OpenAIError, MalformedReply) as exc:
            raise UsageError(f"embedding request failed: {_one_line(exc)}") from exc

    return embed


EMBEDDING_FACTORIES: dict[str, Callable[[argparse.Namespace], EmbedFn]] = {
    LOCAL_EMBEDDING_MODEL: _local_factory,
}
"""Embedding functions by ``--embedding-model`` name; other names go to the OpenAI API."""


def embedding_function(args: argparse.Namespace) -> EmbedFn:
    """The embedding function the arguments select."""
    factory = EMBEDDING_FACTORIES.get(args.embedding_model, _openai_factory)
    return factory(args)


def plot_name(embedding_model: str) -> str:
    """``calibration-<model>.png`` with characters unsafe in file names replaced."""
    return f"calibration-{re.sub(r'[^A-Za-z0-9._-]+', '_', embedding_model)}.png"


def _percent(part: int, whole: int) -> str:
    return f"{part / whole:.1%} ({part}/{whole})"


def _tau(value: float | None) -> str:
    return "undefined" if value is None else f"{value:+.3f}"


def format_report(
    calibration: Calibration, reference: Path, plot: Path, setup_seconds: float
) -> str:
    """The figures as a plain-text table."""
    cal, unc = calibration.calibrated, calibration.uncalibrated
    n_compared = len(calibration.compared)
    n_questions = len(calibration.questions)
    failures = sum(not d for d in calibration.reference_decisions)
    model = calibration.embedding_model

    def row(label: str, get: Callable[[RuleFigures], str]) -> str:
        return f"  {label:<34}{get(cal):>22}{get(unc):>22}"

    lines = [
        f"Novelty calibration of {model!r} against {reference.name}",
        f"  {n_questions} questions, {len(calibration.answers)} answers; {n_compared} "
        "non-first answers compared,",
        f"  {failures} of them fail the reference novelty rule "
        f"(> {calibration.reference_threshold:g} on text-embedding-3-large)",
        f"  embedded {calibration.unique_texts} unique texts in "
        f"{calibration.embed_seconds:.1f} s (model setup {setup_seconds:.1f} s)",
        "",
        f"  {'':<34}{'calibrated':>22}{'uncalibrated':>22}",
        row(f"threshold on {model}", lambda f: f"{f.threshold:.4f}"),
        row("novelty decision agreement", lambda f: _percent(f.agreeing, n_compared)),
        f"  {'  (if every answer passed)':<34}{calibration.reference_pass_rate:>22.1%}",
        row("false pass / false fail", lambda f: f"{f.false_pass} / {f.false_fail}"),
        row("equal question scores", lambda f: _percent(f.equal_scores, n_questions)),
        row("mean |score difference|", lambda f: f"{f.mean_abs_score_diff:.2f}"),
        row("censored questions", lambda f: str(f.censored)),
        row("Kendall tau-b of model totals", lambda f: _tau(f.kendall_tau)),
        "",
        f"  {'model totals':<34}{'reference':>14}{'calibrated':>14}{'uncalibrated':>14}",
    ]
    for name, total in calibration.reference_totals.items():
        lines.append(f"  {name:<34}{total:>14}{cal.total_text(name):>14}{unc.total_text(name):>14}")
    lines += [
        "",
        f"  setting: CALIBRATED_NOVELTY_THRESHOLDS[{model!r}] = {calibration.setting_value}",
        f"  plot: {plot}",
        *textwrap.wrap(
            CENSORING_NOTE, width=90, initial_indent="  note: ", subsequent_indent="        "
        ),
    ]
    return "\n".join(lines)


def _given(value: Any) -> tuple[Any, bool]:
    """A flag's value and whether it was given (``NotGiven`` marks a default)."""
    if isinstance(value, NotGiven):
        return value.value, False
    return value, True


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench calibrate``."""
    args.embedding_model, embedding = _given(args.embedding_model)
    args.judge_model, judging = _given(args.judge_model)
    if embedding == judging:
        raise UsageError(
            "name the model to calibrate, one at a time: --judge-model M (a judge to take "
            "over from o1-mini) or --embedding-model M"
        )
    require_matplotlib()  # its chart is the command's output: say so before any work
    reference = Path(args.reference) if args.reference else published_run()
    if not reference.is_file():
        raise UsageError(f"reference file not found: {reference}")
    try:
        questions = read_aidanbench_file(reference)
    except ValueError as exc:
        raise UsageError(_one_line(exc)) from exc
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {out}: {_one_line(exc)}") from exc
    if judging:
        return judge_calibration.run(args, questions, reference, out)

    started = time.perf_counter()
    embed = embedding_function(args)
    setup_seconds = time.perf_counter() - started
    try:
        result = calibrate(questions, embed, embedding_model=args.embedding_model)
    except ValueError as exc:
        raise UsageError(f"{reference}: {_one_line(exc)}") from exc
    plot = plot_calibration(result, out / plot_name(args.embedding_model))

    if args.json:
        payload: dict[str, Any] = {
            "reference": str(reference),
            **result.to_dict(),
            "setup_seconds": setup_seconds,
            "plot": str(plot),
        }
        print(json.dumps(payload, indent=2))
    else:
        print(format_report(result, reference, plot, setup_seconds))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` command to the ``aidanbench`` parser."""
    parser = add_command(
        subparsers,
        "calibrate",
        (
            "--judge-model M: judge every answer of a reference run (the bundled published "
            "one by default) again with M, compare with the recorded o1-mini scores and "
            "find the threshold on M's scale that reproduces o1-mini's coherence > 15 best; "
            "writes calibration-judge-<M>.json (for run --coherence-threshold FILE) and a "
            "scatter plot to --out. --embedding-model M: embed every answer with M, "
            "recompute novelty on M's scale and find the threshold whose decisions match "
            "the reference's novelty > 0.15 best; writes calibration-<M>.png to --out."
        ),
    )
    options.add_settings_flags(
        parser, only=("embedding_model", "embedding_base_url", "embedding_api_key_env")
    )
    judging.register(parser)
    parser.add_argument(
        "--reference",
        metavar="PATH",
        help="results file in the original schema (default: the bundled published 2024 run)",
    )
    parser.add_argument(
        "--out", default=".", metavar="DIR", help="directory for the plot (default: .)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    for name in ("embedding_model", "judge_model"):
        parser.set_defaults(**{name: NotGiven(parser.get_default(name))})
    parser.set_defaults(handler=run)
