"""``aidanbench rescore --judge-model M``: the recorded answers judged again, the chains
walked under the new judgments and thresholds, and with ``--into`` a run directory of
the re-judged chains for ``aidanbench run`` to continue (``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import shlex
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
from aidanbench.record.metadata import ThresholdSource, read_metadata
from aidanbench.record.recorder import Recorder, now
from aidanbench.record.results import threshold_source_text
from aidanbench.record.usage import UsageLedger
from aidanbench.runner import session
from aidanbench.runner.rejudged import QUESTIONS_FILE, copy_cache, seed_run, task_settings
from aidanbench.runner.spec import RunSpec

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
    thresholds = dataclasses.replace(thresholds, coherence=float(coherence[0]))
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
    """Seed the run directory ``--into`` through its ``recorder``, complete it, and say
    how ``aidanbench run`` continues it (with the same judge, or judge panel)."""
    into: Path = args.into
    origin = Path(args.paths[0])
    stored = session.stored_scoring(read_metadata(origin) if origin.is_dir() else None)
    settings, source = panel_settings[0], panel[0][2]
    judge = {
        "judge_model": settings.judge_model,
        "judge_base_url": settings.judge_base_url,
        "judge_api_key_env": settings.judge_api_key_env,
        "judge_temperature": settings.judge_temperature,
        "judge_attempts": settings.judge_attempts,
        "judge_samples": settings.judge_samples,
        "coherence_threshold": thresholds.coherence,
        "novelty_threshold": thresholds.novelty,
        "judge_panel": [
            {
                "model": s.judge_model,
                "base_url": s.judge_base_url,
                "api_key_env": s.judge_api_key_env,
                "coherence_threshold": threshold,
            }
            for s, (_, threshold, _) in zip(panel_settings[1:], panel[1:], strict=True)
        ],
    }
    settings_of = {}
    for line in rescored:
        key = (line.result.model, line.result.temperature)
        if key not in settings_of:
            recorded = dict(stored.get(line.result.model, {}))
            if line.original.embedding_model and "embedding_model" not in recorded:
                recorded["embedding_model"] = line.original.embedding_model
            settings_of[key] = task_settings(key[0], key[1], recorded, judge)
    questions = list(dict.fromkeys(line.result.question for line in rescored))
    try:
        spec = RunSpec(
            models=list(dict.fromkeys(m for m, _ in settings_of)),
            temperatures=list(dict.fromkeys(t for _, t in settings_of)),
            questions=questions,
            questions_source={"kind": "file", "path": str(into / QUESTIONS_FILE)},
            repeats=max(line.result.repeat for line in rescored),
            settings={k: v for k, v in judge.items() if v is not None},
            run_dir=into,
            coherence_threshold_source=source,
            panel_threshold_sources=[found for _, _, found in panel[1:]],
        )
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    provenance = {
        "path": str(origin.resolve()),
        "kind": "run directory" if origin.is_dir() else "results file",
        "sha256": None if origin.is_dir() else hashlib.sha256(origin.read_bytes()).hexdigest(),
        "judge": judge_fields[0],
        **({"panel": judge_fields} if len(judge_fields) > 1 else {}),
        "thresholds": {
            "coherence": judge["coherence_threshold"],
            "novelty": judge["novelty_threshold"],
        },
        "created": now(),
    }
    try:
        seeded = asyncio.run(seed_run(recorder, rescored, settings_of, spec, provenance))
    except ValueError as exc:
        raise UsageError(printable(one_line(exc))) from None
    recorder.complete()
    commands = []
    for models, questions_file in seeded.question_sets:
        command = ["aidanbench", "run", "--run-dir", str(into), "--use-stored-settings"]
        command += ["--questions-file", str(into / questions_file)]
        for name in models:
            command += ["-m", name]
        for temperature in spec.temperatures:
            command += ["-T", f"{temperature:g}"]
        if spec.repeats > 1:
            command += ["--repeats", str(spec.repeats)]
        commands.append(shlex.join(command))
    return {
        "run_dir": str(into),
        "threads": len(seeded.lines),
        "open": seeded.open,
        "continue": commands,
    }


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
