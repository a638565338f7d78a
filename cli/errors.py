"""Errors the user can fix: reported as one line, exit status 2."""

from __future__ import annotations

import re

from aidanbench.core.errors import UsageError

__all__ = ["UsageError", "printable"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b`` for ESC), safe for a terminal.

    Provider messages and question text are not ours: raw escape sequences in them could
    recolour, move or rewrite the user's terminal, and a newline would break the
    one-line-per-error rule. Lone surrogates are escaped too, so printing never fails.
    """
    escaped = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")
