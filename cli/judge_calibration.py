"""``aidanbench calibrate --judge-model M``: a successor judge measured against o1-mini.

Judges every answer of the reference again, calibrates, and writes the scatter plot and
the calibration file ``calibration-judge-<M>.json`` to ``--out``
(``analysis.judge_calibration.calibrate_one``); prints the figures. ``run
--coherence-threshold FILE`` reads its threshold from that file and records the file's
path and sha256 with the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from aidanbench.analysis.judge_calibration import (
    REFERENCE_JUDGE,
    JudgeCalibration,
    JudgeRule,
    calibrate_one,
    panel_agreement,
    sha256_of,
)
from aidanbench.analysis.judge_noise import noise_text
from aidanbench.analysis.rejudge import Unjudged
from aidanbench.cli import judging, options
from aidanbench.core.errors import printable
from aidanbench.record.results import QuestionResult

CENSORING_NOTE = (
    "Reference chains stop at their first invalid answer, so a threshold that passes a "
    "recorded terminal answer only counts the chain up to its recorded end (censored: a "
    "lower bound)."
)


def run(
    args: argparse.Namespace, questions: list[QuestionResult], reference: Path, out: Path
) -> int:
    """Judge, calibrate, plot, write the calibration file, print the figures: of each
    judge, with ``--judge-model`` given several times (a panel), then what the panel's
    majority of calibrated decisions makes of o1-mini's."""
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
        {**document, "calibration_file": str(path), "calibration_sha256": sha256_of(path)}
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
    """One judge's figures (as text unless ``as_json``) and a warning when other models
    served its judgments."""
    calibration, document, path = found
    figures = document["judging"]
    if not as_json:
        plot = Path(document["plot"])
        print(format_report(calibration, reference, plot, path, figures["distinct_answers"]))
        if figures["unreadable"] or figures["refused"]:
            print(printable(judging.refusals_line(figures)))
        print(printable(judging.cost_line(document["cost"])))
    warning = judging.served_warning(calibration.judge_model, document["judge"]["served_models"])
    if warning:
        print(printable(f"warning: {warning}"), file=sys.stderr)


def panel_line(panel: dict[str, Any]) -> str:
    """The panel's agreement with o1-mini, in one line."""
    judges = " + ".join(panel["judges"])
    if panel["agreement"] is None:
        return f"judge panel {judges}: the judges left different answers undecided"
    return (
        f"judge panel {judges}, an answer coherent when more than half pass it at their "
        f"calibrated thresholds: decision agreement with {REFERENCE_JUDGE} "
        f"{panel['agreement']:.1%} over {panel['answers']} answers; the judges disagreed "
        f"on {panel['disagreed']}"
    )


def _percent(rule: JudgeRule, whole: int) -> str:
    return f"{rule.decision_agreement:.1%} ({rule.agreeing}/{whole})"


def _tau(value: float | None) -> str:
    return "undefined" if value is None else f"{value:+.3f}"


def format_report(
    calibration: JudgeCalibration, reference: Path, plot: Path, file: Path, distinct: int
) -> str:
    """The figures as plain text; ``distinct`` answers were judged (an answer that repeats
    an earlier one of its question word for word is one prompt, judged once)."""
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
        f"  {len(calibration.questions)} questions, {n} answers; "
        f"{calibration.reference_failures} of them fail "
        f"{REFERENCE_JUDGE}'s rule (coherence > {r:g})",
        f"  {distinct} distinct answers judged: {n - distinct} repeat an earlier answer of their "
        "question word for word, and one judgment scores both",
        f"  Spearman rank correlation {rho}; mean |{model} − {REFERENCE_JUDGE}| "
        f"{calibration.mean_abs_diff:.1f} points",
        f"  least-squares line: {model} ≈ {fit}; {r:g} on {REFERENCE_JUDGE}'s scale is "
        f"{image} on this one",
        f"  every threshold in [{low:g}, {high:g}) makes the same decisions here",
        "",
        row("", f"calibrated {calibration.setting_value:g}", f"unchanged {r:g}"),
        row("decision agreement", _percent(cal, n), _percent(ref, n)),
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
            CENSORING_NOTE, width=92, initial_indent="  note: ", subsequent_indent="        "
        ),
    ]
    return "\n".join(lines)
