"""Injected failures: HTTP errors, connection resets, hangs and bad replies, per request.

A fault hook sees a ``RequestInfo`` before the brain and may return a ``Fault``. Calls arrive
concurrently, so ``attempt`` counts earlier requests with the same kind, model and content,
never the calls the server happened to see first: "fail the first two attempts" stays
deterministic whatever the scheduling.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

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
    """What to do instead of a normal answer: first wait ``delay`` seconds (a hang; ``stop()``
    cuts it short), then ``reset`` closes the socket without a response; else ``raw`` sends those
    bytes (``status`` or 200, ``content_type``); else ``status`` sends that HTTP error with
    ``headers`` and ``body`` (``echo_key``: a message quoting the request's ``Authorization``, as
    some providers do); else the normal answer, through ``rewrite`` when given. ``drip`` sends
    the body one byte every ``drip`` seconds."""

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    reset: bool = False
    delay: float = 0.0
    raw: bytes | None = None
    content_type: str = "application/json"
    rewrite: Callable[[dict[str, Any], RequestInfo], Any] | None = None
    drip: float = 0.0
    echo_key: bool = False


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
    """A hook applying ``fault`` to requests of ``kind`` (any when ``None``) whose prompt or
    inputs contain ``match`` (when given), for their first ``times`` attempts (all if ``None``)."""

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


def drip(seconds_per_byte: float) -> Fault:
    """Answer normally, but send the body one byte every ``seconds_per_byte`` seconds."""
    return Fault(drip=seconds_per_byte)


def echo_key(status: int = 401) -> Fault:
    """An HTTP error whose message repeats the caller's ``Authorization`` header."""
    return Fault(status=status, echo_key=True)


Malformed = Literal["empty-choices", "truncated", "html", "error-200", "surrogate", "no-data"]
"""Shapes of a broken 200 reply (``malformed``)."""


def malformed(shape: Malformed) -> Fault:
    """A 200 reply the client cannot use: ``empty-choices``, ``truncated`` JSON, a proxy's
    ``html`` page, ``error-200`` (``{"error": ...}``, as OpenRouter sends upstream failures),
    ``surrogate`` (an answer ending in a lone UTF-16 surrogate: valid JSON, invalid Unicode),
    ``no-data`` (embeddings without ``data``)."""
    if shape == "truncated":
        return Fault(raw=b'{"id": "chatcmpl-cut", "object": "chat.completion", "choi')
    if shape == "html":
        return Fault(
            raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html"
        )
    if shape == "error-200":
        return Fault(
            raw=b'{"error": {"message": "Provider returned error", "code": 502}}',
        )

    def rewrite(payload: dict[str, Any], info: RequestInfo) -> Any:
        if shape == "empty-choices":
            return {**payload, "choices": []}
        if shape == "no-data":
            return {key: value for key, value in payload.items() if key != "data"}
        choices = [dict(c) for c in payload["choices"]]
        message = dict(choices[0]["message"])
        text = str(message["content"])
        cut = text.rfind("</answer>")
        cut = len(text) if cut < 0 else cut
        message["content"] = text[:cut] + "\ud800" + text[cut:]
        choices[0]["message"] = message
        return {**payload, "choices": choices}

    return Fault(rewrite=rewrite)


def reordered_embeddings() -> Fault:
    """Embeddings reversed in ``data``, each keeping its ``index``: the API promises no order,
    and a client that ignores ``index`` swaps vectors."""

    def rewrite(payload: dict[str, Any], info: RequestInfo) -> Any:
        return {**payload, "data": list(reversed(payload["data"]))}

    return Fault(rewrite=rewrite)


BadVector = Literal["nan", "inf", "zero", "short", "missing", "null"]
"""Ways one vector of an embeddings reply can be wrong (``bad_vector``)."""


def bad_vector(how: BadVector, match: str) -> Fault:
    """Damage the vector of each input containing ``match``: ``nan``/``inf`` (one component),
    ``zero``, ``short`` (one component fewer), ``missing`` (left out of ``data``), ``null``;
    float and base64 encodings alike."""

    def damage(vector: np.ndarray) -> np.ndarray:
        if how == "nan":
            return np.concatenate([[np.nan], vector[1:]])
        if how == "inf":
            return np.concatenate([[np.inf], vector[1:]])
        if how == "zero":
            return np.zeros_like(vector)
        return vector[:-1]

    def rewrite(payload: dict[str, Any], info: RequestInfo) -> Any:
        data = []
        for item in payload["data"]:
            if match not in info.texts[item["index"]]:
                data.append(item)
            elif how == "missing":
                continue
            elif how == "null":
                data.append({**item, "embedding": None})
            else:
                data.append({**item, "embedding": _encoded(damage(_decoded(item)), item)})
        return {**payload, "data": data}

    return Fault(rewrite=rewrite)


def _decoded(item: Mapping[str, Any]) -> np.ndarray:
    value = item["embedding"]
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float64)
    return np.asarray(value, dtype=np.float64)


def _encoded(vector: np.ndarray, like: Mapping[str, Any]) -> Any:
    if isinstance(like["embedding"], str):
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def combine(*hooks: FaultHook) -> FaultHook:
    """The first fault any of ``hooks`` returns."""

    def hook(info: RequestInfo) -> Fault | None:
        for each in hooks:
            fault = each(info)
            if fault is not None:
                return fault
        return None

    return hook
