"""The benchmark's 63 questions, bundled in the benchmark's order (``aidanbench.reference``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cache

from aidanbench import reference


@cache
def _bundled() -> tuple[str, ...]:
    questions = json.loads(reference.read_text(reference.QUESTIONS))
    return tuple(questions)


def bundled_questions(limit: int | None = None) -> list[str]:
    """The bundled questions in order; the first ``limit`` when given."""
    questions = list(_bundled())
    return questions if limit is None else questions[:limit]


def question_set_hash(questions: Sequence[str]) -> str:
    """sha256 over the questions (JSON list), recorded so runs on the same set can be matched."""
    return hashlib.sha256(json.dumps(list(questions)).encode("utf-8")).hexdigest()
