"""Embedding requests are coalesced across questions, and errors stay with their caller."""

from __future__ import annotations

import asyncio

import httpx2
import openai
import pytest
from langchain_core.embeddings import Embeddings

from aidanbench.graph.questions import bundled_questions
from aidanbench.services import OpenAIServices, default_services
from aidanbench.services.batching import EmbeddingBatcher
from aidanbench.services.limits import EndpointLimiter
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain, unit_vector

from .graphs import run_question
from .test_http import stub_settings


def bad_request() -> openai.BadRequestError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/embeddings")
    response = httpx2.Response(400, request=request)
    return openai.BadRequestError("input is empty", response=response, body=None)


def server_error() -> openai.InternalServerError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/embeddings")
    response = httpx2.Response(500, request=request)
    return openai.InternalServerError("down", response=response, body=None)


class Recording(Embeddings):
    """Vectors by text; records each request's texts; fails on demand by content."""

    def __init__(self, delay: float = 0.02, fail: Exception | None = None) -> None:
        self.delay = delay
        self.fail = fail
        self.requests: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.requests.append(list(texts))
        await asyncio.sleep(self.delay)
        if self.fail is not None and (
            not isinstance(self.fail, openai.BadRequestError) or "" in texts
        ):
            raise self.fail
        return [unit_vector(t, 8) for t in texts]


def batcher(client: Recording, in_flight: int = 2) -> EmbeddingBatcher:
    return EmbeddingBatcher(
        client=lambda: client, limiter=EndpointLimiter(8), max_in_flight=in_flight
    )


async def test_calls_in_one_step_share_one_request() -> None:
    client = Recording()
    b = batcher(client)
    texts = [[f"answer {i}", "shared"] for i in range(10)]
    out = await asyncio.gather(*(b.embed(t) for t in texts))
    assert len(client.requests) == 1
    assert client.requests[0].count("shared") == 1, "texts are sent once per batch"
    for got, sent in zip(out, texts, strict=True):
        assert got == [unit_vector(t, 8) for t in sent]


async def test_calls_wait_and_coalesce_while_batches_are_in_flight() -> None:
    client = Recording(delay=0.05)
    b = batcher(client, in_flight=2)

    async def later(i: int) -> list[list[float]]:
        await asyncio.sleep(0.005 * i)
        return await b.embed([f"answer {i}"])

    out = await asyncio.gather(*(later(i) for i in range(8)))
    assert [len(r) for r in client.requests][:2] == [1, 1], "the first two go at once"
    assert len(client.requests) < 8 and sum(len(r) for r in client.requests) == 8
    assert out == [[unit_vector(f"answer {i}", 8)] for i in range(8)]


async def test_a_bad_text_fails_only_its_caller() -> None:
    client = Recording(fail=bad_request())
    b = batcher(client)
    good, bad, other = await asyncio.gather(
        b.embed(["fine"]), b.embed([""]), b.embed(["also fine"]), return_exceptions=True
    )
    assert isinstance(bad, openai.BadRequestError)
    assert good == [unit_vector("fine", 8)] and other == [unit_vector("also fine", 8)]
    assert client.requests[0] == ["fine", "", "also fine"], "sent together first"


async def test_endpoint_errors_reach_every_caller_without_a_split() -> None:
    client = Recording(fail=server_error())
    b = batcher(client)
    out = await asyncio.gather(b.embed(["a"]), b.embed(["b"]), return_exceptions=True)
    assert all(isinstance(o, openai.InternalServerError) for o in out)
    assert len(client.requests) == 1, "a 5xx is the endpoint's, not a caller's"


async def test_a_cancelled_caller_leaves_the_others_their_vectors() -> None:
    client = Recording(delay=0.05)
    b = batcher(client, in_flight=1)
    first = asyncio.ensure_future(b.embed(["first"]))
    await asyncio.sleep(0.01)  # "first" is in flight; the next two wait together
    doomed = asyncio.ensure_future(b.embed(["doomed"]))
    kept = asyncio.ensure_future(b.embed(["kept"]))
    await asyncio.sleep(0)
    doomed.cancel()
    assert await first == [unit_vector("first", 8)]
    assert await kept == [unit_vector("kept", 8)]
    assert client.requests == [["first"], ["kept"]]


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_questions_share_embedding_requests_over_http(api_key: str, transport: str) -> None:
    questions = bundled_questions(8)
    brain = ScriptedBrain({q: 3 for q in questions})
    latency = Latency(generate=0.02, coherence=0.05, embed=0.03)
    services = default_services if transport == "httpx" else OpenAIServices("aiohttp")
    with OpenAIStub(brain, latency=latency) as stub:
        settings = stub_settings(stub)
        try:
            outs = await asyncio.gather(*(run_question(services, q, settings) for q in questions))
        finally:
            if isinstance(services, OpenAIServices) and services is not default_services:
                await services.aclose()
        assert [out["score"] for out in outs] == [3] * len(questions)
        texts = [t for r in stub.of_kind("embed") for t in r.texts]
        # three valid answers each; the failing fourth repeats one, so it is cached
        assert len(texts) == len(set(texts)) == 3 * len(questions), "each text embedded once"
        assert stub.count("embed") < len(texts) / 2, "requests are shared across questions"
