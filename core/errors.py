"""Failures of the outside world, as exception types and as the record state keeps.

Kept apart from the clients that raise them so that any layer can name them (a node, the
driver deciding what to rerun, a summary counting errors) without importing an HTTP client.
"""

from __future__ import annotations

import re
from typing import Any, NotRequired

from typing_extensions import TypedDict

from aidanbench.core.schema_docs import documented
from aidanbench.core.vocabulary import ErrorKind


@documented
class ErrorInfo(TypedDict):
    """Why a question stopped without a score for its current answer."""

    kind: ErrorKind
    """``error`` (an API or configuration failure) or ``judge_error`` (unreadable judge)."""
    role: str
    """``model``, ``judge`` or ``embeddings``."""
    message: str
    """One line naming the role, the endpoint host and the status; never a key."""
    status: int | None
    """HTTP status when there was one."""
    retryable: bool
    """True when the same call may succeed later (rate limits, outages, timeouts)."""
    judge: NotRequired[str]
    """The judge model that failed, on a judge panel (whose judges may share a host)."""
    unreadable: NotRequired[dict[str, int]]
    """A ``judge_error``'s replies without a readable score, by why (as
    ``CallStats.unreadable``): refusals count whether or not a later try succeeds."""


class ConfigError(Exception):
    """A setting that makes a role unusable (for example, its key variable is unset)."""


class MalformedReply(Exception):
    """A 200 reply the client could not use (not JSON, no choices, an ``error`` object, a bad
    embedding). Transient as far as anyone can tell: retried, then a retryable ``error``."""


class ScoreParseError(ValueError):
    """A judge reply without exactly one integer score in range; ``reason`` is ``empty``,
    ``missing``, ``multiple``, ``not_integer`` or ``out_of_range``."""

    def __init__(self, reason: str, tag: str, reply: str) -> None:
        self.reason = reason
        self.tag = tag
        self.reply = reply
        self.calls: Any = None
        """What the replies that could not be read cost (``CallStats``), once every
        attempt failed (``nodes.judge_calls.read_judge``)."""
        shown = reply if len(reply) <= 200 else reply[:200] + "…"
        super().__init__(f"judge reply has {reason.replace('_', ' ')} <{tag}>: {shown!r}")


class QuestionSourceError(ValueError):
    """A question source that cannot be used; the message is one line saying why."""


class UsageError(Exception):
    """Bad arguments, files or environment: something the user can fix. The message is the
    whole explanation; the command line prints it as one line and exits with status 2."""


class EndpointRefused(UsageError, ValueError):
    """An endpoint refuses a role itself, not one request: an unknown model (404), a refused
    key (401, 403), a 400 that a content-free request of the role gets too. No retry can fix
    it, so it is raised out of the graph, not recorded as a question's error: the step it
    interrupted stays pending, the run stops, and a corrected rerun continues every thread.

    A ``ValueError`` too: a LangGraph server passes only a ``ValueError``'s message on to its
    client (others become "An internal error occurred"), and a ``--server`` run prints it.
    ``reason`` is the refusal alone, without what the run does about it, for commands that
    are not a run (``calibrate``, ``rescore``)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
"""C0 and C1 controls (ESC, and with it every CSI and OSC sequence; the one-byte CSI
``\\x9b``; BEL; newlines and carriage returns), the Unicode line and paragraph
separators, and the bidirectional controls that reorder what a terminal shows."""


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b`` for ESC), safe for a terminal.

    The one escaping function for text from outside (questions, answers, model names,
    provider errors, file contents) on its way to a terminal: escape sequences could
    recolour, move or rewrite the terminal or plant a link (OSC 8), a newline would forge a
    log line or break the one-line-per-error rule, bidirectional controls reorder what is
    shown. Lone surrogates are escaped so printing never fails. Rich markup is left as text:
    every console printing outside text has ``markup=False`` (``cli.report.make_console``).
    """
    escaped = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")


def install_hint(extra: str) -> str:
    """How README installs an optional extra (from a clone), the one form every message
    that needs one quotes."""
    return f"pip install -e '.[{extra}]'"
