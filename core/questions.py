"""A question's identity: one text, however a file, a dataset or a run spelled it.

Two spellings of a question that differ only in surrounding whitespace or in Unicode
form (a composed ``é`` against ``e`` and a combining accent) look the same to a person
and ask a model the same thing; counted apart, they would give one model two scores for
one question. ``normal_question`` is the one form that identifies a question: question
sets are normalised when they are read (and a set holding two spellings of one question
is refused), thread ids hash it, and reports pair lines by it.
"""

from __future__ import annotations

import unicodedata


def normal_question(text: str) -> str:
    """``text`` in Unicode NFC, without surrounding whitespace."""
    return unicodedata.normalize("NFC", text).strip()


def spelling_note(first: str, second: str) -> str:
    """Why two texts are one question, when they are not equal as written."""
    if first == second:
        return ""
    if first.strip() == second.strip():
        return " (they differ only in surrounding whitespace)"
    return " (they differ only in surrounding whitespace or Unicode form)"
