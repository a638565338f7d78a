"""``DirectPost``: the command line's requests sent straight through aiohttp.

The shortcut past the OpenAI client (``services.direct_post``) is only safe if neither
the provider nor the run can tell it from the client: the same request (body and
headers) on the same pool, the same reply read, and the same exception for every way a
request fails, since the retry layer, the limiter, refusals and error records all read
the client's errors. Each is checked here over real HTTP, the client's own path beside
it, and the command line's pools are pinned to the shortcut.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx2
import numpy as np
import openai
import pytest

from aidanbench.core.errors import MalformedReply
from aidanbench.graph.questions import bundled_questions
from aidanbench.nodes.prompts import render_generate
from aidanbench.services import clients, errors
from aidanbench.services.chat import OpenAIChat
from aidanbench.services.embeddings import OpenAICompatibleEmbeddings
from aidanbench.testing import (
    Fault,
    OpenAIStub,
    ScriptedBrain,
    connection_reset,
    hang,
    http_error,
    rate_limited,
    when,
)
from aidanbench.testing.settings import stub_settings

QUESTION = bundled_questions(1)[0]
PROMPT = render_generate(QUESTION, [])

TRANSPORT_HEADERS = {"accept-encoding", "connection", "host", "content-length"}
"""Headers each HTTP stack writes for itself (the body is the same either way)."""


def chat_pair(stub: OpenAIStub, pool: httpx2.AsyncClient, **settings: Any) -> list[OpenAIChat]:
    """The model's chat client as the command line builds it on ``pool``, and the same
    client posting through the OpenAI client."""
    built = clients.model_under_test(stub_settings(stub.base_url, **settings), pool, "openai")
    assert isinstance(built, OpenAIChat)
    return [built, dataclasses.replace(built, direct=None)]


def embeddings_pair(stub: OpenAIStub, pool: httpx2.AsyncClient) -> list[Any]:
    built = clients.embeddings(stub_settings(stub.base_url), pool)
    assert isinstance(built, OpenAICompatibleEmbeddings)
    return [built, OpenAICompatibleEmbeddings(built.client, built.model, built.usage, None)]


async def test_the_command_lines_pools_post_directly(api_key: str) -> None:
    """The aiohttp pools of ``aidanbench run`` share their session; httpx pools (the
    graph's default services) have none, and their clients post through the client."""
    with OpenAIStub(ScriptedBrain()) as stub:
        settings = stub_settings(stub.base_url)
        aiohttp_pool = clients.http_pool(settings, "aiohttp", 8)
        httpx_pool = clients.http_pool(settings, "httpx", 8)
        try:
            chat = clients.model_under_test(settings, aiohttp_pool, "openai")
            judge = clients.judge(settings, aiohttp_pool, "openai")
            embedder = clients.embeddings(settings, aiohttp_pool)
            assert isinstance(chat, OpenAIChat) and chat.direct is not None
            assert isinstance(judge, OpenAIChat) and judge.direct is not None
            assert isinstance(embedder, OpenAICompatibleEmbeddings)
            assert embedder.direct is not None
            plain = clients.model_under_test(settings, httpx_pool, "openai")
            assert isinstance(plain, OpenAIChat) and plain.direct is None
            assert clients.embeddings(settings, httpx_pool).direct is None  # type: ignore[attr-defined]
        finally:
            await aiohttp_pool.aclose()
            await httpx_pool.aclose()


@pytest.mark.parametrize(
    "settings",
    [{}, {"model_kwargs": {"top_p": 0.5, "seed": 7}}, {"request_timeout": 7.5}],
    ids=["defaults", "request-fields", "timeout"],
)
async def test_a_direct_chat_request_is_the_clients_request(
    api_key: str, settings: dict[str, Any]
) -> None:
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        pool = clients.http_pool(stub_settings(stub.base_url, **settings), "aiohttp", 8)
        try:
            replies = [await chat.reply(PROMPT) for chat in chat_pair(stub, pool, **settings)]
        finally:
            await pool.aclose()
        direct, client = stub.of_kind("generate")
    assert direct.path == client.path and direct.method == client.method == "POST"
    assert json.dumps(direct.body, sort_keys=True) == json.dumps(client.body, sort_keys=True)

    def sent(request: Any) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k not in TRANSPORT_HEADERS}

    assert sent(direct) == sent(client)
    assert direct.headers["authorization"] == f"Bearer {api_key}"
    assert direct.headers["x-stainless-retry-count"] == "0"
    first, second = (
        r.model_copy(update={"response_metadata": {**r.response_metadata, "id": None}})
        for r in replies
    )
    assert first == second and "<answer>" in str(first.content), "the same reply read"


def failure(exc: BaseException) -> tuple[Any, ...]:
    """What the run reads from a failed request: class, message, status, body, the wait
    asked for, whether it is retried, and the recorded error."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    described = errors.describe("model", "127.0.0.1", exc, [])
    return (
        type(exc),
        str(exc),
        status,
        body,
        errors.retry_after(exc),
        errors.is_retryable(exc),
        errors.is_recoverable(exc),
        described["message"],
        described["kind"],
    )


FAULTS = {
    "400": http_error(400, "bad request field", code="invalid_value"),
    "401": http_error(401, "Incorrect API key provided"),
    "404 model": http_error(404, "The model `m` does not exist", code="model_not_found"),
    "429 retry-after": rate_limited(3),
    "429 retry-after-ms": http_error(429, "slow", headers={"retry-after-ms": "1500"}),
    "500": http_error(500),
    "503 not JSON": Fault(status=503, raw=b"<html>upstream down</html>", content_type="text/html"),
    "307 redirect": http_error(307, "moved", headers={"Location": "/v1/models"}),
}


async def failures_of_both(
    fault: Fault, expected: type[BaseException], **settings: Any
) -> list[BaseException]:
    """What the direct request and then the client's request raise (each ``expected``)
    when the one generate request meets ``fault``."""
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        stub.faults = when("generate", fault)
        pool = clients.http_pool(stub_settings(stub.base_url, **settings), "aiohttp", 8)
        caught = []
        try:
            for chat in chat_pair(stub, pool, **settings):
                with pytest.raises(expected) as raised:
                    await chat.reply(PROMPT)
                caught.append(raised.value)
        finally:
            await pool.aclose()
    return caught


def exposed(exc: BaseException) -> str:
    """Everything of a failed request a log, a record or a traceback could show."""
    parts = [str(exc), repr(exc), repr(getattr(exc, "body", None))]
    for name in ("request", "response"):
        part = getattr(exc, name, None)
        if part is not None:
            parts.append(repr(dict(part.headers)))
    parts.append(repr(errors.describe("model", "127.0.0.1", exc, [])))
    return "\n".join(parts)


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
async def test_a_direct_request_fails_as_the_client_fails(api_key: str, fault: Fault) -> None:
    caught = await failures_of_both(fault, openai.APIError)
    direct, client = (failure(exc) for exc in caught)
    assert direct == client
    assert api_key not in exposed(caught[0]), "the key is in no part of the error"


async def test_a_dropped_connection_is_a_connection_error(api_key: str) -> None:
    """The one difference, on purpose: the client's aiohttp transport reports a reset
    connection as a connect *time-out* (``errors.describe`` looks through that to the
    cause); sent directly it is the ``APIConnectionError`` it is. What the run records and
    does with it is the same."""
    direct, client = await failures_of_both(connection_reset(), openai.APIConnectionError)
    assert type(direct) is openai.APIConnectionError and type(client) is openai.APITimeoutError
    assert failure(direct)[4:] == failure(client)[4:]
    assert failure(direct)[-2] == "model at 127.0.0.1: connection failed"


async def test_a_direct_request_times_out_as_the_client_does(api_key: str) -> None:
    """The client's read time-out (``request_timeout``) bounds a reply that never comes."""
    caught = await failures_of_both(hang(3.0), openai.APITimeoutError, request_timeout=0.3)
    assert failure(caught[0]) == failure(caught[1])


async def test_a_direct_embeddings_request_is_the_clients_request(api_key: str) -> None:
    texts = ["first answer", "second answer, ünïcode", "third"]
    with OpenAIStub(ScriptedBrain()) as stub:
        pool = clients.http_pool(stub_settings(stub.base_url), "aiohttp", 8)
        try:
            results = [await e.aembed_indexed(texts) for e in embeddings_pair(stub, pool)]
        finally:
            await pool.aclose()
        direct, client = stub.of_kind("embed")
    assert json.dumps(direct.body, sort_keys=True) == json.dumps(client.body, sort_keys=True)
    assert direct.body["encoding_format"] == "base64"
    for (v1, r1), (v2, r2) in zip(*results, strict=True):
        assert r1 is r2 is None and v1 is not None and v2 is not None
        assert np.array_equal(v1, v2)


@pytest.mark.parametrize(
    "raw",
    [b"<html>502</html>", b"[]", b'{"data": "x"}', b'{"data": [{"index": 5}]}'],
    ids=["not JSON", "a list", "data not a list", "index out of range"],
)
async def test_a_direct_embeddings_reply_that_is_not_one_is_malformed(
    api_key: str, raw: bytes
) -> None:
    with OpenAIStub(ScriptedBrain()) as stub:
        stub.faults = when("embed", Fault(raw=raw))
        pool = clients.http_pool(stub_settings(stub.base_url), "aiohttp", 8)
        try:
            for embedder in embeddings_pair(stub, pool):
                with pytest.raises(MalformedReply):
                    await embedder.aembed_indexed(["a text"])
        finally:
            await pool.aclose()
