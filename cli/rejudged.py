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

from aidanbench.analysis.judge_noise import SAMPLES_KEY
from aidanbench.analysis.rejudge import Rejudging, coherence_prompt
from aidanbench.analysis.rescore import RescoredQuestion, rescore_question
from aidanbench.cli import calibration_file, judging
from aidanbench.cli.report import Inputs, make_console, one_line, read_inputs
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import Settings
from aidanbench.core.thresholds import Thresholds
from aidanbench.record import files
from aidanbench.record.metadata import ThresholdSource, read_metadata
from aidanbench.record.recorder import Recorder, now
from aidanbench.record.results import QuestionResult, threshold_source_text
from aidanbench.record.usage import UsageLedger
from aidanbench.runner import session
from aidanbench.runner.rejudged import QUESTIONS_FILE, copy_cache, seed_run, task_settings
from aidanbench.runner.spec import RunSpec

DEFAULT_CACHE = Path("judge-cache.sqlite")
"""Where judgments are cached without ``--cache`` or ``--into`` (the working directory)."""


def _rejudged_line(line: QuestionResult, judged: Rejudging, model: str) -> QuestionResult:
    """The line with the new judge's deciding judgment as each answer's coherence."""
    answers = []
    for answer in line.answers:
        found = judged.judgments[coherence_prompt(line.question, answer.answer)]
        calls = dict(answer.extra.get("calls") or {})
        calls["judge"] = {
            "served_model": found.served[0],
            "latency_s": 0.0,
            "input_tokens": 0,
            "output_tokens": 0,
            "calls": 0,
        }
        extra = {**answer.extra, "calls": calls}
        extra.pop(SAMPLES_KEY, None)
        if len(found.scores) > 1:
            extra[SAMPLES_KEY] = [float(s) for s in found.scores]
        answers.append(dataclasses.replace(answer, coherence=float(found.score), extra=extra))
    return dataclasses.replace(line, answers=tuple(answers), judge_model=model)


def rejudge_lines(
    results: Sequence[QuestionResult],
    judged: Rejudging,
    model: str,
    thresholds: Thresholds,
    source: str | None = None,
) -> list[RescoredQuestion]:
    """Every line judged again and walked under ``thresholds`` (from ``source``, in
    words); ``original`` is the line as recorded (its own judge's scores)."""
    rescored = []
    for line in results:
        walked = rescore_question(_rejudged_line(line, judged, model), thresholds, source)
        rescored.append(dataclasses.replace(walked, original=line))
    return rescored


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


def run(args: argparse.Namespace, thresholds: Thresholds, coherence: float) -> int:
    """Judge again, rescore, print; with ``--into`` write the run directory."""
    model = args.judge_model
    if thresholds.llm_novelty is not None:
        raise UsageError(
            "--llm-novelty-threshold with --judge-model: similarity judgments are not "
            "judged again (only coherence is); leave it out"
        )
    try:
        source = calibration_file.threshold_source(coherence, model)
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    into = _into(args)
    if into is None:
        cache: Path = args.cache or DEFAULT_CACHE
        settings = judging.judge_settings(args, cache)
        ledger = UsageLedger(judging.ledger_path(cache))
        return rejudge(args, inputs, thresholds, source, settings, ledger, None)
    aside = into.with_name(f".{into.name}.partial")
    settings = judging.judge_settings(args, args.cache or aside / files.CACHE)
    with Recorder.build(into, aside) as recorder:  # every check made: the first write
        assert settings.cache_path is not None
        if not Path(settings.cache_path).exists():
            copy_cache(Path(args.paths[0]), Path(settings.cache_path))
        return rejudge(args, inputs, thresholds, source, settings, recorder.ledger, recorder)


def rejudge(
    args: argparse.Namespace,
    inputs: Inputs,
    thresholds: Thresholds,
    source: dict[str, Any] | None,
    settings: Settings,
    ledger: UsageLedger,
    recorder: Recorder | None,
) -> int:
    """Judge the inputs' answers again, rescore and print; write the run directory of
    ``recorder`` (``--into``) when given."""
    model = settings.judge_model
    prompts = [coherence_prompt(r.question, a.answer) for r in inputs.results for a in r.answers]
    judged = judging.judge_all(prompts, settings, args, ledger)
    if judged.failures:
        line = judging.failures_line(judged, len(set(prompts)))
        print(printable(f"aidanbench rescore: {line}"), file=sys.stderr)
        return 1
    used = ThresholdSource.of(thresholds.coherence, source)
    rescored = rejudge_lines(inputs.results, judged, model, thresholds, threshold_source_text(used))
    served = judged.served_counts()
    cost = judging.cost_summary(ledger)
    judge_fields = {
        "model": model,
        "samples": settings.judge_samples,
        "coherence_threshold_source": used.model_dump(exclude_none=True),
        "served_models": served,
        "requests": judged.requests,
        "from_cache": judged.from_cache,
        "batches": judged.batches,
        "cost": cost,
    }
    from aidanbench.cli.rescore import print_rescore, rescore_payload  # it imports this module

    mode, notes = inputs.reward_mode, inputs.notes  # a substituted judge: summary.warnings
    if args.json:
        payload = {"judge": judge_fields, **rescore_payload(rescored, thresholds, mode, notes)}
    else:
        console = make_console()
        console.print(judged_text(judge_fields, len(set(prompts))), markup=False)
        console.print(printable(judging.cost_line(cost)), markup=False)
        print_rescore(rescored, thresholds, console, mode, notes, judge=model)
    if recorder is not None:
        seeded = write_into(args, recorder, rescored, settings, source, judge_fields, thresholds)
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
    settings: Settings,
    source: dict[str, Any] | None,
    judge_fields: dict[str, Any],
    thresholds: Thresholds,
) -> dict[str, Any]:
    """Seed the run directory ``--into`` through its ``recorder``, complete it, and say
    how ``aidanbench run`` continues it."""
    into: Path = args.into
    origin = Path(args.paths[0])
    stored = session.stored_scoring(read_metadata(origin) if origin.is_dir() else None)
    judge = {
        "judge_model": settings.judge_model,
        "judge_base_url": settings.judge_base_url,
        "judge_api_key_env": settings.judge_api_key_env,
        "judge_temperature": settings.judge_temperature,
        "judge_attempts": settings.judge_attempts,
        "judge_samples": settings.judge_samples,
        "coherence_threshold": thresholds.coherence,
        "novelty_threshold": thresholds.novelty,
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
        )
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    provenance = {
        "path": str(origin.resolve()),
        "kind": "run directory" if origin.is_dir() else "results file",
        "sha256": None if origin.is_dir() else hashlib.sha256(origin.read_bytes()).hexdigest(),
        "judge": {k: v for k, v in judge_fields.items() if k != "cost"},
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
