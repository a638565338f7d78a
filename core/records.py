"""The question line, typed, and the one totals function every summary is built from.

A question line is one (model, temperature, question, repeat) of a run: the row
``questions.jsonl`` holds (its answers go to ``answers.jsonl``), and what the driver keeps in
memory (answers included). ``QuestionLine`` documents that shape; ``question_result`` turns
a line, a question graph's output or a line read back from disk into the in-memory
``QuestionResult`` that reports read, and ``totals`` counts a set of them. The command's
``metadata.json`` totals, ``report``/``plot``/``rescore``/``view`` and the benchmark graph's
``summarize`` all go through ``totals``, so they cannot disagree about what was counted.

Only typing imports reach into the graph's modules, so reading results does not load
LangGraph.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NotRequired

from typing_extensions import TypedDict

from aidanbench.core.questions import normal_question
from aidanbench.core.results import AnswerRow, QuestionResult, truncated_answers
from aidanbench.core.thresholds import Thresholds
from aidanbench.core.vocabulary import is_error_stop

if TYPE_CHECKING:
    from aidanbench.core.state import AnswerRecord, CallStats, ErrorInfo, Measured

UNFINISHED = "unfinished"
"""Stop-reason label of a line with no stop reason (interrupted or still running)."""

ANSWER_EXTRAS = (
    "raw_reply",
    "calls",
    "flags",
    "stop_reason",
    "finish_reason",
    "reasoning_tokens",
    "coherence_samples",
)
"""Answer-record keys kept in ``AnswerRow.extra`` (the view shows them)."""


class ThresholdsRecord(TypedDict):
    """Thresholds a line was measured with, as written to disk."""

    coherence: float
    """An answer passed when coherence > this."""
    novelty: float
    """An answer passed when embedding novelty > this."""
    llm_novelty: float | None
    """An answer passed when LLM novelty > this; None when that judge was off."""


class QuestionLine(TypedDict):
    """One line of ``questions.jsonl``: a question thread's result and what it means.

    The driver builds it from the question graph's output (``QuestionOutput``) and the
    thread's task; ``answers`` is present in memory and moved to ``answers.jsonl`` on disk
    (each answer record there carries the line's model, temperature, question and repeat).
    """

    model: str
    """Model under test."""
    temperature: float
    """Sampling temperature of the model under test."""
    question: str
    """The question, the key that pairs lines across models and runs."""
    repeat: int
    """1-based repeat of the question."""
    thread_id: str
    """The question thread's checkpoint id."""
    embedding_model: str
    """Embedding model behind the line's novelty (the thread's, not the latest run's)."""
    thresholds: ThresholdsRecord
    """Thresholds the line's validity was decided with."""
    measured: Measured | None
    """Every setting the thread's scores depend on, recorded when it started."""
    stop_reason: str | None
    """Why the chain ended (``coherence``, ``novelty``, ``llm_novelty``, ``max_answers``,
    ``error``, ``judge_error``); None while it runs."""
    error: ErrorInfo | None
    """Details when ``stop_reason`` is an error kind."""
    score: int
    """Valid answers."""
    novelty_sum: float
    """Embedding novelty summed over valid answers (the alternative reward)."""
    mean_coherence: float | None
    """Mean coherence over valid answers."""
    mean_novelty: float | None
    """Mean embedding novelty over valid answers."""
    mean_llm_novelty: float | None
    """Mean LLM novelty over valid answers, when that judge is on."""
    format_adherence: float | None
    """Share of replies that used the ``<answer>`` tag."""
    speculative: CallStats | None
    """Cost of look-ahead generations that were discarded."""
    reward: NotRequired[float | None]
    """The environment's name for the score, or the novelty sum under that reward mode."""
    answers: NotRequired[list[AnswerRecord]]
    """Every scored answer, the failing one last; in memory only."""


@dataclass(frozen=True)
class Totals:
    """What a set of question lines adds up to; every count here is a plain tally.

    A model's headline with repeats is a mean per repeat, not ``score``: see
    ``aidanbench.analysis.summary``.
    """

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
    """Requests of every answer and of discarded look-aheads (cache hits do not count);
    None when not recorded (results files)."""
    tokens: int | None
    """Input plus output tokens of the generation and scoring requests; None when one
    reported none, or when not recorded."""
    dollars: float | None = None
    """Dollars of those requests (``question_dollars``); None when any part is unknown."""
    usage_missing: int = 0
    """Requests whose reply reported no usage (their tokens and dollars are unknown)."""
    truncated_answers: int | None = None
    """Answers cut by the token limit (``finish_reason`` ``length``), scored as they
    came; None when no answer recorded its finish reason."""
    finish_unknown: int = 0
    """Answers whose finish reason was not recorded (made before it was kept)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)


def distinct(results: Iterable[QuestionResult]) -> tuple[list[QuestionResult], list[str]]:
    """``results`` with each (model, temperature, question, repeat) once, and a note per
    line left out.

    Questions are read in their normal form (``core.questions``), so a run made before
    normalisation that asked one question twice, once with a trailing space, has two
    lines for one question: the first is counted, the other named.
    """
    kept: dict[tuple[str, float, str, int], QuestionResult] = {}
    notes: list[str] = []
    for result in results:
        key = (result.model, result.temperature, result.question, result.repeat)
        if key in kept:
            notes.append(
                f"{result.model} @ {result.temperature:g} answered question "
                f"{result.question[:60]!r} twice (repeat {result.repeat}), in spellings that "
                "differ only in surrounding whitespace or Unicode form; it is counted once "
                "(the first line)"
            )
            continue
        kept[key] = result
    return list(kept.values()), notes


def errored(result: QuestionResult) -> bool:
    """Whether a line ended on a failure (its score is then a lower bound)."""
    return result.error is not None or is_error_stop(result.stop_reason)


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
        errored=sum(1 for r in lines if errored(r)),
        stop_reasons=dict(Counter(r.stop_reason or UNFINISHED for r in lines)),
        api_calls=_known_sum(r.api_calls for r in lines),
        tokens=_known_sum(r.tokens for r in lines),
        dollars=_known_sum(r.cost_usd for r in lines),
        usage_missing=sum(r.usage_missing for r in lines),
        truncated_answers=truncated_answers(a.truncated for r in lines for a in r.answers),
        finish_unknown=sum(r.finish_unknown for r in lines),
    )


def _known_sum(values: Iterable[Any]) -> Any:
    """A sum that is unknown (None) once any part is."""
    total: Any = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def add_dollars(a: float | None, b: float | None) -> float | None:
    """Sum of two costs; unknown when either is."""
    return None if a is None or b is None else a + b


PER_ANSWER_ROLES = ("generate", "judge", "similarity")
"""Roles whose tokens and dollars an answer's record carries. Embedding requests are
batched across questions, so their tokens and dollars are counted for the run (the usage
ledger), not per answer."""


def stats_dollars(stats: Mapping[str, Any] | None, *, estimate: bool = False) -> float | None:
    """Dollars of one role's ``CallStats``: 0 without calls, None when unknown.

    With ``estimate``, calls that reported no usage count at their estimate (the caps).
    """
    if not stats or not stats.get("calls"):
        return 0.0
    cost = stats.get("cost_usd")
    if estimate and stats.get("usage_missing"):
        cost = stats.get("estimated_cost_usd")
    return float(cost) if isinstance(cost, int | float) else None


def answer_dollars(
    calls: Mapping[str, Mapping[str, Any]], *, estimate: bool = False
) -> float | None:
    """Dollars of one answer's generation and scoring (``PER_ANSWER_ROLES``)."""
    total: float | None = 0.0
    for role in PER_ANSWER_ROLES:
        total = add_dollars(total, stats_dollars(calls.get(role), estimate=estimate))
    return total


def question_dollars(
    answers: Sequence[Mapping[str, Any]],
    speculative: Mapping[str, Any] | None,
    *,
    estimate: bool = False,
) -> float | None:
    """Dollars of a question's recorded answers and its discarded look-aheads."""
    total = stats_dollars(speculative, estimate=estimate)
    for answer in answers:
        total = add_dollars(total, answer_dollars(answer.get("calls") or {}, estimate=estimate))
    return total


def _roles(calls: Mapping[str, Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The per-answer roles' stats that made a request (``speculative`` counts as one)."""
    return [
        stats
        for role, stats in (calls or {}).items()
        if role in (*PER_ANSWER_ROLES, "speculative") and stats and stats.get("calls")
    ]


def call_tokens(calls: Mapping[str, Mapping[str, Any]] | None) -> int | None:
    """Input plus output tokens over a ``{role: CallStats}`` mapping (embeddings apart, see
    ``PER_ANSWER_ROLES``); None when a request reported none."""
    total = 0
    for stats in _roles(calls):
        inputs, outputs = stats.get("input_tokens", 0), stats.get("output_tokens", 0)
        if inputs is None or outputs is None:
            return None
        total += int(inputs) + int(outputs)
    return total


def usage_missing(calls: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Requests over a ``{role: CallStats}`` mapping that reported no usage."""
    return sum(int(stats.get("usage_missing", 0)) for stats in _roles(calls))


def call_count(calls: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Requests over a ``{role: CallStats}`` mapping (an answer's embedding counts as one
    when its text was sent, even in a request shared with other answers)."""
    if not calls:
        return 0
    return sum(int(c.get("calls", 0)) for c in calls.values())


def answer_row(record: Mapping[str, Any]) -> AnswerRow:
    """An answer record (``AnswerRecord``, or its ``answers.jsonl`` line) as a row."""
    calls = record.get("calls")
    return AnswerRow(
        index=record["index"],
        answer=record["answer"],
        coherence=record["coherence"],
        novelty=record["novelty"],
        llm_novelty=record.get("llm_novelty"),
        valid=record["valid"],
        elapsed_s=record.get("elapsed_s"),
        used_answer_tag=record.get("used_answer_tag"),
        tokens=None if calls is None else call_tokens(calls),
        calls=None if calls is None else call_count(calls),
        truncated=record.get("truncated"),
        extra={k: record[k] for k in ANSWER_EXTRAS if k in record},
    )


def question_result(
    line: Mapping[str, Any],
    answers: Sequence[Mapping[str, Any]] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> QuestionResult:
    """A question line (``QuestionLine``, or a question graph's output) as a result.

    ``answers`` are the line's answer records when they are stored apart from it (in
    ``answers.jsonl``); by default the line's own. What the line does not record (lines
    written before threads recorded their settings) comes from the run's ``metadata``.
    A graph output has no model or temperature of its own: they come from its
    ``measured`` record.
    """
    meta = metadata or {}
    settings = meta.get("settings") or {}
    measured = line.get("measured") or {}
    records = (line.get("answers") or []) if answers is None else answers
    thresholds = line.get("thresholds") or settings.get("thresholds")
    error = line.get("error")
    speculative = line.get("speculative") or {}
    return QuestionResult(
        model=line.get("model") or measured.get("model") or "",
        temperature=float(line.get("temperature", measured.get("temperature", 0.0))),
        question=normal_question(line["question"]),
        answers=tuple(answer_row(a) for a in sorted(records, key=lambda a: a["index"])),
        stop_reason=line.get("stop_reason"),
        repeat=int(line.get("repeat", 1)),
        error=error["message"] if isinstance(error, dict) else error,
        embedding_model=(
            line.get("embedding_model")
            or measured.get("embedding_model")
            or settings.get("embedding_model")
        ),
        thresholds=Thresholds(**thresholds) if thresholds else None,
        speculative_tokens=call_tokens({"speculative": speculative}),
        speculative_calls=call_count({"speculative": speculative}),
        cost_usd=question_dollars(records, speculative),
        usage_missing=usage_missing({"speculative": speculative})
        + sum(usage_missing(a.get("calls")) for a in records),
        judge_model=measured.get("judge_model") or settings.get("judge_model"),
        prompts_sha256=measured.get("prompts_sha256") or meta.get("prompts_sha256"),
        threshold_source=threshold_source_text(judging_of(meta, line.get("model"))),
    )


def judging_of(metadata: Mapping[str, Any], model: Any) -> Mapping[str, Any] | None:
    """The ``judging`` record a run's metadata keeps for ``model``, if any."""
    judging = metadata.get("judging")
    found = judging.get(model) if isinstance(judging, Mapping) and isinstance(model, str) else None
    return found if isinstance(found, Mapping) else None


def threshold_source_text(judging: Mapping[str, Any] | None) -> str | None:
    """Where a model's coherence threshold came from, in words: ``benchmark`` (the
    published 15, on o1-mini's scale), ``given``, or ``calibration FILE (sha256 …)``;
    None when the run did not record it."""
    source = judging.get("coherence_threshold_source") if judging else None
    if not isinstance(source, Mapping):
        return None
    kind = source.get("kind")
    if kind == "calibration":
        name = str(source.get("file", "?")).rsplit("/", 1)[-1]
        return f"calibration {name} (sha256 {str(source.get('sha256', ''))[:12]})"
    return str(kind) if kind in ("benchmark", "given") else None
