"""``aidanbench rescore``: scores under other thresholds, or another judge, from the
recorded chains.

Prints the shape ``report`` prints, plus each line's recorded score and whether it is
truncated (see ``aidanbench.analysis.rescore``): under looser thresholds a recorded chain
can end at an answer that now passes, and its score is then only a lower bound.

With ``--judge-model M`` every recorded answer is judged again by M first
(``analysis.rejudge``: the benchmark's coherence prompt, cached, direct or batched) and
the chains are walked under M's judgments: exact where a chain now stops earlier, a lower
bound where a recorded failing answer now passes. ``--into NEW_RUN`` writes those
re-judged chains as a run directory that ``aidanbench run`` continues
(``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aidanbench.analysis.rejudge import Unjudged
from aidanbench.analysis.rescore import rescore
from aidanbench.cli import add_command, judging, options
from aidanbench.cli.calibration_file import coherence_value, threshold_source, threshold_value
from aidanbench.cli.env_args import NotGiven
from aidanbench.cli.report import (
    Inputs,
    add_common_arguments,
    make_console,
    one_line,
    read_inputs,
)
from aidanbench.cli.rescore_report import print_rescore, rescore_payload
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import ThresholdSource
from aidanbench.record.results import threshold_source_text
from aidanbench.runner.rejudged import Rejudged, judgment_cache, rejudge


def source_text(coherence: float, given: Mapping[str, Any] | None) -> str | None:
    """Where the coherence threshold a rescore uses came from, in words."""
    return threshold_source_text(ThresholdSource.of(coherence, given))


def thresholds_from(args: argparse.Namespace) -> Thresholds:
    """The thresholds the arguments ask for, validated."""
    coherence = float(coherence_value(args.coherence_threshold))
    novelty = threshold_value(args.novelty_threshold, "--novelty-threshold", 2)
    llm = (
        None
        if args.llm_novelty_threshold is None
        else threshold_value(args.llm_novelty_threshold, "--llm-novelty-threshold", 2)
    )
    return Thresholds(coherence=coherence, novelty=novelty, llm_novelty=llm)


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench rescore``."""
    if isinstance(args.judge_model, NotGiven):
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
                raise UsageError(
                    f"{flag} needs --judge-model (the judge to judge the answers again)"
                )
    else:
        return judge_again(args, thresholds_from(args))
    thresholds = thresholds_from(args)
    given = getattr(coherence_value(args.coherence_threshold), "source", None)
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    try:
        rescored = rescore(inputs.results, thresholds, source_text(thresholds.coherence, given))
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc
    mode, notes = inputs.reward_mode, inputs.notes
    if args.json:
        print(json.dumps(rescore_payload(rescored, thresholds, mode, notes), indent=2))
    else:
        print_rescore(rescored, thresholds, make_console(), mode, notes)
    return 0


def _into(args: argparse.Namespace) -> Path | None:
    """``--into``: a new directory (an interrupted rescore left none, only the folder
    beside it where it is built, ``Recorder.build``)."""
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


def judge_again(args: argparse.Namespace, thresholds: Thresholds) -> int:
    """Judge again (one judge, or a panel: ``--judge-model`` given several times, each
    with its own threshold), rescore, print; with ``--into`` write the run directory."""
    if thresholds.llm_novelty is not None:
        raise UsageError(
            "--llm-novelty-threshold with --judge-model: similarity judgments are not "
            "judged again (only coherence is); leave it out"
        )
    judges = options.judges(args)
    coherence = [coherence_value(judge.coherence_threshold) for judge in judges]
    try:
        sources = [
            threshold_source(value, judge.judge_model)
            for value, judge in zip(coherence, judges, strict=True)
        ]
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    into = _into(args)
    cache = judgment_cache(args.cache, into)
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
        "--novelty-threshold",
        required=True,
        metavar="Y",
        help="valid when embedding novelty > Y (0-2; the benchmark's is 0.15)",
    )
    parser.add_argument(
        "--llm-novelty-threshold",
        metavar="Z",
        help="also require LLM novelty > Z (0-2; needs a run with the similarity judge)",
    )
    judging.register(parser)
    parser.add_argument(
        "--into",
        type=Path,
        metavar="NEW_RUN",
        help="with --judge-model: write the re-judged chains as a run directory that "
        "aidanbench run continues (asking the models only for answers past each chain)",
    )
    parser.set_defaults(judge_model=NotGiven(parser.get_default("judge_model")), handler=run)
