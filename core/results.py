"""Results as one shape, whatever file they came from.

Two sources are read: a run directory written by this package (``answers.jsonl``) and a
results file in the original AidanBench schema
(``{"models": {MODEL: {TEMPERATURE: {QUESTION: [answer, …]}}}}``), so published runs can be
reported, rescored and plotted like ours.

In an original file validity is not stored; it is recomputed with the thresholds given
(the benchmark's by default): a chain is valid up to its first failing answer, which the
original records last.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aidanbench.core.questions import normal_question
from aidanbench.core.thresholds import Thresholds
from aidanbench.core.vocabulary import FINAL_STOPS


@dataclass(frozen=True)
class AnswerRow:
    """One scored answer of a chain; ``index`` counts from 1 like ``answer_num``."""

    index: int
    answer: str
    coherence: float | None
    novelty: float | None
    llm_novelty: float | None
    valid: bool
    elapsed_s: float | None = None
    used_answer_tag: bool | None = None
    tokens: int | None = None
    """Tokens of this answer's generation and scoring requests (embeddings apart); None
    when a request reported none, or the file records none."""
    calls: int | None = None
    """Requests made for this answer, every role (cache hits do not count); None when the
    file records none."""
    truncated: bool | None = None
    """Cut by the token limit (``finish_reason`` ``length``); None when not recorded."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def truncated_answers(flags: Iterable[bool | None]) -> int | None:
    """How many answers the token limit cut, of answers flagged ``truncated`` or not;
    None when there are answers and none of them recorded it (unknown, not 0).

    Every count of cut answers (``questions.jsonl``, ``report``, the HTML page) is this.
    """
    given = list(flags)
    known = [flag for flag in given if flag is not None]
    if given and not known:
        return None
    return sum(known)


@dataclass(frozen=True)
class QuestionResult:
    """The chain of answers one model gave to one question in one repeat."""

    model: str
    temperature: float
    question: str
    answers: tuple[AnswerRow, ...]
    stop_reason: str | None
    repeat: int = 1
    error: str | None = None
    embedding_model: str | None = None
    thresholds: Thresholds | None = None
    speculative_tokens: int | None = 0
    speculative_calls: int = 0
    """Requests of discarded look-ahead generations."""
    cost_usd: float | None = None
    """Dollars of the recorded answers and discarded look-aheads (``records.question_dollars``);
    None when unknown: a model without a price, a request without usage, or a results file."""
    usage_missing: int = 0
    """Requests of those answers and look-aheads whose reply reported no usage."""
    judge_model: str | None = None
    """Judge model behind the coherence scores; None when not recorded."""
    prompts_sha256: str | None = None
    """sha256 of the prompt templates the line was run with; None when not recorded."""
    threshold_source: str | None = None
    """Where the coherence threshold came from (``records.threshold_source_text``: the
    benchmark's 15, given, or a calibration file and its sha256); None when not recorded."""

    @property
    def score(self) -> int:
        """Valid answers: the benchmark's per-question score."""
        return sum(1 for a in self.answers if a.valid)

    @property
    def novelty_sum(self) -> float:
        """Sum of embedding novelty over valid answers (the alternative reward)."""
        return sum(a.novelty or 0.0 for a in self.answers if a.valid)

    @property
    def tokens(self) -> int | None:
        """Tokens of every call, discarded look-aheads included (None when one is unknown)."""
        parts = [a.tokens for a in self.answers] + [self.speculative_tokens]
        return None if any(p is None for p in parts) else sum(p or 0 for p in parts)

    @property
    def api_calls(self) -> int | None:
        """Requests of every answer, discarded look-aheads included (None when unrecorded)."""
        parts = [a.calls for a in self.answers]
        if any(p is None for p in parts):
            return None
        return sum(p or 0 for p in parts) + self.speculative_calls

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
        """Ended by the benchmark's rule or a cap, not by an error or an interruption."""
        return self.stop_reason in FINAL_STOPS


def chain_validity(
    scores: Iterable[tuple[float | None, float | None, float | None]], thresholds: Thresholds
) -> tuple[list[bool], str | None]:
    """Validity of each answer of a recorded chain under ``thresholds``, and the stop reason.

    Answers after the first failure are invalid too: the benchmark stops there. An answer
    missing a score that the rule needs ends the valid prefix with reason ``unscored``.
    """
    flags: list[bool] = []
    reason: str | None = None
    for coherence, novelty, llm in scores:
        if reason is not None:
            flags.append(False)
            continue
        if (
            coherence is None
            or novelty is None
            or (thresholds.llm_novelty is not None and llm is None)
        ):
            reason = "unscored"
            flags.append(False)
            continue
        reason = thresholds.failure(coherence, novelty, llm)
        flags.append(reason is None)
    return flags, reason


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def read_aidanbench_file(path: Path, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """Questions of an original-schema results file, in file order.

    Raises ``ValueError`` naming the problem when the file is not in that schema.
    """
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
                results.append(
                    _question_from_records(
                        model, _temperature(path, model, temperature), question, records, thresholds
                    )
                )
    return results


def _temperature(path: Path, model: str, key: str) -> float:
    try:
        return float(key)
    except ValueError:
        raise ValueError(
            f"{path}: models.{model} has a key {key!r} that is no temperature"
        ) from None


def _question_from_records(
    model: str,
    temperature: float,
    question: str,
    records: list[dict[str, Any]],
    thresholds: Thresholds,
) -> QuestionResult:
    ordered = sorted(records, key=lambda r: r.get("answer_num", 0))
    scores = [
        (
            _number(r.get("coherence_score")),
            _number(r.get("embedding_dissimilarity_score")),
            _number(r.get("llm_dissimilarity_score")),
        )
        for r in ordered
    ]
    flags, reason = chain_validity(scores, thresholds)
    known = {
        "answer_num",
        "answer",
        "coherence_score",
        "embedding_dissimilarity_score",
        "llm_dissimilarity_score",
        "processing_time",
    }
    rows = tuple(
        AnswerRow(
            index=int(r.get("answer_num", i)),
            answer=str(r.get("answer", "")),
            coherence=c,
            novelty=n,
            llm_novelty=llm,
            valid=ok,
            elapsed_s=_number(r.get("processing_time")),
            extra={k: v for k, v in r.items() if k not in known},
        )
        for i, (r, (c, n, llm), ok) in enumerate(zip(ordered, scores, flags, strict=True), 1)
    )
    return QuestionResult(
        model=model,
        temperature=temperature,
        question=normal_question(question),
        answers=rows,
        stop_reason=reason,
    )
