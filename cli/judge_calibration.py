"""``aidanbench calibrate --judge-model M``: a successor judge measured against o1-mini.

Judges every answer of the reference again (``analysis.rejudge``: cached, resumable,
direct or batched), calibrates (``analysis.judge_calibration``), draws the scatter plot
and writes the calibration file ``calibration-judge-<M>.json`` to ``--out``: the figures
(the ``judge`` object of ``--json``), the reference's path and sha256, the models that
served the judgments and what they cost. ``run --coherence-threshold FILE`` reads its
threshold from that file and records the file's path and sha256 with the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from aidanbench.analysis.judge_calibration import (
    REFERENCE_JUDGE,
    JudgeCalibration,
    JudgeRule,
    calibrate_judge,
    panel_agreement,
    plot_judge_calibration,
)
from aidanbench.analysis.judge_noise import noise_text
from aidanbench.analysis.rejudge import coherence_prompt
from aidanbench.cli import calibration_file, judging, options
from aidanbench.core.errors import UsageError, printable
from aidanbench.record.files import atomic_write
from aidanbench.record.recorder import now
from aidanbench.record.results import QuestionResult
from aidanbench.record.usage import UsageLedger

CENSORING_NOTE = (
    "Reference chains stop at their first invalid answer, so a threshold that passes a "
    "recorded terminal answer only counts the chain up to its recorded end (censored: a "
    "lower bound)."
)


def file_stem(judge_model: str) -> str:
    """``calibration-judge-<model>`` with characters unsafe in file names replaced."""
    return f"calibration-judge-{re.sub(r'[^A-Za-z0-9._-]+', '_', judge_model)}"


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(
    args: argparse.Namespace, questions: list[QuestionResult], reference: Path, out: Path
) -> int:
    """Judge, calibrate, plot, write the calibration file, print the figures: of each
    judge, with ``--judge-model`` given several times (a panel), then what the panel's
    majority of calibrated decisions makes of o1-mini's."""
    found = []
    for judge in options.judges(args):
        one = calibrate_one(judge, questions, reference, out)
        if one is None:
            return 1
        found.append(one)
    documents = [
        {**document, "calibration_file": str(target), "calibration_sha256": sha256_of(target)}
        for _, document, target in found
    ]
    panel = panel_agreement([calibration for calibration, _, _ in found])
    if args.json:
        payload = documents[0] if panel is None else {"judges": documents, "panel": panel}
        print(json.dumps(payload, indent=2))
    elif panel is not None:
        print(printable(panel_line(panel)))
    return 0


def calibrate_one(
    args: argparse.Namespace, questions: list[QuestionResult], reference: Path, out: Path
) -> tuple[JudgeCalibration, dict[str, Any], Path] | None:
    """One judge judged, calibrated, plotted and written; its figures printed (as text
    unless ``--json``); None when answers could not be judged (said on stderr)."""
    cache = args.cache or out / "judge-cache.sqlite"
    settings = judging.judge_settings(args, cache)
    prompt_of = {
        (q.question, a.answer): coherence_prompt(q.question, a.answer)
        for q in questions
        for a in q.answers
    }
    ledger = UsageLedger(judging.ledger_path(cache))
    judged = judging.judge_all(list(prompt_of.values()), settings, args, ledger)
    if judged.failures:
        print(
            printable(f"aidanbench calibrate: {judging.failures_line(judged, len(prompt_of))}"),
            file=sys.stderr,
        )
        return None
    scores = {
        key: judged.judgments[prompt].scores
        for key, prompt in prompt_of.items()
        if prompt in judged.judgments
    }
    try:
        calibration = calibrate_judge(questions, scores, judge_model=settings.judge_model)
    except ValueError as exc:
        raise UsageError(f"{reference}: {' '.join(str(exc).split())}") from exc
    stem = file_stem(settings.judge_model)
    plot = plot_judge_calibration(calibration, out / f"{stem}.png")
    served = judged.served_counts()
    cost = judging.cost_summary(ledger)
    document = {
        "kind": calibration_file.KIND,
        "created": now(),
        "reference": str(reference),
        "reference_sha256": sha256_of(reference),
        "judge": {
            **calibration.to_dict(),
            "endpoint": settings.endpoint("judge").host,
            "temperature": settings.judge_temperature,
            "served_models": served,
        },
        "judging": {
            "answers": len(prompt_of),
            "distinct_answers": len(set(prompt_of.values())),
            "requests": judged.requests,
            "from_cache": judged.from_cache,
            "batches": judged.batches,
            "unreadable": judged.unreadable,
            "refused": len(judged.refused),
            "cache": str(cache),
        },
        "cost": cost,
        "plot": str(plot),
    }
    target = out / f"{stem}.json"
    atomic_write(target, json.dumps(document, indent=2) + "\n")
    warning = judging.served_warning(settings.judge_model, served)
    if not args.json:
        distinct = len(set(prompt_of.values()))
        print(format_report(calibration, reference, plot, target, distinct))
        if judged.unreadable or judged.refused:
            print(printable(judging.refusals_line(judged)))
        print(printable(judging.cost_line(cost)))
    if warning:
        print(printable(f"warning: {warning}"), file=sys.stderr)
    return calibration, document, target


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
