"""Results as one read-only shape, whatever they came from: ``QuestionResult``.

The sources are a run directory's question lines with its metadata, and a results file in
the original schema (``{"models": {MODEL: {TEMPERATURE: {QUESTION: [answer, …]}}}}``), so
published runs are reported, rescored and plotted like ours. An original file stores no
validity: it is recomputed with the thresholds given (the benchmark's by default), valid up
to the first failing answer, which the original records last.

Every view counts through ``totals``, so no two can disagree about what was counted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aidanbench.core.calls import (
    COST_PARTS,
    call_count,
    call_tokens,
    known_sum,
    usage_missing,
)
from aidanbench.core.scores import Score, declared
from aidanbench.core.thresholds import Thresholds, panel_verdict
from aidanbench.core.vocabulary import is_error_stop, is_final
from aidanbench.record import files
from aidanbench.record.lines import (
    AnswerLine,
    LineKey,
    QuestionLine,
    first_error,
    normal_text,
    read_lines,
    truncated_answers,
)
from aidanbench.record.metadata import Metadata, RunTotals, ThresholdSource, read_metadata

UNFINISHED = "unfinished"
"""Stop-reason label of a line with no stop reason (interrupted or still running)."""


@dataclass(frozen=True)
class QuestionResult:
    """The chain of answers one model gave to one question in one repeat."""

    model: str
    temperature: float
    question: str
    answers: tuple[AnswerLine, ...]
    stop_reason: str | None
    repeat: int = 1
    error: str | None = None
    embedding_model: str | None = None
    thresholds: Thresholds | None = None
    speculative: Mapping[str, Any] | None = field(default=None, compare=False)
    """The ``CallStats`` of discarded look-ahead generations (None: none made)."""
    cost_usd: float | None = None
    """Dollars of the answers and discarded look-aheads (``core.calls``); None: unknown."""
    cost_parts: Mapping[str, float | None] = field(default_factory=dict, compare=False)
    """``cost_usd`` by part (``core.calls.COST_PARTS``); empty for a results file."""
    usage_missing: int = 0
    """Requests of those answers and look-aheads whose reply reported no usage."""
    tokens: int | None = None
    """Tokens of those requests (``chat_figures``); None: unknown."""
    api_calls: int | None = None
    """Chat requests of those answers and look-aheads (``chat_figures``); None: unknown."""
    judge_model: str | None = None
    """Judge model behind the coherence scores; None when not recorded."""
    prompts_sha256: str | None = None
    """sha256 of the prompt templates the line was run with; None when not recorded."""
    threshold_source: str | None = None
    """Where the coherence threshold came from (``threshold_source_text``); None: unknown."""
    category: str | None = None
    """The question's category (``Metadata.categories``); None: it has none."""
    answer_cap: int | str = "unknown"
    """The model's ``max_answers``: a number, ``none`` (no cap, as the benchmark) or
    ``unknown`` (not recorded: a results file); a capped chain ends at it, finished."""
    error_record: Mapping[str, Any] | None = field(default=None, compare=False)
    """The recorded error (``core.errors.ErrorInfo``), when the line stopped on one: which
    panel judge failed, and the replies of a judgment refused in every try, by why."""

    @property
    def key(self) -> LineKey:
        """(model, temperature, question, repeat)."""
        return self.model, self.temperature, self.question, self.repeat

    @property
    def score(self) -> int:
        """Valid answers: the benchmark's per-question score."""
        return sum(1 for a in self.answers if a.valid)

    @property
    def novelty_sum(self) -> float:
        """Sum of embedding novelty over valid answers (the alternative reward)."""
        return sum(a.novelty or 0.0 for a in self.answers if a.valid)

    @property
    def look_aheads(self) -> dict[str, Mapping[str, Any]]:
        """The discarded look-aheads as a ``{role: CallStats}`` mapping (``core.calls``)."""
        return {"speculative": self.speculative} if self.speculative else {}

    @property
    def truncated_answers(self) -> int | None:
        """Answers cut by the token limit (scored as they came); None when unknown."""
        return truncated_answers(a.truncated for a in self.answers)

    @property
    def finish_unknown(self) -> int:
        """Answers whose finish reason was not recorded (whether they were cut is unknown)."""
        return sum(1 for a in self.answers if a.truncated is None)

    @property
    def finished(self) -> bool:
        """Ended by the benchmark's rule or the answer cap, not by an error or an interruption."""
        return is_final(self.stop_reason)

    @property
    def lower_bound(self) -> bool:
        """Its score is a lower bound: nothing final ended it (a spending cap, an error, an
        interruption, or a recorded end that passes under other thresholds or judge)."""
        return not self.finished

    @property
    def errored(self) -> bool:
        """Ended on a failure (its score is then a lower bound)."""
        return self.error is not None or is_error_stop(self.stop_reason)


@dataclass(frozen=True)
class Totals:
    """What a set of results adds up to, each a plain tally: a model's headline with
    repeats is ``repeat_mean_score``, not ``score``."""

    lines: int
    """Question lines (questions x repeats x models, as far as they were run)."""
    questions: int
    """Distinct question texts."""
    repeats: int
    """Distinct repeats."""
    answers: int
    """Recorded answers, failing ones included."""
    score: int
    """Valid answers over every line."""
    novelty_sum: float
    """Embedding novelty of valid answers over every line."""
    finished: int
    """Lines ended by the benchmark's rule or the answer cap."""
    errored: int
    """Lines ended by an API, configuration or judge error."""
    stop_reasons: dict[str, int]
    """Lines per stop reason; ``unfinished`` for lines without one."""
    api_calls: int | None
    """Chat requests of every answer and discarded look-ahead, whose ``tokens`` and
    ``dollars`` these are (embeddings, retries and the preflight are the ledger's); None
    when not recorded."""
    tokens: int | None
    """Input plus output tokens of the generation and scoring requests; None when one
    reported none, or when not recorded."""
    dollars: float | None = None
    """Dollars of those requests; None when any part is unknown."""
    dollar_parts: dict[str, float | None] = field(default_factory=dict)
    """``dollars`` by part (``core.calls.COST_PARTS``), each unknown on its own; empty
    when the lines record no calls."""
    usage_missing: int = 0
    """Requests whose reply reported no usage (their tokens and dollars are unknown)."""
    truncated_answers: int | None = None
    """Answers cut by the token limit, scored as they came; None: unknown."""
    finish_unknown: int = 0
    """Answers whose finish reason was not recorded."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)

    @property
    def repeat_mean_score(self) -> float:
        """Valid answers per repeat: a model's headline."""
        return self.score / self.repeats if self.repeats > 1 else self.score


def totals(results: Iterable[QuestionResult]) -> Totals:
    """The totals of ``results``."""
    lines = list(results)
    return Totals(
        lines=len(lines),
        questions=len({r.question for r in lines}),
        repeats=len({r.repeat for r in lines}),
        answers=sum(len(r.answers) for r in lines),
        score=sum(r.score for r in lines),
        novelty_sum=sum(r.novelty_sum for r in lines),
        finished=sum(1 for r in lines if r.finished),
        errored=sum(1 for r in lines if r.errored),
        stop_reasons=dict(Counter(r.stop_reason or UNFINISHED for r in lines)),
        api_calls=known_sum(r.api_calls for r in lines),
        tokens=known_sum(r.tokens for r in lines),
        dollars=known_sum(r.cost_usd for r in lines),
        dollar_parts=(
            {part: known_sum(r.cost_parts.get(part) for r in lines) for part in COST_PARTS}
            if lines and all(r.cost_parts for r in lines)
            else {}
        ),
        usage_missing=sum(r.usage_missing for r in lines),
        truncated_answers=truncated_answers(a.truncated for r in lines for a in r.answers),
        finish_unknown=sum(r.finish_unknown for r in lines),
    )


def run_totals(counted: Totals) -> RunTotals:
    """The recorded answers' figures as ``metadata.json`` keeps them (``totals``)."""
    return RunTotals(
        questions=counted.lines,
        answers=counted.answers,
        score=counted.score,
        api_calls=counted.api_calls,
        tokens=counted.tokens,
        dollars=counted.dollars,
        usage_missing=counted.usage_missing,
        errored=counted.errored,
        truncated_answers=counted.truncated_answers,
    )


def measured_scores(lines: Iterable[QuestionResult]) -> list[Score]:
    """The declared scores ``lines`` measured: the original schema's, and each other one a
    line's rule held or an answer recorded (a score a run never switched on has no mean)."""
    lines = list(lines)
    return [
        score
        for score in declared()
        if score.always_recorded
        or any(line.thresholds and line.thresholds.get(score.name) is not None for line in lines)
        or any(score.value(a) is not None for line in lines for a in line.answers)
    ]


def distinct(results: Iterable[QuestionResult]) -> tuple[list[QuestionResult], list[str]]:
    """``results`` with each (model, temperature, question, repeat) once, and a note per
    line left out: questions are read in their normal form (``record.lines.normal_text``),
    so two spellings of one asked by an older run are counted once: the first line counts, the
    others are named.
    """
    kept: dict[LineKey, QuestionResult] = {}
    notes: list[str] = []
    for result in results:
        if result.key in kept:
            notes.append(
                f"{result.model} @ {result.temperature:g} answered question "
                f"{result.question[:60]!r} twice (repeat {result.repeat}), in spellings that "
                "differ only in whitespace, invisible characters or Unicode form; it is "
                "counted once "
                "(the first line)"
            )
            continue
        kept[result.key] = result
    return list(kept.values()), notes


def chat_figures(
    answers: Sequence[AnswerLine], speculative: Mapping[str, Any] | None
) -> tuple[int | None, int | None]:
    """Tokens and chat requests of the answers and discarded look-aheads (embeddings
    apart): the tokens None when a request reported none, both None when an answer
    records no calls (a results file)."""
    look_aheads = {"speculative": speculative} if speculative else {}
    if any(a.calls is None for a in answers):
        return None, None
    calls = [a.calls or {} for a in answers] + [look_aheads]
    return known_sum(call_tokens(c) for c in calls), sum(call_count(c) for c in calls)


def question_result(line: QuestionLine, metadata: Metadata | None = None) -> QuestionResult:
    """A question line as a result; what the line does not record comes from ``metadata``."""
    meta = metadata or Metadata()
    settings = meta.settings
    measured: Mapping[str, Any] = line.measured or {}
    thresholds = line.thresholds or (settings.thresholds if settings else None)
    answers = sorted(line.answers, key=lambda a: a.index)
    tokens, api_calls = chat_figures(answers, line.speculative)
    return QuestionResult(
        model=line.model,
        temperature=line.temperature,
        question=normal_text(line.question),
        answers=tuple(answers),
        stop_reason=line.stop_reason,
        repeat=line.repeat,
        error=line.error_message,
        error_record=dict(line.error) if line.error else None,
        embedding_model=(
            line.embedding_model
            or measured.get("embedding_model")
            or (settings.embedding_model if settings else None)
        ),
        thresholds=None if thresholds is None else Thresholds(thresholds),
        speculative=dict(line.speculative) if line.speculative else None,
        cost_usd=line.dollars,
        cost_parts=line.dollar_parts,
        usage_missing=usage_missing({"speculative": line.speculative or {}})
        + sum(usage_missing(a.calls) for a in answers),
        tokens=tokens,
        api_calls=api_calls,
        judge_model=measured.get("judge_model") or (settings.judge_model if settings else None),
        prompts_sha256=measured.get("prompts_sha256") or meta.prompts_sha256,
        threshold_source=threshold_source_text(
            judging.coherence_threshold_source if (judging := meta.judging_of(line.model)) else None
        ),
        category=(meta.categories or {}).get(normal_text(line.question)),
        answer_cap=answer_cap(meta, line.model),
    )


def answer_cap(meta: Metadata, model: str) -> int | str:
    """``model``'s answer cap as its scoring settings recorded it (``QuestionResult``)."""
    settings = (meta.scoring_settings or {}).get(model) or {}
    if "max_answers" not in settings:
        return "unknown"
    return "none" if settings["max_answers"] is None else int(settings["max_answers"])


def results_of(
    lines: Iterable[QuestionLine], metadata: Metadata | None = None
) -> tuple[list[QuestionResult], list[str]]:
    """The results of a run's lines in the run's order, each key once (``distinct``)."""
    return distinct(question_result(line, metadata) for line in lines)


def threshold_source_text(source: ThresholdSource | None) -> str | None:
    """Where a coherence threshold came from, in words: ``benchmark``, ``given``, or
    ``calibration FILE (sha256 …)`` with what it could not test; None when not recorded."""
    if source is None:
        return None
    if source.kind == "calibration":
        name = str(source.file or "?").rsplit("/", 1)[-1]
        text = f"calibration {name} (sha256 {(source.sha256 or '')[:12]})"
        return f"{text}, {source.note}" if source.note else text
    return source.kind if source.kind in ("benchmark", "given") else None


def read_results(path: Path, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """A run directory or an original-schema results file, whichever ``path`` is; a
    question line is counted once however its question was spelled (``distinct``)."""
    return read_results_noted(path, thresholds)[0]


def read_results_noted(
    path: Path, thresholds: Thresholds | None = None
) -> tuple[list[QuestionResult], list[str]]:
    """``read_results``, and a note for each line it counted once for two spellings."""
    if path.is_dir():
        if not (path / files.QUESTIONS).exists():
            raise ValueError(f"{path} is not a run directory (no {files.QUESTIONS})")
        return results_of(read_lines(path), read_metadata(path))
    if not path.exists():
        raise ValueError(f"no such file or directory: {path}")
    return distinct(read_aidanbench_file(path, thresholds))


def panel_decision(answer: AnswerLine, coherence: float) -> bool | None:
    """A judge panel's decision on ``answer``, its first judge at the threshold
    ``coherence`` and the others at their recorded ones (a judge without a score is
    unknown: ``panel_verdict``); None when no panel judged it or it is undecided."""
    judges = answer.judges
    if not judges:
        return None
    cuts = [coherence, *(j["threshold"] for j in judges[1:])]
    passes = [
        None if (found := j["score"]) is None else found > cut
        for j, cut in zip(judges, cuts, strict=True)
    ]
    return panel_verdict(passes)


UNSCORED = "unscored"
"""Stop reason of a recorded chain walked again whose answer lacks a score the rule needs."""

AnswerScores = tuple[Mapping[str, float | None], bool | None]
"""One recorded answer as the rule reads it: each score by name, and a judge panel's
decision on coherence (None: no panel judged it)."""


def answer_scores(answer: AnswerLine, coherence: float | None = None) -> AnswerScores:
    """``answer``'s scores by name, and its panel's decision with the first judge at the
    threshold ``coherence`` (none without one, or without a panel). A panel that leaves it
    undecided makes its coherence unknown (``unscored``), never the first judge's alone."""
    values = {score.name: score.value(answer) for score in declared()}
    decision = None if coherence is None else panel_decision(answer, coherence)
    if answer.judges and coherence is not None and decision is None:
        values["coherence"] = None
    return values, decision


def chain_validity(
    answers: Iterable[AnswerScores], thresholds: Thresholds
) -> tuple[list[bool], str | None]:
    """Validity of each answer of a recorded chain under ``thresholds``, and the stop reason.

    Answers after the first failure are invalid too: the benchmark stops there. An answer
    missing a score that the rule needs ends the valid prefix with reason ``unscored``.
    """
    flags: list[bool] = []
    reason: str | None = None
    for values, coherent in answers:
        if reason is not None:
            flags.append(False)
            continue
        decided = {"coherence"} if coherent is not None else set()
        if any(values.get(name) is None and name not in decided for name in thresholds.on):
            reason = UNSCORED
            flags.append(False)
            continue
        reason = thresholds.failure(values, coherent)
        flags.append(reason is None)
    return flags, reason


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def read_aidanbench_file(path: Path, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """Questions of an original-schema results file, in file order; ``ValueError`` naming
    the problem when the file is not in that schema."""
    thresholds = thresholds or Thresholds()
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read results file {path}: {exc}") from exc
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ValueError(f"{path} is not an AidanBench results file (no 'models' object)")
    results: list[QuestionResult] = []
    for model, temps in models.items():
        if not isinstance(temps, dict):
            raise ValueError(f"{path}: models.{model} is not an object of temperatures")
        for temperature, questions in temps.items():
            if not isinstance(questions, dict):
                raise ValueError(f"{path}: models.{model}.{temperature} is not an object")
            for question, records in questions.items():
                if not isinstance(records, list):
                    raise ValueError(f"{path}: answers of {question!r} are not a list")
                for number, record in enumerate(records, 1):
                    if not isinstance(record, dict):
                        raise ValueError(
                            f"{path}: answer {number} of {question[:60]!r} ({model}) is a "
                            f"JSON {type(record).__name__}, not an answer object"
                        )
                try:
                    results.append(
                        _question_from_records(
                            model,
                            _temperature(path, model, temperature),
                            question,
                            records,
                            thresholds,
                        )
                    )
                except ValidationError as exc:
                    where = f"{path}: an answer of {question[:60]!r} ({model})"
                    raise ValueError(f"{where}: {first_error(exc)}") from None
    return results


def _temperature(path: Path, model: str, key: str) -> float:
    try:
        return float(key)
    except ValueError:
        raise ValueError(
            f"{path}: models.{model} has a key {key!r} that is no temperature"
        ) from None


def original_fields() -> dict[str, str]:
    """Each declared score's field in the original schema → its name (``Score.original``)."""
    return {s.original: s.name for s in declared() if s.original is not None}


ORIGINAL_ANSWER_FIELDS = frozenset({"answer_num", "answer", "processing_time"})
"""An original-schema answer's fields besides its scores; any other is kept in the
``AnswerLine``."""


def _question_from_records(
    model: str,
    temperature: float,
    question: str,
    records: Sequence[dict[str, Any]],
    thresholds: Thresholds,
) -> QuestionResult:
    ordered = sorted(records, key=lambda r: r.get("answer_num", 0))
    names = original_fields()
    values = [{name: _number(r.get(field)) for field, name in names.items()} for r in ordered]
    flags, reason = chain_validity(((v, None) for v in values), thresholds)
    known = ORIGINAL_ANSWER_FIELDS | names.keys()
    answers = tuple(
        AnswerLine.model_validate(
            {
                **{k: v for k, v in r.items() if k not in known},
                "index": int(r.get("answer_num", i)),
                "answer": str(r.get("answer", "")),
                **scores,
                "valid": ok,
                "elapsed_s": _number(r.get("processing_time")),
            }
        )
        for i, (r, scores, ok) in enumerate(zip(ordered, values, flags, strict=True), 1)
    )
    tokens, api_calls = chat_figures(answers, None)
    return QuestionResult(
        model=model,
        temperature=temperature,
        question=normal_text(question),
        answers=answers,
        stop_reason=reason,
        tokens=tokens,
        api_calls=api_calls,
    )
