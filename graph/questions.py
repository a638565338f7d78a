"""Question sets, one loader and one validator: the bundled 63, a list, a file, a dataset.

``load_question_set`` turns any source into a validated list and a record of where it came
from, which a run stores beside the set's hash so the same set can be found again; the
command line, the graph API and the verifiers environments all load through it.

Accepted files: a JSON list of strings, or of objects with a ``question`` and an optional
``category``; JSONL or CSV with a ``question`` field and an optional ``category`` one; plain
text with one question per line (ending at ``\n`` or ``\r\n`` only: a question may hold any
other separator); parquet and arrow files are datasets (``graph.hf_datasets``, whose
``category`` column is read when present). Anything else is an error, never a silent
fallback to the bundled list, and so are blank, duplicate or absurdly long questions
(``validated``): each would waste or skew a run. A category is what reports group scores
by (a SciAidanBench domain, say); it never changes what is asked or how it is scored.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from aidanbench import reference
from aidanbench.core.errors import QuestionSourceError, printable
from aidanbench.record.lines import normal_text, numbered_lines, spelling_note

MAX_QUESTION_CHARS = 2000
"""Longest question accepted; the benchmark's longest is under 150 characters."""

DEFAULT_FIELD = "question"
"""The column (or JSONL/CSV field) questions are read from."""

CATEGORY_FIELD = "category"
"""The column (or JSON, JSONL or CSV field) a question's category is read from, when present."""

DATASET_FILE_SUFFIXES = frozenset({".parquet", ".arrow"})
"""File kinds that only ``datasets`` reads, so a questions *file* of this kind is a dataset."""


@dataclass(frozen=True)
class QuestionSet:
    """Validated questions and where they came from."""

    questions: list[str]
    """The questions, in the source's order, after any limit."""
    source: dict[str, Any] = field(default_factory=dict)
    """``kind`` (``bundled``, ``list``, ``file``, ``dataset``) and what identifies it."""
    categories: dict[str, str] = field(default_factory=dict)
    """Each categorised question (its normal form) → its category (normal form too); a
    question the source gives none is absent."""

    def limited(self, limit: int | None) -> QuestionSet:
        """The first ``limit`` questions, their categories with them."""
        questions = self.questions if limit is None else self.questions[:limit]
        kept = {q: c for q, c in self.categories.items() if q in set(questions)}
        return QuestionSet(questions, self.source, kept)


@cache
def _bundled() -> tuple[str, ...]:
    return tuple(json.loads(reference.read_text(reference.QUESTIONS)))


def bundled_questions(limit: int | None = None) -> list[str]:
    """The bundled questions in order; the first ``limit`` when given."""
    questions = list(_bundled())
    return questions if limit is None else questions[:limit]


def load_questions(
    source: Sequence[str] | str | os.PathLike[str] | None = None,
    *,
    split: str | None = None,
    question_field: str = DEFAULT_FIELD,
    limit: int | None = None,
) -> list[str]:
    """The questions of ``source`` (``load_question_set``)."""
    return load_question_set(
        source, split=split, question_field=question_field, limit=limit
    ).questions


def load_question_set(
    source: Sequence[str] | str | os.PathLike[str] | None = None,
    *,
    split: str | None = None,
    question_field: str = DEFAULT_FIELD,
    limit: int | None = None,
    dataset: bool = False,
) -> QuestionSet:
    """The first ``limit`` questions of ``source``, validated, and the source's record.

    ``None`` is the bundled set; a list of strings is the list; an existing file is a
    questions file (parquet and arrow files are datasets); an existing folder is a dataset;
    any other string is a dataset name on the Hugging Face Hub. With ``dataset``, a file is
    read as a dataset too (``split`` and ``question_field`` apply to datasets only). Raises
    ``QuestionSourceError`` (one line) when the source cannot be read or holds a non-string,
    blank, repeated or over-long question.
    """
    if source is None:
        questions = validated(bundled_questions(), "bundled questions", limit)
        return QuestionSet(questions, {"kind": "bundled"})
    if not isinstance(source, str | os.PathLike):
        return QuestionSet(validated(list(source), "question list", limit), {"kind": "list"})
    path = Path(source)
    if not dataset and path.is_file() and path.suffix.lower() not in DATASET_FILE_SUFFIXES:
        where = f"questions file {path}"
        values, categories = read_questions_file(path)
        record: dict[str, Any] = {"kind": "file", "path": str(path)}
    else:
        from aidanbench.graph.hf_datasets import read_dataset

        values, categories, where, record = read_dataset(
            os.fspath(source),
            split=split,
            question_field=question_field,
            category_field=CATEGORY_FIELD,
        )
    questions = validated(values, where)
    found = QuestionSet(questions, record, categorised(questions, categories, where))
    return found.limited(limit)


def categorised(
    questions: Sequence[str], categories: Sequence[object], where: str
) -> dict[str, str]:
    """Each validated question with a category (its normal form) → that category; ``None``
    or a blank string (an empty CSV cell) is no category, anything but a string is refused
    in one line."""
    found: dict[str, str] = {}
    for number, (question, category) in enumerate(zip(questions, categories, strict=False), 1):
        if category is None or (isinstance(category, str) and not normal_text(category)):
            continue
        if not isinstance(category, str):
            shown = printable(repr(category))[:80]
            raise QuestionSourceError(
                f"{where}: the category of question {number} is {shown}, not a name"
            )
        found[question] = normal_text(category)
    return found


def validated(questions: Sequence[object], where: str, limit: int | None = None) -> list[str]:
    """The first ``limit`` questions, each checked and put in its normal form
    (``record.lines.normal_text``). Every question is checked before the limit applies, so
    a set is valid or not whatever part of it a run asks for."""
    if limit is not None and limit < 1:
        raise QuestionSourceError(f"the number of questions must be at least 1, got {limit}")
    if not questions:
        raise QuestionSourceError(f"{where} holds no questions")
    seen: dict[str, tuple[int, str]] = {}
    checked: list[str] = []
    for number, question in enumerate(questions, 1):
        if not isinstance(question, str):
            raise QuestionSourceError(
                f"{where}: question {number} is {type(question).__name__} "
                f"{printable(repr(question))[:80]}, not a string"
            )
        if not normal_text(question):
            raise QuestionSourceError(f"{where}: question {number} is empty")
        try:
            question.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise QuestionSourceError(
                f"{where}: question {number} holds an invalid character "
                f"(a lone surrogate {question[exc.start]!r}); fix its \\u escape"
            ) from None
        if len(question) > MAX_QUESTION_CHARS:
            raise QuestionSourceError(
                f"{where}: question {number} is {len(question)} characters "
                f"(at most {MAX_QUESTION_CHARS})"
            )
        key = normal_text(question)
        if key in seen:
            first, spelled = seen[key]
            raise QuestionSourceError(
                f"{where}: question {number} repeats question {first} "
                f"{printable(repr(key[:60]))}{spelling_note(spelled, question)}"
            )
        seen[key] = (number, question)
        checked.append(key)
    return checked if limit is None else checked[:limit]


def read_questions_file(path: Path) -> tuple[list[object], list[object]]:
    """Questions from a file, by its content and extension, and each one's category (None:
    none given); neither yet validated."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise QuestionSourceError(f"questions file not found: {path}") from None
    except OSError as exc:
        raise QuestionSourceError(f"cannot read questions file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QuestionSourceError(
            f"questions file {path} is not UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from None
    if not text.strip():
        raise QuestionSourceError(f"questions file {path} is empty")
    suffix = path.suffix.lower()
    stripped = text.lstrip()
    if suffix == ".jsonl":
        return _from_jsonl(text, path)
    if suffix == ".csv":
        return _from_csv(text, path)
    if suffix == ".json" or stripped.startswith("["):
        return _from_json(text, path)
    if stripped.startswith("{"):
        return _from_jsonl(text, path)
    lines: list[object] = [line.strip() for line in text.split("\n") if line.strip()]
    return lines, [None] * len(lines)


def _from_json(text: str, path: Path) -> tuple[list[object], list[object]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        why = f"is not valid JSON (line {exc.lineno})"
        raise QuestionSourceError(f"questions file {path} {why}") from None
    shape = (
        f"questions file {path} must be a JSON list of strings, or of objects with a string "
        f"'{DEFAULT_FIELD}' and an optional '{CATEGORY_FIELD}'"
    )
    if not isinstance(data, list):
        raise QuestionSourceError(shape)
    questions: list[object] = []
    categories: list[object] = []
    for item in data:
        if isinstance(item, str):
            questions.append(item)
            categories.append(None)
        elif isinstance(item, dict) and isinstance(item.get(DEFAULT_FIELD), str):
            questions.append(item[DEFAULT_FIELD])
            categories.append(item.get(CATEGORY_FIELD))
        else:
            raise QuestionSourceError(shape)
    return questions, categories


def _from_jsonl(text: str, path: Path) -> tuple[list[object], list[object]]:
    questions: list[object] = []
    categories: list[object] = []
    for number, line in numbered_lines(text):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            why = f"invalid JSON ({exc.msg} at column {exc.colno})"
            raise QuestionSourceError(f"{path}:{number}: {why}") from None
        if not isinstance(record, dict) or not isinstance(record.get(DEFAULT_FIELD), str):
            raise QuestionSourceError(f"{path}:{number}: needs a string field 'question'")
        questions.append(record[DEFAULT_FIELD])
        categories.append(record.get(CATEGORY_FIELD))
    return questions, categories


def _from_csv(text: str, path: Path) -> tuple[list[object], list[object]]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or DEFAULT_FIELD not in reader.fieldnames:
        raise QuestionSourceError(f"CSV questions file {path} needs a 'question' column")
    rows = list(reader)
    with_category = CATEGORY_FIELD in reader.fieldnames
    return (
        [row[DEFAULT_FIELD] or "" for row in rows],
        [(row[CATEGORY_FIELD] or None) if with_category else None for row in rows],
    )
