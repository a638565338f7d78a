"""Turning failed API calls into recorded stop reasons.

Only failures of the outside world are caught (the OpenAI client's exceptions, unusable
replies, missing keys, I/O errors); anything else is a bug and is raised. Messages name the
role, the endpoint host and the status, and never carry a key or a request body: a key a
provider quotes is replaced by ``[redacted]`` before the message is recorded anywhere.

The client library is imported where an exception is classified, so the driver and the
summaries read these helpers without paying for an HTTP stack (``tests/test_layers.py``); the
import costs nothing there, since an exception can only be the client's once the client has
been loaded.
"""

from __future__ import annotations

import email.utils
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aidanbench.core.errors import ConfigError, ErrorInfo, MalformedReply, ScoreParseError

if TYPE_CHECKING:
    import openai

OUR_FAILURES = (ConfigError, ScoreParseError, MalformedReply, OSError)
"""Failures of the outside world that our own code detects and raises."""


def is_recoverable(exc: BaseException) -> bool:
    """Whether a node records ``exc`` as an error outcome (instead of raising it as a bug)."""
    import openai

    return isinstance(exc, (openai.APIError, *OUR_FAILURES))


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an OpenAI client error (None for anything else)."""
    import openai

    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""4xx statuses worth another attempt (with every 5xx); any other 4xx is final."""


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt of the same request may succeed."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUSES or exc.status_code >= 500
    return isinstance(
        exc,
        MalformedReply | openai.APIConnectionError | openai.APIResponseValidationError | OSError,
    )


RETRY_AFTER_LIMIT = 120.0
"""Longest ``Retry-After`` honoured as given, in seconds; longer waits are capped."""


def retry_after(exc: BaseException) -> float | None:
    """Seconds the endpoint asked to wait, capped at ``RETRY_AFTER_LIMIT``; None when not said."""
    asked = asked_wait(exc)
    return None if asked is None else min(asked, RETRY_AFTER_LIMIT)


def asked_wait(exc: BaseException) -> float | None:
    """Seconds the endpoint asked to wait (``Retry-After-Ms`` or ``Retry-After``), uncapped."""
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    seconds: float | None = None
    try:
        if headers.get("retry-after-ms") is not None:
            seconds = float(headers["retry-after-ms"]) / 1000.0
        elif headers.get("retry-after") is not None:
            seconds = float(headers["retry-after"])
    except ValueError:
        parsed = email.utils.parsedate_tz(headers.get("retry-after", ""))
        if parsed is not None:
            seconds = email.utils.mktime_tz(parsed) - time.time()
    if seconds is None or seconds < 0:
        return None
    return seconds


REDACTED = "[redacted]"


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value replaced by ``[redacted]`` (longest first, so a
    key that contains another is hidden whole)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def describe(
    role: str,
    host: str,
    exc: BaseException,
    secrets: Iterable[str] = (),
    *,
    judge: str | None = None,
) -> ErrorInfo:
    """An ``ErrorInfo`` for ``role``'s exception at ``host``, ``secrets`` (the run's API keys)
    redacted. ``judge``
    names a panel's judge, in the message and the record: judges may share a host. A judge's
    unreadable replies (``ScoreParseError.calls``) are kept by why."""
    info = _describe(role if judge is None else f"{role} {judge}", host, exc)
    info["role"] = role
    info["message"] = redact(info["message"], secrets)
    if judge is not None:
        info["judge"] = judge
    unreadable = (getattr(exc, "calls", None) or {}).get("unreadable")
    if isinstance(exc, ScoreParseError) and unreadable:
        info["unreadable"] = dict(unreadable)
    return info


def _describe(role: str, host: str, exc: BaseException) -> ErrorInfo:
    import openai

    if isinstance(exc, ScoreParseError):
        return ErrorInfo(
            kind="judge_error",
            role=role,
            message=f"{role} at {host}: unreadable reply ({exc.reason.replace('_', ' ')} "
            f"<{exc.tag}>) after every attempt",
            status=None,
            retryable=True,
        )
    if isinstance(exc, ConfigError):
        return ErrorInfo(
            kind="error", role=role, message=f"{role}: {exc}", status=None, retryable=False
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = short(api_message(exc))
        return ErrorInfo(
            kind="error",
            role=role,
            message=f"{role} at {host}: HTTP {status}" + (f": {detail}" if detail else ""),
            status=status,
            retryable=is_retryable(exc),
        )
    if isinstance(exc, MalformedReply):
        what = f"malformed reply ({short(str(exc), 120)})"
    elif _dropped_connection(exc):
        what = "connection failed"
    elif isinstance(exc, openai.APITimeoutError | TimeoutError):
        what = "request timed out"
    elif isinstance(exc, openai.APIConnectionError | OSError):
        what = "connection failed"
    else:
        what = type(exc).__name__
    return ErrorInfo(
        kind="error", role=role, message=f"{role} at {host}: {what}", status=None, retryable=True
    )


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a request that ran out of time (not a dropped connection that its
    transport reports as one)."""
    import openai

    return isinstance(exc, openai.APITimeoutError | TimeoutError) and not _dropped_connection(exc)


def _dropped_connection(exc: BaseException) -> bool:
    """Whether the root of ``exc`` is aiohttp losing the connection, which its transport
    reports as a connect *time-out*: that would send a reader looking for a slow endpoint
    instead of a dead one. Without aiohttp loaded, no exception can come from it."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None:
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
            cause, aiohttp.ServerTimeoutError | TimeoutError
        ):
            return True
        cause = cause.__cause__
    return False


def api_message(exc: openai.APIStatusError) -> str:
    """The message of an API error body ("" when it has none)."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return ""


def short(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
