"""Turning failed API calls into recorded stop reasons.

Only failures of the outside world are caught: API status errors, connection errors,
time-outs, missing keys and unreadable judge replies. Anything else is a bug and is
raised. Messages name the role, the endpoint host and the status, and never carry a key
or a request body.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp
import httpx
import openai

from aidanbench.graph.state import ErrorInfo
from aidanbench.nodes.parsing import ScoreParseError


class ConfigError(Exception):
    """A setting that makes a role unusable (for example, its key variable is unset)."""


RECOVERABLE = (openai.APIError, httpx.HTTPError, ConfigError, ScoreParseError, OSError)
"""Exception types a node records as an error outcome instead of raising."""


def host_of(url: str | None) -> str:
    """The host (and port) of an endpoint URL, for messages; ``api.openai.com`` for None."""
    if not url:
        return "api.openai.com"
    return urlsplit(url).netloc or url


def describe(role: str, host: str, exc: BaseException) -> ErrorInfo:
    """An ``ErrorInfo`` for an exception from ``role``'s endpoint at ``host``."""
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
        detail = _short(_api_message(exc))
        return ErrorInfo(
            kind="error",
            role=role,
            message=f"{role} at {host}: HTTP {status}" + (f": {detail}" if detail else ""),
            status=status,
            retryable=status in (408, 409, 429) or status >= 500,
        )
    if _dropped_connection(exc):
        what = "connection failed"
    elif isinstance(exc, openai.APITimeoutError | httpx.TimeoutException | TimeoutError):
        what = "request timed out"
    elif isinstance(exc, openai.APIConnectionError | httpx.TransportError | OSError):
        what = "connection failed"
    else:
        what = type(exc).__name__
    return ErrorInfo(
        kind="error", role=role, message=f"{role} at {host}: {what}", status=None, retryable=True
    )


def _dropped_connection(exc: BaseException) -> bool:
    """Whether the root of ``exc`` is aiohttp losing the connection (reset, refused,
    closed early). The aiohttp transport reports those as connect *time-outs*, which
    would send whoever reads the error looking for a slow endpoint instead of a dead one.
    """
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
            cause, aiohttp.ServerTimeoutError | TimeoutError
        ):
            return True
        cause = cause.__cause__
    return False


def _api_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return ""


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
