"""``aidanbench calibrate``: a threshold for another embedding model or another judge.

``--embedding-model`` replays a reference results file with that model
(``aidanbench.analysis.calibrate``); ``--judge-model`` judges its answers again
(``aidanbench.analysis.judge_calibration``) and writes the calibration file ``run
--coherence-threshold FILE`` takes. The reference is the bundled published run unless
``--reference`` names another.

Embedding models come from ``EMBEDDING_FACTORIES`` (any other name is OpenAI-compatible): tests
register a fake there, the seam that keeps them free of torch and the network.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
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
from aidanbench.analysis.judge_calibration import (
    REFERENCE_JUDGE,
    JudgeCalibration,
    calibrate_one,
    panel_agreement,
)
from aidanbench.analysis.judge_noise import noise_text
from aidanbench.analysis.plots import require_matplotlib
from aidanbench.analysis.rejudge import Unjudged
from aidanbench.cli import add_command, judging, options
from aidanbench.cli.env_args import NotGiven
from aidanbench.cli.report import one_line
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL
from aidanbench.record import files
from aidanbench.record.results import QuestionResult, read_aidanbench_file
from aidanbench.reference import published_run


def _local_factory(args: argparse.Namespace) -> EmbedFn:
    """The bundled model, loaded now so its load time is not counted as embedding time."""
    try:
        from aidanbench.services.local_embeddings import load_model, local_embeddings

        embeddings = local_embeddings()
        load_model()
    except ImportError as exc:
        raise UsageError(one_line(exc)) from exc
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
            raise UsageError(f"embedding request failed: {one_line(exc)}") from exc

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
        raise UsageError(one_line(exc)) from exc
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {out}: {one_line(exc)}") from exc
    if judging:
        return calibrate_judges(args, questions, reference, out)

    started = time.perf_counter()
    embed = embedding_function(args)
    setup_seconds = time.perf_counter() - started
    try:
        result = calibrate(questions, embed, embedding_model=args.embedding_model)
    except ValueError as exc:
        raise UsageError(f"{reference}: {one_line(exc)}") from exc
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


JUDGE_CENSORING_NOTE = (
    "Reference chains stop at their first invalid answer, so a threshold that passes a "
    "recorded terminal answer only counts the chain up to its recorded end (censored: a "
    "lower bound)."
)


def calibrate_judges(
    args: argparse.Namespace, questions: list[QuestionResult], reference: Path, out: Path
) -> int:
    """Calibrate, plot, write and print each judge; then a panel's majority vs the reference."""
    found = []
    for judge in options.judges(args):
        settings = judging.judge_settings(judge, args.cache or out / "judge-cache.sqlite")
        try:
            one = calibrate_one(settings, questions, reference, out, **judging.progress(args))
        except Unjudged as exc:
            print(printable(f"aidanbench calibrate: {exc}"), file=sys.stderr)
            return 1
        show(one, reference, as_json=args.json)
        found.append(one)
    documents = [
        {
            **document,
            "calibration_file": str(path),
            "calibration_sha256": files.digest(path.read_bytes()),
        }
        for _, document, path in found
    ]
    panel = panel_agreement([calibration for calibration, _, _ in found])
    if args.json:
        payload = documents[0] if panel is None else {"judges": documents, "panel": panel}
        print(json.dumps(payload, indent=2))
    elif panel is not None:
        print(printable(panel_line(panel)))
    return 0


def show(
    found: tuple[JudgeCalibration, dict[str, Any], Path], reference: Path, as_json: bool
) -> None:
    """One judge's figures, warning when other models served its judgments."""
    calibration, document, path = found
    figures = document["judging"]
    if not as_json:
        plot = Path(document["plot"])
        distinct, answers = figures["distinct_answers"], figures["answers"]
        print(judge_report(calibration, reference, plot, path, distinct, answers))
        if figures["unreadable"] or figures["refused"]:
            print(printable(judging.refusals_line(figures)))
        print(printable(judging.cost_line(document["cost"])))
    warning = judging.served_warning(calibration.judge_model, document["judge"]["served_models"])
    if warning:
        print(printable(f"warning: {warning}"), file=sys.stderr)


def panel_line(panel: dict[str, Any]) -> str:
    """The panel's agreement with the reference judge, in one line."""
    judges = " + ".join(panel["judges"])
    undecided = (
        f"; {panel['undecided']} left undecided (the judges who gave a score split)"
        if panel["undecided"]
        else ""
    )
    if panel["agreement"] is None:
        return f"judge panel {judges}: the judges left every answer undecided"
    return (
        f"judge panel {judges}, an answer coherent when more than half pass it at their "
        f"calibrated thresholds: decision agreement with {REFERENCE_JUDGE} "
        f"{panel['agreement']:.1%} over {panel['answers']} answers; the judges disagreed "
        f"on {panel['disagreed']}{undecided}"
    )


def _agreement(rule: RuleFigures, whole: int) -> str:
    return f"{rule.decision_agreement:.1%} ({rule.agreeing}/{whole})"


def judge_report(
    calibration: JudgeCalibration,
    reference: Path,
    plot: Path,
    file: Path,
    distinct: int,
    answers: int,
) -> str:
    """The figures as plain text; of the reference's ``answers``, ``distinct`` were judged (a
    word-for-word repeat is judged once), and those the judge decided are compared."""
    cal, ref = calibration.calibrated, calibration.at_reference
    model = calibration.judge_model
    n = int(calibration.recorded.size)
    r = calibration.reference_threshold
    rho = "undefined" if calibration.spearman is None else f"{calibration.spearman:.3f}"
    fit = (
        "undefined"
        if calibration.fit is None
        else f"{calibration.fit[0]:.2f} + {calibration.fit[1]:.3f} × {REFERENCE_JUDGE}"
    )
    image = "undefined" if calibration.image is None else f"{calibration.image:.2f}"
    low, high = calibration.interval

    def row(label: str, at_cal: str, at_ref: str) -> str:
        return f"  {label:<36}{at_cal:>24}{at_ref:>24}"

    lines = [
        printable(f"Judge calibration of {model!r} against {reference.name} ({REFERENCE_JUDGE})"),
        f"  {len(calibration.questions)} questions, {answers} answers"
        + (
            f", {n} of them decided by the judge ({calibration.undecided} left undecided: no "
            "readable score in every try)"
            if calibration.undecided
            else ""
        )
        + f"; {calibration.reference_failures} of them fail "
        f"{REFERENCE_JUDGE}'s rule (coherence > {r:g})",
        f"  {distinct} distinct answers judged: {answers - distinct} repeat an earlier answer "
        "of their question word for word, and one judgment scores both",
        f"  Spearman rank correlation {rho}; mean |{model} − {REFERENCE_JUDGE}| "
        f"{calibration.mean_abs_diff:.1f} points",
        f"  least-squares line: {model} ≈ {fit}; {r:g} on {REFERENCE_JUDGE}'s scale is "
        f"{image} on this one",
        f"  every threshold in [{low:g}, {high:g}) makes the same decisions here",
        "",
        row("", f"calibrated {calibration.setting_value:g}", f"unchanged {r:g}"),
        row("decision agreement", _agreement(cal, n), _agreement(ref, n)),
        f"  {'  (if every answer passed)':<36}{calibration.reference_pass_rate:>24.1%}",
        row(
            "false pass / false fail",
            f"{cal.false_pass} / {cal.false_fail}",
            f"{ref.false_pass} / {ref.false_fail}",
        ),
        row(
            "equal question scores",
            f"{cal.equal_scores}/{len(cal.scores)}",
            f"{ref.equal_scores}/{len(ref.scores)}",
        ),
        row(
            "mean |score difference|",
            f"{cal.mean_abs_score_diff:.2f}",
            f"{ref.mean_abs_score_diff:.2f}",
        ),
        row("censored questions", str(cal.censored), str(ref.censored)),
        row("Kendall tau-b of model totals", _tau(cal.kendall_tau), _tau(ref.kendall_tau)),
        "",
        f"  {'model totals':<36}{'published':>12}{'calibrated':>12}{'at ' + format(r, 'g'):>12}",
    ]
    for name, total in calibration.reference_totals.items():
        lines.append(
            printable(
                f"  {name:<36}{total:>12}{cal.total_text(name):>12}{ref.total_text(name):>12}"
            )
        )
    if len(calibration.agreement_by_sample) > 1:
        shown = ", ".join(f"{a:.1%}" for a in calibration.agreement_by_sample)
        lines += ["", f"  decision agreement when judgment 1..K decides: {shown}"]
        for name, noise in calibration.noise.items():
            lines += textwrap.wrap(
                printable(f"{name}: {noise_text(noise)}"),
                width=96,
                initial_indent="  ",
                subsequent_indent="    ",
            )
    lines += [
        "",
        printable(f"  setting: --judge-model {model} --coherence-threshold {file}"),
        printable(f"           (or --coherence-threshold {calibration.setting_value:g})"),
        *([f"  calibrated threshold {calibration.note}"] if calibration.note else []),
        printable(f"  calibration file: {file}"),
        printable(f"  plot: {plot}"),
        *textwrap.wrap(
            JUDGE_CENSORING_NOTE, width=92, initial_indent="  note: ", subsequent_indent="        "
        ),
    ]
    return "\n".join(lines)


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
        "--out",
        required=True,
        metavar="DIR",
        help="directory for the plot, the calibration file and (without --cache) the "
        "judgment cache and its ledger",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    for name in ("embedding_model", "judge_model"):
        parser.set_defaults(**{name: NotGiven(parser.get_default(name))})
    parser.set_defaults(handler=run)
