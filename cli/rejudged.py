"""``aidanbench rescore --judge-model M``: the recorded answers judged again, the chains
walked under the new judgments and thresholds, and with ``--into`` a run directory of
the re-judged chains for ``aidanbench run`` to continue (``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from aidanbench.analysis.rejudge import Unjudged
from aidanbench.cli import calibration_file, judging, options
from aidanbench.cli.report import Inputs, make_console, read_inputs
from aidanbench.cli.rescore_report import print_rescore, rescore_payload
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.thresholds import Thresholds
from aidanbench.runner.rejudged import Rejudged, judgment_cache, rejudge


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


def run(args: argparse.Namespace, thresholds: Thresholds) -> int:
    """Judge again (one judge, or a panel: ``--judge-model`` given several times, each
    with its own threshold), rescore, print; with ``--into`` write the run directory."""
    if thresholds.llm_novelty is not None:
        raise UsageError(
            "--llm-novelty-threshold with --judge-model: similarity judgments are not "
            "judged again (only coherence is); leave it out"
        )
    judges = options.judges(args)
    coherence = [calibration_file.coherence_value(judge.coherence_threshold) for judge in judges]
    try:
        sources = [
            calibration_file.threshold_source(value, judge.judge_model)
            for value, judge in zip(coherence, judges, strict=True)
        ]
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    into = _into(args)
    thresholds = dataclasses.replace(thresholds, coherence=float(coherence[0]))
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
