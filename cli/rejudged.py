"""``aidanbench rescore --judge-model M``: the recorded answers judged again, the chains
walked under the new judgments and thresholds, and with ``--into`` a run directory of
the re-judged chains for ``aidanbench run`` to continue (``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.analysis.rejudge import coherence_prompt
from aidanbench.analysis.rescore import RescoredQuestion, rejudge_lines
from aidanbench.cli import calibration_file, judging, options
from aidanbench.cli.report import Inputs, make_console, one_line, read_inputs
from aidanbench.cli.rescore_report import print_rescore, rescore_payload
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import Settings
from aidanbench.core.thresholds import Thresholds
from aidanbench.record import files
from aidanbench.record.metadata import ThresholdSource
from aidanbench.record.recorder import Recorder
from aidanbench.record.results import threshold_source_text
from aidanbench.record.usage import UsageLedger
from aidanbench.runner.rejudged import copy_cache, seed_into

DEFAULT_CACHE = Path("judge-cache.sqlite")
"""Where judgments are cached without ``--cache`` or ``--into`` (the working directory)."""


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
    panel = [
        (judge, float(value), source)
        for judge, value, source in zip(judges, coherence, sources, strict=True)
    ]
    thresholds = thresholds.replaced(coherence=float(coherence[0]))
    if into is None:
        cache: Path = args.cache or DEFAULT_CACHE
        settings = [judging.judge_settings(judge, cache) for judge in judges]
        ledger = UsageLedger(judging.ledger_path(cache))
        return rejudge(args, inputs, thresholds, panel, settings, ledger, None)
    aside = into.with_name(f".{into.name}.partial")
    cache = args.cache or aside / files.CACHE
    settings = [judging.judge_settings(judge, cache) for judge in judges]
    with Recorder.build(into, aside) as recorder:  # every check made: the first write
        if not cache.exists():
            copy_cache(Path(args.paths[0]), cache)
        return rejudge(args, inputs, thresholds, panel, settings, recorder.ledger, recorder)


Seat = tuple[argparse.Namespace, float, dict[str, Any] | None]
"""A judge of the re-judging: its flags, its coherence threshold and where that came from."""


def rejudge(
    args: argparse.Namespace,
    inputs: Inputs,
    thresholds: Thresholds,
    panel: Sequence[Seat],
    settings: Sequence[Settings],
    ledger: UsageLedger,
    recorder: Recorder | None,
) -> int:
    """Judge the inputs' answers again (each judge of ``panel``), rescore and print;
    write the run directory of ``recorder`` (``--into``) when given."""
    prompts = [coherence_prompt(r.question, a.answer) for r in inputs.results for a in r.answers]
    judged = [
        judging.judge_all(prompts, s, judge, ledger)
        for (judge, _, _), s in zip(panel, settings, strict=True)
    ]
    for found in judged:
        if found.failures:
            line = judging.failures_line(found, len(set(prompts)))
            print(printable(f"aidanbench rescore: {line}"), file=sys.stderr)
            return 1
    judges = [
        (s.judge_model, threshold, found)
        for s, (_, threshold, _), found in zip(settings, panel, judged, strict=True)
    ]
    used = [ThresholdSource.of(threshold, source) for _, threshold, source in panel]
    rescored = rejudge_lines(inputs.results, judges, thresholds, threshold_source_text(used[0]))
    cost = judging.cost_summary(ledger)
    judge_fields = [
        {
            "model": s.judge_model,
            "samples": s.judge_samples,
            "coherence_threshold": threshold,
            "coherence_threshold_source": source.model_dump(exclude_none=True),
            "served_models": found.served_counts(),
            "requests": found.requests,
            "from_cache": found.from_cache,
            "batches": found.batches,
            "unreadable": found.unreadable,
            "refused": len(found.refused),
        }
        for s, (_, threshold, _), found, source in zip(settings, panel, judged, used, strict=True)
    ]
    mode, notes = inputs.reward_mode, inputs.notes  # a substituted judge: summary.warnings
    judge_model = settings[0].judge_model
    if args.json:
        payload = {
            "judge": {**judge_fields[0], "cost": cost},
            **({"panel": judge_fields} if len(panel) > 1 else {}),
            **rescore_payload(rescored, thresholds, mode, notes),
        }
    else:
        console = make_console()
        for fields, found in zip(judge_fields, judged, strict=True):
            console.print(judged_text(fields, len(set(prompts))), markup=False)
            if found.unreadable or found.refused:
                line = judging.refusals_line(found)
                console.print(printable(f"{fields['model']}: {line}"), markup=False)
        console.print(printable(judging.cost_line(cost)), markup=False)
        print_rescore(rescored, thresholds, console, mode, notes, judge=judge_model)
    if recorder is not None:
        seeded = write_into(args, recorder, rescored, settings, panel, judge_fields, thresholds)
        if args.json:
            payload["into"] = seeded
        else:
            make_console().print(into_text(seeded), markup=False)
    if args.json:
        print(json.dumps(payload, indent=2))
    return 0


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


def write_into(
    args: argparse.Namespace,
    recorder: Recorder,
    rescored: Sequence[RescoredQuestion],
    panel_settings: Sequence[Settings],
    panel: Sequence[Seat],
    judge_fields: list[dict[str, Any]],
    thresholds: Thresholds,
) -> dict[str, Any]:
    """Seed the run directory ``--into`` through its ``recorder`` (``runner.rejudged``)
    and say how ``aidanbench run`` continues it; a problem is one ``UsageError`` line."""
    judges = [
        (s, threshold, source)
        for s, (_, threshold, source) in zip(panel_settings, panel, strict=True)
    ]
    try:
        origin = Path(args.paths[0])
        return seed_into(recorder, args.into, rescored, origin, judges, judge_fields, thresholds)
    except ValueError as exc:
        raise UsageError(printable(one_line(exc))) from None


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
