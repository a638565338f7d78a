"""The question line and its answers: what a run keeps of each question thread.

A question line is one (model, temperature, question, repeat) of a run. ``write_lines``
writes the line without its answers to ``questions.jsonl``, each answer beside the line's
key to ``answers.jsonl``, and the original schema to ``results.json`` (one file per
repeat); ``read_lines`` gives back the same lines, so the lines of threads a later session
does not run are written again unchanged.

Lines of every earlier version read: a field a version may not have written is optional
and stays absent when absent, and unknown fields are kept. Nested records (an answer's
``calls``, the thread's ``measured``) are ``core.state``'s TypedDicts for the type checker
and plain JSON objects when read, so reading never loads LangGraph and a record lacking a
later key (or written by another tool) still reads.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from aidanbench.core.calls import answer_dollars, question_dollars, question_parts
from aidanbench.core.errors import printable
from aidanbench.core.metric_names import environment_aliases
from aidanbench.core.scores import declared
from aidanbench.core.vocabulary import ERROR_KINDS, is_censored, is_final
from aidanbench.record import files

if TYPE_CHECKING:
    from aidanbench.core.errors import ErrorInfo
    from aidanbench.core.state import CallStats, Measured, PanelJudgment
else:  # see the module docstring
    CallStats = ErrorInfo = Measured = PanelJudgment = dict


INVISIBLE = dict.fromkeys([0x00AD, *range(0x200B, 0x2010), *range(0x2060, 0x2065), 0xFEFF])
"""Characters that take no room on screen (the soft hyphen, zero-width spaces and joiners,
direction marks, the word joiner, the byte-order mark): dropped from a normal text."""


def normal_text(text: str) -> str:
    """``text`` in Unicode NFC, without ``INVISIBLE`` characters, each run of whitespace
    one space and none at the ends: the one form that identifies a question, a model name
    or a variant label.

    Two spellings that differ only in these ways ask the same thing; counted apart, they
    would give one model two scores for one question, or make two rows of one model.
    Question sets and variant labels are normalised when read (a set holding two spellings
    of one is refused, naming both), model names must be in this form already
    (``spelling_problem``), questions are asked in it, thread ids hash it, and reports pair
    lines by it. The benchmark's own questions are in this form already.
    """
    return " ".join(unicodedata.normalize("NFC", text).translate(INVISIBLE).split())


def spelling_problem(name: str) -> str | None:
    """Why ``name`` (a model's, sent to its provider as given) is not in its normal form,
    or None. Folding it would send another name than the one recorded and forgotten, so
    such a name is refused, as a variant label holding the same characters is."""
    normal = normal_text(name)
    if normal == name:
        return None
    return (
        f"{printable(ascii(name))} is not written in its normal form ({printable(ascii(normal))}):"
        " it holds a control character, a line or paragraph separator, an invisible "
        "character, whitespace other than single spaces between words, or another Unicode "
        "form than NFC; give the name as the provider spells it"
    )


def spelling_note(first: str, second: str) -> str:
    """Both spellings of one text, escaped, when they are not equal as written."""
    if first == second:
        return ""
    return (
        f" ({printable(repr(first))} and {printable(repr(second))} differ only in "
        "whitespace, invisible characters or Unicode form)"
    )


def truncated_answers(flags: Iterable[bool | None]) -> int | None:
    """How many answers the token limit cut; None when there are answers and none recorded
    it (unknown, not 0). Every count of cut answers is this one."""
    given = list(flags)
    known = [flag for flag in given if flag is not None]
    if given and not known:
        return None
    return sum(known)


def thread_id(model: str, temperature: float, repeat: int, question: str) -> str:
    """A question thread's id, stable across runs: model, temperature, repeat and a hash
    of the question."""
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
    return f"{model}|t={temperature!r}|r={repeat}|q={digest}"


def model_of_thread(thread: str) -> str | None:
    """The model of a thread id made by ``thread_id`` (None for any other id)."""
    parts = thread.rsplit("|", 3)
    if len(parts) == 4 and [p[:2] for p in parts[1:]] == ["t=", "r=", "q="]:
        return parts[0]
    return None


LINE_KEY = ("model", "temperature", "question", "repeat")
"""What names a question line, in ``questions.jsonl`` and on each ``answers.jsonl`` line."""

LineKey = tuple[str, float, str, int]

OUTPUT_FIELDS = (
    "stop_reason",
    "error",
    "score",
    "novelty_sum",
    "mean_coherence",
    "mean_novelty",
    "mean_llm_novelty",
    "format_adherence",
    "speculative",
)
"""The question graph's output fields a line keeps (its answers apart)."""


class AnswerLine(BaseModel):
    """One scored answer, valid or the failing one, on disk and in every
    ``record.results.QuestionResult``: the fields of ``core.state.AnswerRecord`` (documented
    there), each but ``index``, ``answer`` and ``valid`` optional so older and
    original-schema answers read (their other keys kept as extras)."""

    model_config = ConfigDict(extra="allow")

    index: int
    answer: str
    raw_reply: str | None = None
    used_answer_tag: bool | None = None
    coherence: float | None = None
    novelty: float | None = None
    llm_novelty: float | None = None
    valid: bool
    stop_reason: str | None = None
    elapsed_s: float | None = None
    calls: dict[str, CallStats] | None = None
    flags: list[str] | None = None
    finish_reason: str | None = None
    truncated: bool | None = None
    served_model: str | None = None
    reasoning_tokens: int | None = None
    coherence_samples: list[float] | None = None
    judges: list[PanelJudgment] | None = None

    def record(self) -> dict[str, Any]:
        """The answer as written: the fields it was given, and its dollars."""
        fields = self.model_dump(mode="json", exclude_unset=True)
        return {**fields, "cost_usd": answer_dollars(fields.get("calls") or {})}


LineThresholds = dict[str, float | None]
"""Thresholds a line's validity was decided with, by score name (``Thresholds.record``): an
answer passed a score when strictly above its threshold; a score absent or null was off."""


class QuestionLine(BaseModel):
    """One line of ``questions.jsonl`` (with its answers, in memory): a question thread's
    result and what it means. The question graph's output fields (``OUTPUT_FIELDS``, the
    environment's names and ``measured``) are ``core.state.QuestionOutput``'s."""

    model_config = ConfigDict(extra="allow")

    model: str
    """Model under test."""
    temperature: float
    """Sampling temperature of the model under test."""
    question: str
    """The question, the key that pairs lines across models and runs."""
    repeat: int = 1
    """1-based repeat of the question."""
    thread_id: str | None = None
    """The question thread's checkpoint id."""
    embedding_model: str | None = None
    """Embedding model behind the line's novelty (the thread's, not the latest run's)."""
    thresholds: LineThresholds | None = None
    """Thresholds the line's validity was decided with."""
    measured: Measured | None = None
    stop_reason: str | None = None
    error: ErrorInfo | None = None
    score: int | None = None
    novelty_sum: float | None = None
    mean_coherence: float | None = None
    mean_novelty: float | None = None
    mean_llm_novelty: float | None = None
    format_adherence: float | None = None
    speculative: CallStats | None = None
    reward: float | None = None
    format_reward: float | None = None
    avg_coherence: float | None = None
    avg_embedding_novelty: float | None = None
    sum_embedding_novelty: float | None = None
    avg_llm_novelty: float | None = None
    answers: list[AnswerLine] = []
    """Every scored answer, the failing one last (in ``answers.jsonl`` on disk)."""

    @classmethod
    def from_output(
        cls,
        output: Mapping[str, Any],
        *,
        measured: Measured,
        question: str,
        repeat: int = 1,
        thread_id: str | None = None,
        reward_mode: str = "count",
    ) -> QuestionLine:
        """The line of a question graph's output (or a thread's state values), labelled
        with the settings the thread recorded when it started (``measured``), never a later
        run's. A score the thread did not measure (switched off, and not one of the
        original schema's) has no threshold, mean or metric on the line."""
        kept = {key: value for key, value in measured.items() if value is not None}
        scores = [s for s in declared() if s.always_recorded or s.measured_key in kept]
        unmeasured = {name for s in declared() if s not in scores for name in (s.mean, s.metric)}
        metrics = {name: output.get(name) for name in OUTPUT_FIELDS}
        metrics |= {s.mean: output.get(s.mean) for s in scores if s.mean not in metrics}
        aliases = environment_aliases(output, reward_mode).items()
        return cls.model_validate(
            {
                "model": measured["model"],
                "temperature": measured["temperature"],
                "question": question,
                "repeat": repeat,
                "thread_id": thread_id,
                "embedding_model": measured["embedding_model"],
                "thresholds": {s.name: kept.get(s.measured_key) for s in scores},
                "measured": measured,
                **metrics,
                **{name: value for name, value in aliases if name not in unmeasured},
                "answers": output.get("answers") or [],
            }
        )

    @property
    def key(self) -> LineKey:
        """(model, temperature, question, repeat)."""
        return self.model, self.temperature, self.question, self.repeat

    @property
    def thread(self) -> str:
        """The line's thread id, or the one its key makes when it records none."""
        return self.thread_id or thread_id(self.model, self.temperature, self.repeat, self.question)

    @property
    def finished(self) -> bool:
        """Stopped for good by the benchmark's rule (a rerun skips its thread)."""
        return is_final(self.stop_reason)

    @property
    def errored(self) -> bool:
        """Stopped on an error: running the same spec again retries it."""
        return self.stop_reason in ERROR_KINDS

    @property
    def error_message(self) -> str | None:
        """The error's one line, when the line stopped on one."""
        return self.error.get("message") if self.error else None

    @property
    def produced(self) -> bool:
        """Has an answer or a stop (a thread that never got going has neither)."""
        return bool(self.answers) or self.stop_reason is not None

    @property
    def dollars(self) -> float | None:
        """Dollars of the recorded answers and discarded look-aheads (None: unknown)."""
        answers = [a.model_dump(include={"calls"}, exclude_unset=True) for a in self.answers]
        return question_dollars(answers, self.speculative)

    @property
    def dollar_parts(self) -> dict[str, float | None]:
        """``dollars`` by part (``core.calls.COST_PARTS``), each None when unknown."""
        answers = [a.model_dump(include={"calls"}, exclude_unset=True) for a in self.answers]
        return question_parts(answers, self.speculative)

    def record(self) -> dict[str, Any]:
        """The line as ``questions.jsonl`` holds it: the fields it was given, without its
        answers, with its dollars (null: unknown), ``censored`` (a cap cut it short, so its
        score is a lower bound) and ``truncated_answers``."""
        fields = self.model_dump(mode="json", exclude_unset=True, exclude={"answers"})
        return {
            **fields,
            "cost_usd": self.dollars,
            "censored": is_censored(self.stop_reason),
            "truncated_answers": truncated_answers(a.truncated for a in self.answers),
        }

    def answer_records(self) -> list[dict[str, Any]]:
        """The line's ``answers.jsonl`` lines: each answer beside the line's key."""
        key = dict(zip(LINE_KEY, self.key, strict=True))
        return [{**key, **answer.record()} for answer in self.answers]


def write_lines(
    run_dir: Path, lines: Sequence[QuestionLine], texts: LineTexts | None = None
) -> None:
    """Write the line files of ``lines`` behind the outputs manifest; ``texts`` keeps each
    line's texts for the next write."""
    files.write_outputs(run_dir, line_files(lines, texts))


def line_files(lines: Sequence[QuestionLine], texts: LineTexts | None = None) -> dict[str, str]:
    """The line files of ``lines`` (name → text), as ``write_lines`` writes them."""
    texts = LineTexts() if texts is None else texts
    made = [texts.of(line) for line in lines]
    written: dict[str, str] = {}
    for repeat in sorted({line.repeat for line in lines}) or [1]:
        chosen = [
            (line, text) for line, text in zip(lines, made, strict=True) if line.repeat == repeat
        ]
        written[files.results_name(repeat)] = results_text(chosen)
    written[files.ANSWERS] = "".join(text.answers for text in made)
    written[files.QUESTIONS] = "".join(text.question for text in made)
    texts.keep_only(lines)
    return written


@dataclass(frozen=True)
class LineText:
    """One line's part of each output file."""

    answers: str
    """Its ``answers.jsonl`` lines."""
    question: str
    """Its ``questions.jsonl`` line."""
    results: str
    """Its answers in the original schema (``json.dumps(..., indent=2)`` of the list)."""


class LineTexts:
    """Each question line's output texts, made once: a run rewrites its files while
    questions finish, and most lines have not changed since. A line is known by identity,
    so a changed line must be a new ``QuestionLine``, never one changed in place."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[QuestionLine, LineText]] = {}

    def of(self, line: QuestionLine) -> LineText:
        """The line's texts, made now unless made before."""
        known = self._texts.get(id(line))
        if known is not None and known[0] is line:
            return known[1]
        text = LineText(
            answers="".join(
                json.dumps(answer, ensure_ascii=False) + "\n" for answer in line.answer_records()
            ),
            question=json.dumps(line.record(), ensure_ascii=False) + "\n",
            results=json.dumps(original_records(line), indent=2),
        )
        self._texts[id(line)] = (line, text)
        return text

    def keep_only(self, lines: Iterable[QuestionLine]) -> None:
        """Forget the texts of lines no longer written."""
        kept = {id(line) for line in lines}
        self._texts = {key: known for key, known in self._texts.items() if key in kept}


def results_text(lines: Sequence[tuple[QuestionLine, LineText]]) -> str:
    """The original schema's results file of ``lines`` (the failing answer last), byte
    for byte as ``json.dumps(indent=2)`` writes it, from each line's ``LineText.results``."""
    models: dict[str, dict[str, dict[str, str]]] = {}
    for line, text in lines:
        questions = models.setdefault(line.model, {}).setdefault(
            temperature_key(line.temperature), {}
        )
        questions[line.question] = text.results.replace("\n", "\n" + "  " * 4)
    by_model = {
        model: _json_object({t: _json_object(q, 3) for t, q in temperatures.items()}, 2)
        for model, temperatures in models.items()
    }
    return _json_object({"models": _json_object(by_model, 1)}, 0)


def _json_object(items: Mapping[str, str], depth: int) -> str:
    """A JSON object as ``json.dumps(indent=2)`` writes it ``depth`` levels in, from its
    keys and the text of their values (already indented to that depth)."""
    if not items:
        return "{}"
    inner = "\n" + "  " * (depth + 1)
    body = ("," + inner).join(f"{json.dumps(key)}: {value}" for key, value in items.items())
    return f"{{{inner}{body}\n{'  ' * depth}}}"


def temperature_key(temperature: float) -> str:
    """Temperature as the original schema keys it (``"0.7"``)."""
    return repr(float(temperature))


def original_records(line: QuestionLine) -> list[dict[str, Any]]:
    """The line's answers as the original schema lists them under its question."""
    records = []
    for answer in line.answers:
        record: dict[str, Any] = {"answer_num": answer.index, "answer": answer.answer}
        kept = [(s, s.original) for s in declared() if s.original is not None]
        record |= {field: s.value(answer) for s, field in kept if s.switch is None}
        record["processing_time"] = answer.elapsed_s
        for score, field in kept:  # a switchable score only where measured, after the rest
            if score.switch is not None and (value := score.value(answer)) is not None:
                record[field] = value
        records.append(record)
    return records


def read_lines(run_dir: Path) -> list[QuestionLine]:
    """The question lines of a run directory as ``write_lines`` was given them, in order.

    Raises ``ValueError`` naming the file and line when one cannot be read, and when the
    files are from an interrupted write (``files.read_outputs``).
    """
    found = files.read_outputs(run_dir, [files.QUESTIONS, files.ANSWERS])
    questions, answers = found[files.QUESTIONS], found[files.ANSWERS]
    if questions is None:
        raise ValueError(f"{run_dir} is not a run directory (no {files.QUESTIONS})")
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    if answers is not None:
        for _, record in _objects(run_dir / files.ANSWERS, answers):
            key = tuple(record.get(name) for name in LINE_KEY)
            by_key.setdefault(key, []).append(
                {k: v for k, v in record.items() if k not in (*LINE_KEY, "cost_usd")}
            )
    lines = []
    for number, record in _objects(run_dir / files.QUESTIONS, questions):
        key = tuple(record.get(name) for name in LINE_KEY)
        try:
            lines.append(QuestionLine.model_validate({**record, "answers": by_key.get(key, [])}))
        except ValidationError as exc:
            raise ValueError(f"{run_dir / files.QUESTIONS}:{number}: {first_error(exc)}") from None
    return lines


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) of each non-blank line of a JSON-lines text.

    Lines end at ``\n`` only: ``str.splitlines`` also splits on U+2028 and other separators
    that ``json.dumps(..., ensure_ascii=False)`` leaves raw inside a string."""
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, line


def _objects(path: Path, data: bytes) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSON-lines file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 (byte {exc.start})") from None
    for number, line in numbered_lines(text):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        yield number, record


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``field: message``."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "line"
    return f"{where}: {first['msg']}"
