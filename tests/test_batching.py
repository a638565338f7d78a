"""Embedding requests are coalesced across questions, and errors stay with their caller."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx2
import numpy as np
import openai
from langchain_core.embeddings import Embeddings

from aidanbench.core.errors import MalformedReply
from aidanbench.graph.questions import bundled_questions
from aidanbench.services import ServicesFactory
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

    def __init__(self, fail: Exception | None = None, gate: asyncio.Event | None = None) -> None:
        self.fail = fail
        self.gate = gate
        self.requests: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.requests.append(list(texts))
        if self.gate is not None:
            await self.gate.wait()  # held until the test lets requests finish
        else:
            await asyncio.sleep(0.01)
        if self.fail is not None and (
            not isinstance(self.fail, openai.BadRequestError) or "" in texts
        ):
            raise self.fail
        return [unit_vector(t, 8) for t in texts]


def vectors_of(texts: list[str]) -> list[list[float]]:
    """What the batcher hands back for ``texts`` (float32, as cached)."""
    return [np.asarray(unit_vector(t, 8), dtype=np.float32).tolist() for t in texts]


def as_lists(vectors: object) -> object:
    """Vectors as plain lists, for equality checks (exceptions pass through)."""
    if isinstance(vectors, list):
        return [v.tolist() for v in vectors]
    return vectors


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
        assert as_lists(got) == vectors_of(sent)


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition`` holds (a bounded number of steps)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_calls_wait_and_coalesce_while_batches_are_in_flight() -> None:
    client = Recording(gate=asyncio.Event())
    b = batcher(client, in_flight=2)
    first = asyncio.ensure_future(b.embed(["answer 0"]))
    await until(lambda: len(client.requests) == 1)
    second = asyncio.ensure_future(b.embed(["answer 1"]))
    await until(lambda: len(client.requests) == 2)
    rest = [asyncio.ensure_future(b.embed([f"answer {i}"])) for i in range(2, 8)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(client.requests) == 2, "two batches are out, so the others wait"
    assert client.gate is not None
    client.gate.set()
    out = await asyncio.gather(first, second, *rest)
    assert client.requests == [["answer 0"], ["answer 1"], [f"answer {i}" for i in range(2, 8)]]
    assert [as_lists(o) for o in out] == [vectors_of([f"answer {i}"]) for i in range(8)]


async def test_a_full_batch_goes_whatever_is_in_flight() -> None:
    """Two batches out: five waiting texts wait, but a full batch's worth (four here)
    goes at once, and the rest waits for a free batch."""
    client = Recording(gate=asyncio.Event())
    b = EmbeddingBatcher(client=lambda: client, limiter=EndpointLimiter(8), max_texts=4)
    out = [asyncio.ensure_future(b.embed([f"answer {i}"])) for i in range(2)]
    await until(lambda: len(client.requests) == 1)
    out.append(asyncio.ensure_future(b.embed(["answer 2"])))
    await until(lambda: len(client.requests) == 2)
    out += [asyncio.ensure_future(b.embed([f"answer {i}"])) for i in range(3, 8)]
    await until(lambda: len(client.requests) == 3)
    for _ in range(20):
        await asyncio.sleep(0)
    assert client.requests == [
        ["answer 0", "answer 1"],
        ["answer 2"],
        ["answer 3", "answer 4", "answer 5", "answer 6"],
    ]
    assert client.gate is not None
    client.gate.set()
    assert [as_lists(o) for o in await asyncio.gather(*out)] == [
        vectors_of([f"answer {i}"]) for i in range(8)
    ]
    assert client.requests[3:] == [["answer 7"]]


async def test_a_bad_text_fails_only_its_caller() -> None:
    client = Recording(fail=bad_request())
    b = batcher(client)
    good, bad, other = await asyncio.gather(
        b.embed(["fine"]), b.embed([""]), b.embed(["also fine"]), return_exceptions=True
    )
    assert isinstance(bad, openai.BadRequestError)
    assert as_lists(good) == vectors_of(["fine"])
    assert as_lists(other) == vectors_of(["also fine"])
    assert client.requests[0] == ["fine", "", "also fine"], "sent together first"


async def test_endpoint_errors_reach_every_caller_without_a_split() -> None:
    client = Recording(fail=server_error())
    b = batcher(client)
    out = await asyncio.gather(b.embed(["a"]), b.embed(["b"]), return_exceptions=True)
    assert all(isinstance(o, openai.InternalServerError) for o in out)
    assert len(client.requests) == 1, "a 5xx is the endpoint's, not a caller's"


async def test_a_cancelled_caller_leaves_the_others_their_vectors() -> None:
    client = Recording(gate=asyncio.Event())
    b = batcher(client, in_flight=1)
    first = asyncio.ensure_future(b.embed(["first"]))
    await until(lambda: len(client.requests) == 1)  # "first" is out; the next two wait
    doomed = asyncio.ensure_future(b.embed(["doomed"]))
    kept = asyncio.ensure_future(b.embed(["kept"]))
    await asyncio.sleep(0)
    doomed.cancel()
    assert client.gate is not None
    client.gate.set()
    assert as_lists(await first) == vectors_of(["first"])
    assert as_lists(await kept) == vectors_of(["kept"])
    assert client.requests == [["first"], ["kept"]]


async def test_questions_share_embedding_requests_over_http(
    api_key: str, services: ServicesFactory
) -> None:
    """Eight questions start together; embeddings are slow enough (200 ms) that the first
    two requests are still out when the others' texts arrive, so those must wait and
    go together. How much batching a whole run gets is measured by ``bench.speed``."""
    questions = bundled_questions(8)
    brain = ScriptedBrain({q: 3 for q in questions})
    latency = Latency(generate=0.01, coherence=0.01, embed=0.2)
    with OpenAIStub(brain, latency=latency) as stub:
        settings = stub_settings(stub)
        outs = await asyncio.gather(*(run_question(services, q, settings) for q in questions))
        assert [out["score"] for out in outs] == [3] * len(questions)
        requests = stub.of_kind("embed")
        texts = [t for r in requests for t in r.texts]
        # three valid answers each; the failing fourth repeats one, so it is cached
        assert len(texts) == len(set(texts)) == 3 * len(questions), "each text embedded once"
        assert max(len(r.texts) for r in requests) > 1, "questions' texts share requests"
        assert len(requests) < len(texts)


class OneBadVector(Recording):
    """Vectors by text, except a NaN vector for any text containing ``bad``."""

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = await super().aembed_documents(texts)
        nan = [float("nan")] * 8
        return [nan if "bad" in t else v for t, v in zip(texts, vectors, strict=True)]


async def test_a_bad_vector_fails_only_its_caller() -> None:
    client = OneBadVector()
    b = batcher(client)
    good, bad = await asyncio.gather(b.embed(["fine"]), b.embed(["bad"]), return_exceptions=True)
    assert isinstance(bad, MalformedReply) and "not finite" in str(bad)
    assert as_lists(good) == vectors_of(["fine"])
    assert client.requests == [["fine", "bad"]], "one request; the bad vector is not retried"
