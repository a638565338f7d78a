"""The one retry layer: every attempt takes its own limiter slot and its own deadline.

The OpenAI clients are built with ``max_retries=0``; requests are retried here, outside the
endpoint limiter. Retrying inside the client hides its attempts from the limiter (a 429 storm
puts several requests through one requests-per-minute slot) and cannot retry a 200 reply that
turns out to be unreadable. Here:

* each attempt is started through the limiter, so retries count against the rate;
* each attempt is bounded as a whole by ``request_timeout`` (the client's own timeout bounds
  each read, so a body trickling in one byte at a time never ends);
* retryable failures (``errors.is_retryable``) are retried up to ``max_retries`` times;
* the wait honours ``Retry-After`` (up to ``errors.RETRY_AFTER_LIMIT``), else backs off
  exponentially with jitter as the OpenAI client does, through the endpoint's ``waits`` (so a
  long one is shown while it lasts, and a ``Retry-After`` above the cap is recorded there).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aidanbench.core.errors import MalformedReply
from aidanbench.services.errors import asked_wait, is_retryable, retry_after
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.waits import Waits

T = TypeVar("T")

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


def backoff(retry: int, exc: BaseException) -> float:
    """Seconds to wait before retry number ``retry`` (0-based) after ``exc``."""
    asked = retry_after(exc)
    if asked is not None:
        return asked
    delay = min(INITIAL_BACKOFF_S * 2.0**retry, MAX_BACKOFF_S)
    return delay * (1.0 - 0.25 * random.random())


def wait_cause(exc: BaseException) -> str:
    """Why a retry waits after ``exc``, for people."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = f"a {exc.status_code}"
        return (
            f"Retry-After of {status}"
            if retry_after(exc) is not None
            else f"back-off after {status}"
        )
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return "back-off after a time-out"
    if isinstance(exc, openai.APIConnectionError | OSError):
        return "back-off after a connection error"
    if isinstance(exc, MalformedReply | openai.APIResponseValidationError):
        return "back-off after a malformed reply"
    return f"back-off after {type(exc).__name__}"


async def with_retries(attempt: Callable[[], Awaitable[T]], max_retries: int, waits: Waits) -> T:
    """``await attempt()``, again after each retryable failure, at most ``max_retries`` more
    times; the last failure is raised."""
    retry = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if retry >= max_retries or not is_retryable(exc):
                raise
            asked, granted = asked_wait(exc), retry_after(exc)
            if asked is not None and granted is not None and asked > granted:
                waits.asked_above_cap(asked, granted)
            await waits.sleep(backoff(retry, exc), wait_cause(exc))
            retry += 1


async def attempt_once(
    limiter: EndpointLimiter,
    limit_s: float | None,
    request: Callable[[], Awaitable[T]],
    model: str | None = None,
) -> T:
    """One attempt asking ``model``: a limiter slot, and the whole request within ``limit_s``
    seconds (``TimeoutError`` after that). The deadline is ``asyncio.timeout``'s:
    ``asyncio.wait_for`` would make a task per request."""
    async with limiter.slot(model), asyncio.timeout(limit_s):
        return await request()


async def call(
    limiter: EndpointLimiter,
    request: Callable[[], Awaitable[T]],
    *,
    limit_s: float | None,
    max_retries: int,
    model: str | None = None,
) -> T:
    """``request()`` (asking ``model``) through the limiter, retried (see the module
    docstring)."""
    return await with_retries(
        lambda: attempt_once(limiter, limit_s, request, model), max_retries, limiter.waits
    )
