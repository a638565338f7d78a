"""Injected failures: HTTP errors, connection resets and hangs, decided per request.

A fault hook sees a ``RequestInfo`` before the brain does and may return a ``Fault``.
Calls arrive concurrently, so "fail the first two attempts" cannot mean "the first two
calls the server sees": ``attempt`` counts earlier requests with the same kind, model and
content, which makes such rules deterministic whatever the scheduling.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .brain import Kind


def content_key(model: str, prompt: str, texts: tuple[str, ...] = ()) -> str:
    """What makes two requests "the same request" for attempt counting (a sha256)."""
    joined = "\x00".join((model, prompt, *texts))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RequestInfo:
    """What a fault hook may look at. ``attempt`` starts at 1 for each content key."""

    kind: Kind
    model: str
    prompt: str
    texts: tuple[str, ...]
    attempt: int
    key: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def contains(self, needle: str) -> bool:
        """Whether the prompt or any embedding input contains ``needle``."""
        return needle in self.prompt or any(needle in text for text in self.texts)


@dataclass(frozen=True)
class Fault:
    """What to do instead of a normal answer.

    First wait ``delay`` seconds (a hang; ``stop()`` cuts it short). Then: ``reset`` closes
    the socket without a response (the client sees a connection error); else ``status``
    sends that HTTP error with ``headers`` and an OpenAI-shaped ``body``; else (no status)
    the request is answered normally, only late.
    """

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    reset: bool = False
    delay: float = 0.0


FaultHook = Callable[[RequestInfo], Fault | None]
"""Consulted before the brain; returns ``None`` to let the request through."""

_ERROR_TYPES = MappingProxyType(
    {
        400: ("invalid_request_error", None),
        401: ("invalid_request_error", "invalid_api_key"),
        403: ("invalid_request_error", None),
        404: ("invalid_request_error", None),
        408: ("timeout", None),
        409: ("conflict", None),
        429: ("requests", "rate_limit_exceeded"),
    }
)


def error_body(status: int, message: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-shaped error body, so clients build their usual exception from it."""
    kind, default_code = _ERROR_TYPES.get(status, ("server_error", None))
    return {
        "error": {
            "message": message or f"stub error {status}",
            "type": kind,
            "param": None,
            "code": code or default_code,
        }
    }


def http_error(
    status: int,
    message: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
    delay: float = 0.0,
) -> Fault:
    """An HTTP error response, optionally after ``delay`` seconds."""
    return Fault(
        status=status,
        headers=dict(headers or {}),
        body=error_body(status, message, code),
        delay=delay,
    )


def rate_limited(retry_after: float = 0.05) -> Fault:
    """A 429 with ``Retry-After`` (seconds; the openai client accepts fractions)."""
    return http_error(429, "Rate limit reached", headers={"Retry-After": f"{retry_after:g}"})


def connection_reset(delay: float = 0.0) -> Fault:
    """Close the connection without any response (RST), optionally after ``delay``."""
    return Fault(reset=True, delay=delay)


def hang(seconds: float, *, reset: bool = False) -> Fault:
    """Sleep ``seconds``, then answer normally (or reset) — for client-timeout tests."""
    return Fault(reset=reset, delay=seconds)


def when(
    kind: Kind | None,
    fault: Fault,
    *,
    times: int | None = None,
    match: str | None = None,
) -> FaultHook:
    """A hook applying ``fault`` to matching requests.

    Matches requests of ``kind`` (any kind when ``None``) whose prompt or inputs contain
    ``match`` (when given), for their first ``times`` attempts (always when ``None``).
    """

    def hook(info: RequestInfo) -> Fault | None:
        if kind is not None and info.kind != kind:
            return None
        if match is not None and not info.contains(match):
            return None
        if times is not None and info.attempt > times:
            return None
        return fault

    return hook


def fail_times(
    kind: Kind | None,
    times: int,
    status: int = 500,
    headers: Mapping[str, str] | None = None,
    match: str | None = None,
) -> FaultHook:
    """Answer the first ``times`` attempts of each matching request with HTTP ``status``."""
    return when(kind, http_error(status, headers=headers), times=times, match=match)


def combine(*hooks: FaultHook) -> FaultHook:
    """The first fault any of ``hooks`` returns."""

    def hook(info: RequestInfo) -> Fault | None:
        for each in hooks:
            fault = each(info)
            if fault is not None:
                return fault
        return None

    return hook
