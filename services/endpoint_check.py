"""What an endpoint answers before a run: its model list, or one minimal request.

The run's preflight (``runner.preflight``) judges these answers; this module only asks. Each
call is one attempt bounded as a whole by ``limit_s`` and never raises for what the endpoint
answers: it returns an ``Answer``. Keys are passed in and never kept.

A minimal chat request limits its tokens with ``max_completion_tokens`` on OpenAI's own API,
whose reasoning models refuse ``max_tokens``, and ``max_tokens`` elsewhere, the field every
OpenAI-compatible server knows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from aidanbench.services.errors import api_message, short

PROBE_MESSAGE = "Reply with the single word OK."
"""The user message of a minimal chat request."""

PROBE_MAX_TOKENS = 16
"""The token limit of a minimal chat request."""

PROBE_TEXT = "ok"
"""The text of a minimal embeddings request."""


@dataclass(frozen=True)
class Answer:
    """What an endpoint answered to one request."""

    status: int | None
    """The HTTP status; None when no answer came (see ``message``)."""
    seconds: float
    """How long the request took."""
    payload: Any = None
    """The JSON body of a 2xx answer (None when it is not JSON)."""
    code: str | None = None
    """The error body's ``code`` (``model_not_found``, ``invalid_api_key``…)."""
    message: str = ""
    """The error body's message, or why no answer came; one line."""

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return self.status is not None and 200 <= self.status < 300


def endpoint_client(base_url: str, key: str, limit_s: float) -> openai.AsyncOpenAI:
    """A client for ``base_url`` making one attempt per call; close it with ``close()``."""
    from aidanbench.services.clients import tls_context

    pool = openai.DefaultAsyncHttpxClient(timeout=limit_s, verify=tls_context())
    return openai.AsyncOpenAI(
        api_key=key, base_url=base_url, timeout=limit_s, max_retries=0, http_client=pool
    )


MAX_PAGES = 100
"""Pages of a paginated model list read at most (a list that never ends is cut there)."""


async def list_models(client: openai.AsyncOpenAI, limit_s: float) -> Answer:
    """``GET {base_url}/models``, and every further page it names (``next_page``), within
    ``limit_s`` in all, the answer holding every page's models; a page that fails ends it
    there, as that page's answer."""
    deadline = time.perf_counter() + limit_s
    answer = await _ask(client.get("/models", cast_to=httpx2.Response), limit_s)
    models: list[Any] = []
    for _ in range(MAX_PAGES):
        if not answer.ok or not isinstance(answer.payload, dict):
            return answer
        page = answer.payload
        data = page.get("data")
        models += data if isinstance(data, list) else []
        following = next_page(page)
        left = deadline - time.perf_counter()
        if following is None or left <= 0:
            break
        path, query = following
        request = client.get(path, options={"params": query}, cast_to=httpx2.Response)
        answer = await _ask(request, left)
    return dataclasses.replace(answer, payload={**answer.payload, "data": models})


def next_page(page: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """Where a model list's next page is (path or URL, query), or None on its last."""
    links = page.get("links")
    link = page.get("next") or (links.get("next") if isinstance(links, dict) else None)
    if isinstance(link, str) and link:
        return link, {}
    data = page.get("data")
    if page.get("has_more") is not True or not isinstance(data, list) or not data:
        return None
    last = page.get("last_id") or (data[-1].get("id") if isinstance(data[-1], dict) else None)
    return ("/models", {"after": str(last)}) if last else None


async def minimal_chat(
    client: openai.AsyncOpenAI, model: str, limit_s: float, *, openai_api: bool
) -> Answer:
    """One short user message to ``model`` with a small token limit."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_MESSAGE}],
        "max_completion_tokens" if openai_api else "max_tokens": PROBE_MAX_TOKENS,
    }
    return await _ask(client.post("/chat/completions", body=body, cast_to=httpx2.Response), limit_s)


async def minimal_embeddings(client: openai.AsyncOpenAI, model: str, limit_s: float) -> Answer:
    """One short text embedded by ``model``, in the encoding the run's requests use."""
    body = {"model": model, "input": [PROBE_TEXT], "encoding_format": "base64"}
    return await _ask(client.post("/embeddings", body=body, cast_to=httpx2.Response), limit_s)


def listed_models(payload: Any) -> dict[str, str | None] | None:
    """The model ids of a ``GET /models`` body with each one's ``shutdown_date``; None when the
    body is not a model list."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    models: dict[str, str | None] = {}
    for item in data:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            shutdown = item.get("shutdown_date")
            models[item["id"]] = shutdown if isinstance(shutdown, str) else None
    return models


async def _ask(request: Any, limit_s: float) -> Answer:
    """Await one request of the OpenAI client and describe what came back."""
    started = time.perf_counter()
    try:
        response: httpx2.Response = await asyncio.wait_for(request, limit_s)
    except openai.APIStatusError as exc:
        return Answer(
            status=exc.status_code,
            seconds=time.perf_counter() - started,
            code=exc.code,
            message=short(api_message(exc), 300),
        )
    except (openai.APIConnectionError, TimeoutError, OSError) as exc:
        return Answer(
            status=None, seconds=time.perf_counter() - started, message=no_answer_reason(exc)
        )
    try:
        payload = response.json()
    except ValueError:
        payload = None
    return Answer(
        status=response.status_code, seconds=time.perf_counter() - started, payload=payload
    )


def no_answer_reason(exc: BaseException) -> str:
    """Why no HTTP answer came: the operating system's reason when there is one."""
    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return "no answer in time"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):
            return os.strerror(cause.errno) if cause.errno else str(cause.strerror)
        cause = cause.__cause__ or cause.__context__
    return "connection failed"
