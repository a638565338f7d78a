"""``rescore --judge-model M``: the recorded answers judged again and the chains walked
under the new judgments (``rejudge``); with ``--into NEW_RUN``, a run directory of the
re-judged chains, which ``aidanbench run`` continues.

Each chain, walked under the new judgments and thresholds (``analysis.rescore``), becomes
one thread checkpointed as if the run had just decided its last answer:

* a chain that now stops earlier ends there, finished (a run under the new rule would never
  have asked for the answers after its new failing answer);
* a chain whose every recorded answer now passes, or that the source stopped on an error or
  a spending cap, is left open: ``aidanbench run`` asks only for answers past the last
  recorded one; one stopped at its answer cap stays stopped (a scoring setting kept).

Recorded answers are never asked for again: they keep the source's text, reply, novelty and
generation cost, with the new judgments and the flag ``rejudged``. A source run directory's
vectors are copied with its cache (a results file has none: the run embeds the earlier
answers once). The metadata records the scoring settings, the threshold's source and the
source run (``rejudged_from``), so ``run --use-stored-settings`` continues with exactly them.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_RUNTIME
from langgraph.runtime import Runtime

from aidanbench.analysis.rejudge import (
    Unjudged,
    coherence_prompt,
    cost_summary,
    judge_all,
    ledger_path,
)
from aidanbench.analysis.rescore import RescoredQuestion, rejudge_lines
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import Settings
from aidanbench.core.state import AnswerRecord
from aidanbench.core.thresholds import Thresholds
from aidanbench.core.vocabulary import CAP_STOPS, is_threshold_stop
from aidanbench.graph.question import build_question_graph
from aidanbench.nodes.context import no_calls
from aidanbench.nodes.metrics import chain_metrics
from aidanbench.nodes.prepare import measured_by
from aidanbench.record import files
from aidanbench.record.lines import AnswerLine, QuestionLine
from aidanbench.record.metadata import ThresholdSource, read_metadata
from aidanbench.record.recorder import Recorder, now, question_counts
from aidanbench.record.results import (
    QuestionResult,
    results_of,
    run_totals,
    threshold_source_text,
    totals,
)
from aidanbench.record.usage import UsageBook, UsageLedger
from aidanbench.runner import session
from aidanbench.runner.checkpoints import open_checkpointer
from aidanbench.runner.spec import RunSpec, make_settings
from aidanbench.runner.tasks import Task
from aidanbench.services import default_services

QUESTIONS_FILE = "questions.json"
"""The question set of a re-judged run (``run --questions-file``)."""

REJUDGED_FLAG = "rejudged"
"""Flag of an answer carried from a source run and judged again."""


def copy_cache(source: Path, target: Path) -> bool:
    """Copy a source run directory's vector cache to ``target`` with SQLite's backup,
    consistent even while the source is being written."""
    found = source / files.CACHE
    if not source.is_dir() or not found.exists():
        return False
    with (
        closing(sqlite3.connect(files.read_only_uri(found), uri=True)) as src,
        closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)
    return True


def _record(row: AnswerLine, stop: str | None) -> AnswerRecord:
    calls = {k: v for k, v in (row.calls or {}).items() if k in ("generate", "embed")}
    calls.setdefault("generate", no_calls())
    record = AnswerRecord(
        index=row.index,
        answer=row.answer,
        raw_reply=row.answer if row.raw_reply is None else row.raw_reply,
        used_answer_tag=row.used_answer_tag,
        coherence=None if row.coherence is None else float(row.coherence),
        novelty=float(row.novelty or 0.0),
        llm_novelty=None,
        valid=row.valid,
        stop_reason=None if row.valid else stop,  # type: ignore[typeddict-item]
        elapsed_s=float(row.elapsed_s or 0.0),
        calls=calls,
        flags=[*(row.flags or []), REJUDGED_FLAG],
    )
    samples = row.coherence_samples
    if samples and len(samples) > 1:
        record["coherence_samples"] = [float(s) for s in samples]
    if row.judges:
        record["judges"] = list(row.judges)
    return record


def thread_values(line: RescoredQuestion, settings: Settings) -> dict[str, Any]:
    """The state a re-judged chain's thread starts from (module docstring); a
    ``ValueError`` for a chain with an answer missing its novelty."""
    result = line.result
    kept: list[AnswerLine] = []
    for row in result.answers:
        kept.append(row)
        if not row.valid:
            break
    stop = result.stop_reason
    if stop == "unscored":
        raise ValueError(
            f"answer {kept[-1].index} to {result.question[:60]!r} ({result.model}) has no "
            f"{missing_figure(kept[-1])}: its chain cannot be continued"
        )
    capped = stop in CAP_STOPS and line.original.stop_reason == stop
    if not is_threshold_stop(stop) and not capped:
        stop = None  # truncated, errored, capped by spending or unfinished: go on
    answers = [_record(row, result.stop_reason) for row in kept]
    elapsed = answers[-1]["elapsed_s"] if answers else 0.0
    empty = {key: None for key in ("candidate", "lookahead", "error", "speculative")}
    outcomes = {key: None for key in ("coherence_result", "novelty_result", "similarity_result")}
    return {
        "question": result.question,
        "answers": answers,
        "started_at": time.time() - elapsed,
        "stop_reason": stop,
        "measured": measured_by(settings),
        **chain_metrics(answers, settings.reward_mode),
        **empty,
        **outcomes,
    }


def missing_figure(row: AnswerLine) -> str:
    """What an unscored answer lacks, in words: a coherence the judge refused (asked again
    by the same command) or a recorded novelty."""
    if row.coherence is None and not row.judges:
        return (
            "coherence (the judge gave no readable score in every try; the same command "
            "asks for it again)"
        )
    if row.novelty is None:
        return "recorded novelty"
    return "decision (the judges who gave a score split; the same command asks again)"


@dataclass(frozen=True)
class Seeded:
    """What ``seed_run`` wrote."""

    lines: list[QuestionLine]
    open: int
    """Threads left for ``run`` to continue."""
    question_sets: list[tuple[list[str], str]]
    """Models that answered the same questions, and the file listing them: one ``run``
    command each, since a model given a question it never answered would start it afresh."""


async def seed_run(
    recorder: Recorder,
    rescored: Sequence[RescoredQuestion],
    settings_of: Mapping[tuple[str, float], Settings],
    spec: RunSpec,
    provenance: Mapping[str, Any],
) -> Seeded:
    """Write the re-judged run directory through its ``recorder``; ``settings_of`` gives
    each (model, temperature)'s settings."""
    tasks: list[Task] = []
    states: list[dict[str, Any]] = []
    for line in rescored:  # every chain checked before the first write
        result = line.result
        settings = settings_of[(result.model, result.temperature)]
        tasks.append(Task(settings, result.question, result.repeat))
        states.append(thread_values(line, settings))
    async with open_checkpointer(recorder.run_dir / files.CHECKPOINTS) as saver:
        graph = build_question_graph(default_services).compile(checkpointer=saver)
        for task, values in zip(tasks, states, strict=True):
            settings = task.settings
            # The routers read the settings from LangGraph's runtime, which update_state
            # does not give them: it is passed as a run would (the first step after this one
            # runs under the continuing run's own runtime).
            runtime = Runtime(context=settings)
            config: RunnableConfig = {
                "configurable": {"thread_id": task.thread_id, CONFIG_KEY_RUNTIME: runtime}
            }
            await graph.aupdate_state(config, values, as_node="decide")
    lines = [task.line(values) for task, values in zip(tasks, states, strict=True)]
    recorder.replace_lines(lines)
    meta = session.grown_metadata(None, spec, tasks, in_flight=0)  # nothing is asked here
    meta.sessions[-1].status = "rejudged"
    meta.sessions[-1].finished_at = now()
    question_counts(meta, (line.question for line in lines))
    meta.totals = run_totals(totals(results_of(lines, meta)[0]))
    meta.rejudged_from = dict(provenance)
    recorder.save(meta)
    open_threads = sum(1 for values in states if values["stop_reason"] is None)
    return Seeded(lines, open_threads, question_sets(recorder, lines))


def question_sets(recorder: Recorder, lines: Sequence[QuestionLine]) -> list[tuple[list[str], str]]:
    """One questions file per set of models that answered the same questions
    (``questions.json`` when every model did)."""
    asked: dict[str, list[str]] = {}
    for line in lines:
        listed = asked.setdefault(line.model, [])
        if line.question not in listed:
            listed.append(line.question)
    groups: dict[tuple[str, ...], list[str]] = {}
    for model, questions in asked.items():
        groups.setdefault(tuple(questions), []).append(model)
    found = []
    for number, (shared, models) in enumerate(groups.items(), 1):
        name = QUESTIONS_FILE if len(groups) == 1 else f"questions-{number}.json"
        recorder.write_file(name, json.dumps(list(shared), indent=2, ensure_ascii=False))
        found.append((models, name))
    return found


JUDGE_SETTINGS = (
    "judge_model",
    "judge_base_url",
    "judge_api_key_env",
    "judge_temperature",
    "judge_attempts",
    "judge_samples",
)
"""The new judge's settings each model of the re-judged run takes."""

Judge = tuple[Settings, float, dict[str, Any] | None]
"""A judge of the re-judging: its settings, its coherence threshold and where that came
from (a calibration file's record; None: given)."""


def seed_into(
    recorder: Recorder,
    into: Path,
    rescored: Sequence[RescoredQuestion],
    origin: Path,
    judges: Sequence[Judge],
    judge_fields: Sequence[Mapping[str, Any]],
    thresholds: Thresholds,
) -> dict[str, Any]:
    """Write the re-judged chains of ``origin`` as the run directory ``into`` (the new judge
    or panel, first judge first, and thresholds as each model's scoring settings), complete
    it, and return the ``aidanbench run`` commands that continue it. ``ValueError`` (one
    line) when the settings or the chains are refused."""
    stored = session.stored_scoring(read_metadata(origin) if origin.is_dir() else None)
    (settings, _, source), *panel = judges
    judge = {
        **{field: getattr(settings, field) for field in JUDGE_SETTINGS},
        **thresholds.settings(),
        "judge_panel": [
            {
                "model": s.judge_model,
                "base_url": s.judge_base_url,
                "api_key_env": s.judge_api_key_env,
                "coherence_threshold": threshold,
            }
            for s, threshold, _ in panel
        ],
    }
    settings_of = {}
    for line in rescored:
        key = (line.result.model, line.result.temperature)
        if key not in settings_of:
            recorded = {
                k: v
                for k, v in stored.get(line.result.model, {}).items()
                if k in Settings.model_fields and k not in ("model", "temperature")
            }
            if line.original.embedding_model and "embedding_model" not in recorded:
                recorded["embedding_model"] = line.original.embedding_model
            settings_of[key] = make_settings(*key, recorded, judge)
    spec = RunSpec(
        models=list(dict.fromkeys(m for m, _ in settings_of)),
        temperatures=list(dict.fromkeys(t for _, t in settings_of)),
        questions=list(dict.fromkeys(line.result.question for line in rescored)),
        questions_source={"kind": "file", "path": str(into / QUESTIONS_FILE)},
        repeats=max(line.result.repeat for line in rescored),
        settings={k: v for k, v in judge.items() if v is not None},
        run_dir=into,
        coherence_threshold_source=source,
        panel_threshold_sources=[found for _, _, found in panel],
    )
    provenance = {
        "path": str(origin.resolve()),
        "kind": "run directory" if origin.is_dir() else "results file",
        "sha256": None if origin.is_dir() else files.digest(origin.read_bytes()),
        "judge": dict(judge_fields[0]),
        **({"panel": [dict(f) for f in judge_fields]} if len(judge_fields) > 1 else {}),
        "thresholds": thresholds.record(),
        "created": now(),
    }
    seeded = asyncio.run(seed_run(recorder, rescored, settings_of, spec, provenance))
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


JUDGE_CACHE = "judge-cache.sqlite"
"""The judgment cache's name in the run directory judged, without ``--cache`` or
``--into`` (its usage ledger beside it, ``analysis.rejudge.ledger_path``)."""


def _aside(into: Path) -> Path:
    return into.with_name(f".{into.name}.partial")


def judgment_cache(cache: Path | None, into: Path | None, paths: Sequence[str]) -> Path:
    """``cache``, else in the folder where ``into`` is built (``Recorder.build``), else
    ``JUDGE_CACHE`` in the one run directory of ``paths``: nothing is written into the
    working folder unasked. Anything else is a ``UsageError`` asking for ``--cache``."""
    if cache is not None:
        return cache
    if into is not None:
        return _aside(into) / files.CACHE
    if len(paths) == 1 and Path(paths[0]).is_dir():
        return Path(paths[0]) / JUDGE_CACHE
    raise UsageError(
        "name where the judgments are cached with --cache FILE (its usage ledger is written "
        f"beside it); without it they are cached in the one run directory judged ({JUDGE_CACHE})"
    )


@dataclass(frozen=True)
class Rejudged:
    """What ``rejudge`` found, and with ``into`` wrote."""

    rescored: list[RescoredQuestion]
    judge_fields: list[dict[str, Any]]
    """Each judge's figures, as ``--json`` and the run's provenance give them."""
    answers: int
    """Distinct answers judged."""
    cost: dict[str, Any]
    seeded: dict[str, Any] | None = None
    """The run directory written (``seed_into``); None without ``into``."""


def rejudge(
    results: Sequence[QuestionResult],
    judges: Sequence[Judge],
    thresholds: Thresholds,
    origin: Path,
    into: Path | None,
    **judging: Any,
) -> Rejudged:
    """The answers of ``results`` judged again by each judge (``analysis.rejudge.judge_all`` with
    ``judging``, cached in the judges' ``cache_path``) and walked under ``thresholds``; with
    ``into``, written as a run directory (``seed_into``) after every check. ``Unjudged`` when
    answers could not be judged; a refused chain is one ``UsageError``."""
    cache = Path(str(judges[0][0].cache_path))
    if into is None:
        return _rejudged(results, judges, thresholds, UsageLedger(ledger_path(cache)), judging)
    with Recorder.build(into, _aside(into)) as recorder:
        if not cache.exists():
            copy_cache(origin, cache)
        found = _rejudged(results, judges, thresholds, recorder, judging)
        try:
            seeded = seed_into(
                recorder, into, found.rescored, origin, judges, found.judge_fields, thresholds
            )
        except ValueError as exc:
            raise UsageError(printable(" ".join(str(exc).split()))) from None
    return replace(found, seeded=seeded)


def _rejudged(
    results: Sequence[QuestionResult],
    judges: Sequence[Judge],
    thresholds: Thresholds,
    ledger: UsageBook,
    judging: Mapping[str, Any],
) -> Rejudged:
    prompts = [coherence_prompt(r.question, a.answer) for r in results for a in r.answers]
    judged = [judge_all(prompts, settings, ledger, **judging) for settings, _, _ in judges]
    for found in judged:
        if found.failures:
            raise Unjudged(found)
    used = [ThresholdSource.of(threshold, source) for _, threshold, source in judges]
    panel = [(s.judge_model, t, found) for (s, t, _), found in zip(judges, judged, strict=True)]
    rescored = rejudge_lines(results, panel, thresholds, threshold_source_text(used[0]))
    judge_fields = [
        {
            "model": s.judge_model,
            "samples": s.judge_samples,
            "coherence_threshold": threshold,
            "coherence_threshold_source": source.model_dump(exclude_none=True),
            "served_models": found.served_counts(),
            **found.figures(),
        }
        for (s, threshold, _), found, source in zip(judges, judged, used, strict=True)
    ]
    return Rejudged(rescored, judge_fields, judged[0].answers, cost_summary(ledger))
