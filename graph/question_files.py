"""Question sets: the bundled 63, the first N of them, or a user's file.

Accepted files: a JSON list of strings; JSONL or CSV with a ``question`` field; plain text
with one question per line. Anything else is an error, never a silent fallback to the
bundled list. Blank, duplicate (after ``record.lines.normal_question``) or absurdly
long questions are errors too: each would waste or skew a run.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from aidanbench.core.errors import UsageError
from aidanbench.graph.questions import bundled_questions


def load_questions(limit: int | None, path: Path | None) -> list[str]:
    """The question set the command line asks for."""
    if limit is not None and limit < 1:
        raise UsageError(f"--questions must be at least 1, got {limit}")
    if path is None:
        available = len(bundled_questions())
        if limit is not None and limit > available:
            raise UsageError(
                f"--questions {limit}: there are {available} bundled questions; "
                f"give at most {available}, or --questions-file for your own"
            )
        return bundled_questions(limit)
    questions = _validated(read_questions_file(path), path)
    if limit is not None and limit > len(questions):
        raise UsageError(
            f"--questions {limit}: questions file {path} holds {len(questions)} questions"
        )
    return questions if limit is None else questions[:limit]


def read_questions_file(path: Path) -> list[str]:
    """Questions from a file, by its content and extension."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"questions file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read questions file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"questions file {path} is not UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from None
    if not text.strip():
        raise UsageError(f"questions file {path} is empty")
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
    return [line.strip() for line in text.splitlines() if line.strip()]


def _from_json(text: str, path: Path) -> list[str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"questions file {path} is not valid JSON (line {exc.lineno})") from None
    if not isinstance(data, list) or not all(isinstance(q, str) for q in data):
        raise UsageError(f"questions file {path} must be a JSON list of strings")
    return list(data)


def _from_jsonl(text: str, path: Path) -> list[str]:
    questions = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path}:{number}: invalid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("question"), str):
            raise UsageError(f"{path}:{number}: needs a string field 'question'")
        questions.append(record["question"])
    return questions


def _from_csv(text: str, path: Path) -> list[str]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "question" not in reader.fieldnames:
        raise UsageError(f"CSV questions file {path} needs a 'question' column")
    return [row["question"] or "" for row in reader]


def _validated(questions: list[str], path: Path) -> list[str]:
    """The questions checked and normalised as every source's are
    (``question_sources.validated``)."""
    from aidanbench.graph.question_sources import QuestionSourceError, validated

    try:
        return validated(questions, f"questions file {path}")
    except QuestionSourceError as exc:
        raise UsageError(str(exc)) from None
