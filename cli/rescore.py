"""``aidanbench rescore``: scores under other thresholds or another judge, from recorded chains.

Prints ``report``'s shape plus each line's recorded score and whether it is truncated, i.e. only a
lower bound (``aidanbench.analysis.rescore``). ``--judge-model M`` judges every recorded answer
again first (``analysis.rejudge``); ``--into NEW_RUN`` writes the re-judged chains as a run
directory that ``aidanbench run`` continues (``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aidanbench.analysis.cost import line_key
from aidanbench.analysis.rejudge import Unjudged
from aidanbench.analysis.report import (
    cap_lines,
    error_lines,
    headline_lines,
    judging_lines,
    report_payload,
    warning_lines,
)
from aidanbench.analysis.rescore import RescoredQuestion, rescore
from aidanbench.analysis.summary import (
    JUDGE_ROLES,
    describe_thresholds,
    group_results,
    summarise,
    warnings,
)
from aidanbench.analysis.summary_table import render_summary
from aidanbench.analysis.tables import score_text
from aidanbench.cli import add_command, judging, options
from aidanbench.cli.calibration_file import (
    OTHER_JUDGE_FLAG,
    check_judged_by,
    coherence_value,
    threshold_source,
    threshold_value,
)
from aidanbench.cli.env_args import NotGiven
from aidanbench.cli.report import (
    Inputs,
    add_common_arguments,
    make_console,
    one_line,
    print_lines,
    print_tables,
    read_inputs,
)
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.scores import Score, declared
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import ThresholdSource
from aidanbench.record.results import QuestionResult, threshold_source_text
from aidanbench.runner.rejudged import Rejudged, judgment_cache, rejudge

OFF = "off"
"""A switchable score's threshold that drops its rule."""


def thresholds_from(
    args: argparse.Namespace, coherence: float, results: Sequence[QuestionResult]
) -> Thresholds:
    """The thresholds the arguments ask for (``coherence`` parsed), validated: each score's
    given one, ``off`` for a switchable score whose rule is dropped, and for a switchable
    score not given the one the lines recorded (rescoring changes only what it is asked to)."""
    limits: dict[str, float | None] = {"coherence": float(coherence)}
    for score in declared():
        text = getattr(args, dest(score), None)
        if score.name == "coherence":
            continue
        if text is None:
            limits[score.name] = recorded_limit(score, results)
        elif text == OFF and score.switch is not None:
            limits[score.name] = None
        else:  # cosine novelty can exceed 1 (a negative cosine)
            limits[score.name] = threshold_value(text, score.flag, 2 * score.scale)
    return Thresholds(limits)


def recorded_limit(score: Score, results: Sequence[QuestionResult]) -> float | None:
    """The threshold of ``score`` every line recorded (None: off, or not recorded)."""
    found = dict.fromkeys((line.thresholds or Thresholds()).get(score.name) for line in results)
    if len(found) > 1:
        values = ", ".join("off" if v is None else f"{v:g}" for v in found)
        raise UsageError(
            f"the lines recorded different {score.label} thresholds ({values}); give "
            f"{score.flag} (a number, or {OFF})"
        )
    return next(iter(found), None)


def dest(score: Score) -> str:
    """The ``argparse`` destination of a score's threshold flag."""
    return score.measured_key


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench rescore``."""
    if not isinstance(args.judge_model, NotGiven):
        return judge_again(args)
    args.judge_model = args.judge_model.value
    if len(options.listed(args, "coherence_threshold")) > 1:
        raise UsageError(
            "--coherence-threshold is given once per judge of a panel: name the judges "
            "with --judge-model (or give it once)"
        )
    for given, flag in (
        (args.into is not None, "--into"),
        (args.batch, "--batch"),
        (args.judge_samples != 1, "--judge-samples"),
    ):
        if given:
            raise UsageError(f"{flag} needs --judge-model (the judge to judge the answers again)")
    coherence = coherence_value(args.coherence_threshold)
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    thresholds = thresholds_from(args, coherence, inputs.results)
    given = getattr(coherence, "source", None)
    judged_by = (result.judge_model for result in inputs.results)
    check_judged_by(coherence, judged_by, args.other_judge_calibration)
    try:
        source = threshold_source_text(ThresholdSource.of(thresholds.coherence, given))
        rescored = rescore(inputs.results, thresholds, source)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc
    mode, notes = inputs.reward_mode, inputs.notes
    if args.json:
        print(json.dumps(rescore_payload(rescored, thresholds, mode, notes), indent=2))
    else:
        print_rescore(rescored, thresholds, make_console(), mode, notes)
    return 0


def _into(args: argparse.Namespace) -> Path | None:
    """``--into``: a new directory (an interrupted rescore leaves only its build folder,
    ``Recorder.build``)."""
    into: Path | None = args.into
    if into is None:
        return None
    if len(args.paths) != 1:
        raise UsageError("--into takes one PATH (the run whose chains it continues)")
    if into.exists() and not into.is_dir():
        raise UsageError(f"--into {into}: is a file")
    if into.exists() and any(into.iterdir()):
        raise UsageError(f"--into {into} exists already; name a new one")
    return into


def judge_again(args: argparse.Namespace) -> int:
    """Judge again (one judge or a panel), rescore, print; with ``--into``, write the run."""
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    first = coherence_value(args.coherence_threshold)
    thresholds = thresholds_from(args, first, inputs.results)
    for score in declared():
        if (
            score.name in thresholds.on
            and score.name != "coherence"
            and score.cost_role in JUDGE_ROLES
        ):
            raise UsageError(
                f"{score.flag} with --judge-model: {score.label} is the judge's too and is not "
                f"judged again (only coherence is); give {score.flag} {OFF}"
            )
    if args.other_judge_calibration:
        raise UsageError(f"{OTHER_JUDGE_FLAG} is for recorded scores: not with --judge-model")
    judges = options.judges(args)
    coherence = [coherence_value(judge.coherence_threshold) for judge in judges]
    try:
        sources = [
            threshold_source(value, judge.judge_model)
            for value, judge in zip(coherence, judges, strict=True)
        ]
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None
    into = _into(args)
    cache = judgment_cache(args.cache, into, args.paths)
    panel = [
        (judging.judge_settings(judge, cache), float(value), source)
        for judge, value, source in zip(judges, coherence, sources, strict=True)
    ]
    origin = Path(args.paths[0])
    try:
        found = rejudge(inputs.results, panel, thresholds, origin, into, **judging.progress(args))
    except Unjudged as exc:
        print(printable(f"aidanbench rescore: {exc}"), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(payload(found, thresholds, inputs), indent=2))
    else:
        show(found, thresholds, inputs)
    return 0


def payload(found: Rejudged, thresholds: Thresholds, inputs: Inputs) -> dict[str, Any]:
    """What ``--json`` prints: each judge's figures, the rescored lines, the run written."""
    fields = found.judge_fields
    return {
        "judge": {**fields[0], "cost": found.cost},
        **({"panel": fields} if len(fields) > 1 else {}),
        **rescore_payload(found.rescored, thresholds, inputs.reward_mode, inputs.notes),
        **({"into": found.seeded} if found.seeded is not None else {}),
    }


def show(found: Rejudged, thresholds: Thresholds, inputs: Inputs) -> None:
    """What the judging did and cost, the rescored lines, and the run written."""
    console = make_console()
    for fields in found.judge_fields:
        console.print(judged_text(fields, found.answers), markup=False)
        if fields["unreadable"] or fields["refused"]:
            line = judging.refusals_line(fields)
            console.print(printable(f"{fields['model']}: {line}"), markup=False)
    console.print(printable(judging.cost_line(found.cost)), markup=False)
    mode, notes = inputs.reward_mode, inputs.notes  # a substituted judge: summary.warnings
    judge = found.judge_fields[0]["model"]
    print_rescore(found.rescored, thresholds, console, mode, notes, judge=judge)
    if found.seeded is not None:
        make_console().print(into_text(found.seeded), markup=False)


def judged_text(fields: dict[str, Any], answers: int) -> str:
    """What the judging did, in one line."""
    served = ", ".join(f"{name} ({n})" for name, n in fields["served_models"].items())
    return printable(
        f"Judged again by {fields['model']} ({fields['samples']} judgment(s) per answer, "
        f"the first deciding): {answers} distinct answers, {fields['from_cache']} from the "
        f"cache, {fields['requests']} requests"
        + (f" in batch(es) {', '.join(fields['batches'])}" if fields["batches"] else "")
        + f"; served by {served or 'nobody (nothing judged)'}."
    )


def into_text(seeded: dict[str, Any]) -> str:
    """Where the re-judged run is and how to continue it."""
    head = printable(
        f"Wrote {seeded['run_dir']}: {seeded['threads']} question threads, {seeded['open']} "
        "of them open (every recorded answer passes now, or the source stopped early); "
        "continue them, asking the models only for answers past each chain (add the "
        "models' endpoints and keys as for any run"
        + (
            "; one command per set of models that answered the same questions"
            if len(seeded["continue"]) > 1
            else ""
        )
        + "):"
    )
    return "\n".join([head, *(f"  {printable(command)}" for command in seeded["continue"])])


def truncation_note(rescored: Sequence[RescoredQuestion]) -> str:
    """How many lines are lower bounds because the run stopped too early to tell."""
    count = sum(1 for r in rescored if r.truncated)
    bounded = sum(1 for r in rescored if r.result.lower_bound and not r.truncated)
    already = (
        f" {bounded} other line(s) are lower bounds (≥) whatever the thresholds: they "
        "errored or did not finish, and so are the totals that include them."
        if bounded
        else ""
    )
    if not count:
        exact = "these scores are exact." if not bounded else "no threshold made them inexact."
        return (
            "No question is truncated: every chain the run ended by its rule still ends "
            f"at or before its recorded terminal answer, so {exact}{already}"
        )
    return (
        f"{count} of {len(rescored)} question lines are truncated (≥): "
        "their recorded terminal answer passes these looser thresholds, so they are scored "
        "up to where the run stopped and their scores, and the totals that include them, "
        f"are lower bounds.{already}"
    )


def change_table(rescored: Sequence[RescoredQuestion], reward_mode: str = "count") -> Table:
    """Recorded and rescored headlines side by side, per row as the summary shows them."""
    table = Table(title="Recorded vs rescored totals")
    for name in ("model", "temp", "recorded", "rescored", "change", "truncated"):
        table.add_column(name, justify="left" if name == "model" else "right")
    before = summarise([r.original for r in rescored], reward_mode)
    after = summarise([r.result for r in rescored], reward_mode)
    truncated: dict[tuple[str, float], int] = {}
    for r in rescored:
        key = (r.original.model, r.original.temperature)
        truncated[key] = truncated.get(key, 0) + int(r.truncated)
    for old, new in zip(before, after, strict=True):
        spec = ".2f" if reward_mode == "novelty_sum" else ".1f" if old.repeats > 1 else "g"
        count = truncated[(old.model, old.temperature)]
        change = f"{new.reward - old.reward:+{spec}}"
        if old.lower_bound or new.lower_bound:  # a difference of bounds is known to one side
            change = ("≥ " if new.lower_bound and not old.lower_bound else "~ ") + change
        table.add_row(
            printable(old.model),
            f"{old.temperature:g}",
            score_text(format(old.reward, spec), old.lower_bound),
            score_text(format(new.reward, spec), new.lower_bound),
            change,
            str(count),
        )
    table.caption = "≥ a lower bound; ~ a change between lower bounds (either way)"
    return table


def _original_thresholds(lines: Sequence[RescoredQuestion]) -> list[dict[str, Any]]:
    distinct = dict.fromkeys(r.original_thresholds for r in lines)
    return [t.record() for t in distinct]


def rescore_payload(
    rescored: Sequence[RescoredQuestion],
    thresholds: Thresholds,
    reward_mode: str = "count",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """``report --json`` plus recorded scores and truncation; ``original_score`` is per repeat, like
    ``score``."""
    results = [r.result for r in rescored]
    by_key = {line_key(r.result): r for r in rescored}
    question_fields = {
        key: {"original_score": r.original_score, "truncated": r.truncated}
        for key, r in by_key.items()
    }
    run_fields = {}
    for key, lines in group_results(results).items():
        chosen = [by_key[line_key(line)] for line in lines]
        (recorded,) = summarise([r.original for r in chosen])
        run_fields[key] = {
            "original_score": recorded.to_dict()["score"],
            "original_lower_bound": recorded.lower_bound,
            "truncated": sum(1 for r in chosen if r.truncated),
            "original_thresholds": _original_thresholds(chosen),
        }
    payload = report_payload(
        results,
        summarise(results, reward_mode),
        question_fields=question_fields,
        run_fields=run_fields,
        reward_mode=reward_mode,
        notes=notes,
    )
    return {
        "thresholds": thresholds.record(),
        "truncated": sum(1 for r in rescored if r.truncated),
        "note": truncation_note(rescored),
        **payload,
    }


def print_rescore(
    rescored: Sequence[RescoredQuestion],
    thresholds: Thresholds,
    console: Console,
    reward_mode: str = "count",
    notes: Sequence[str] = (),
    judge: str | None = None,
) -> None:
    """The text report of a rescore (of chains judged again by ``judge``, when given)."""
    results = [r.result for r in rescored]
    originals = "; ".join(
        describe_thresholds(t) for t in dict.fromkeys(r.original_thresholds for r in rescored)
    )
    how = (
        "without API calls"
        if judge is None
        else f"every answer's coherence judged again by {printable(judge)}"
    )
    console.print(
        f"Rescored with {describe_thresholds(thresholds)} (the run used {originals}), "
        f"from the recorded chains, {how}.",
        markup=False,
    )
    rows = summarise(results, reward_mode)
    render_summary(rows, console, title="AidanBench summary, rescored")
    print_lines(headline_lines(rows, results), console)
    print_lines(cap_lines(rows), console)
    print_lines(judging_lines(rows), console)
    console.print(change_table(rescored, reward_mode))
    print_tables(rows, results, console)
    print_lines(error_lines(results), console)
    truncated = any(r.truncated for r in rescored)
    console.print(truncation_note(rescored), style="bold yellow" if truncated else None)
    print_lines(warning_lines([*notes, *warnings(results)]), console, style="yellow")


def add_threshold_flag(parser: argparse.ArgumentParser, score: Score) -> None:
    """A score's threshold flag: required for a score always on; for a switchable one, the
    lines' own threshold when not given, and ``off`` drops its rule."""
    upper = f"0-{2 * score.scale:g}"
    if score.switch is None:
        help = f"valid when {score.label} > T ({upper}; the benchmark's is {score.threshold:g})"
        parser.add_argument(score.flag, dest=dest(score), required=True, metavar="T", help=help)
        return
    help = (
        f"valid only when {score.label} > T as well ({upper}), or {OFF} to drop that rule; "
        f"default: the threshold the run recorded (off when it had {score.switch} off). "
        f"Needs a run that recorded {score.label}"
    )
    parser.add_argument(score.flag, dest=dest(score), metavar="T|off", help=help)


def register(subparsers: Any) -> None:
    """Add the ``rescore`` command."""
    parser = add_command(
        subparsers,
        "rescore",
        (
            "Walk every recorded chain again under other thresholds. Stricter thresholds "
            "give exact scores; under looser ones a chain whose recorded terminal answer "
            "now passes is marked truncated and counts as a lower bound. Thresholds of an "
            "original-schema file are assumed to be the benchmark's (15, 0.15). With "
            "--judge-model M, every answer is judged again by M first (API calls, cached "
            "in --cache; --batch for the batch API), and --into NEW_RUN writes the "
            "re-judged chains as a run directory that aidanbench run continues."
        ),
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--coherence-threshold",
        required=True,
        action=options.PanelFlag,
        metavar="X",
        help="valid when coherence > X (0-100; the benchmark's is 15), or a judge "
        "calibration file (aidanbench calibrate --judge-model) giving X; with a judge "
        "panel (--judge-model given several times), once per judge",
    )
    parser.add_argument(
        OTHER_JUDGE_FLAG,
        action="store_true",
        help="without --judge-model: take a calibration file's threshold as the cut on scores "
        "another judge gave (refused otherwise: each judge scores on its own scale)",
    )
    for score in declared():
        if score.name != "coherence":
            add_threshold_flag(parser, score)
    judging.register(parser)
    parser.add_argument(
        "--into",
        type=Path,
        metavar="NEW_RUN",
        help="with --judge-model: write the re-judged chains as a run directory that "
        "aidanbench run continues (asking the models only for answers past each chain)",
    )
    parser.set_defaults(judge_model=NotGiven(parser.get_default("judge_model")), handler=run)
