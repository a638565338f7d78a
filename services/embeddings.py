"""Embeddings from an OpenAI-compatible endpoint, placed by index and checked.

The API gives each vector an ``index``; nothing promises that ``data`` lists them in input
order, and langchain-openai's ``OpenAIEmbeddings`` takes them in list order. With texts of
several questions batched into one request, a reordered reply then hands one question's vector
to another, and the scores are silently wrong. This client places every vector by its
``index``. Texts go as strings, never token ids (which many servers reject).

A reply with no list of embeddings, or a repeated or invalid index, is refused as a whole
(``MalformedReply``). A single unusable vector is reported for its own text only, so it fails
only the question it belongs to.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import openai
from langchain_core.embeddings import Embeddings

from aidanbench.core.errors import MalformedReply
from aidanbench.services.direct_post import DirectPost
from aidanbench.services.usage import RoleLedger, call_site, embedding_usage, text_tokens

Vector = np.ndarray
"""One embedding as float32."""


def check_vector(value: Any) -> tuple[Vector | None, str | None]:
    """The vector as float32, or None and why it is unusable."""
    if value is None:
        return None, "missing vector"
    try:
        if isinstance(value, str):  # base64 float32, as asked for
            vector = np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
        else:  # a server that ignores encoding_format sends floats
            vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, binascii.Error):
        return None, "vector is not a list of numbers"
    if vector.ndim != 1 or vector.size == 0:
        return None, "empty vector"
    if not np.all(np.isfinite(vector)):
        return None, "vector is not finite"
    if not np.any(vector):
        return None, "vector is all zeros"
    return vector, None


def common_size(vectors: Sequence[Vector | None], expected: int | None) -> int | None:
    """``expected`` when known, else the length most vectors share (None on a tie: then no
    length can be trusted)."""
    if expected is not None:
        return expected
    counts = Counter(v.size for v in vectors if v is not None).most_common(2)
    if not counts or (len(counts) == 2 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def field(value: Any, name: str) -> Any:
    """``value``'s ``name``, of a JSON object or the OpenAI client's typed reply (else None)."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def place_by_index(data: Any, count: int) -> list[Any]:
    """The ``embedding`` of each item of ``data`` at its ``index`` (None where absent)."""
    if not isinstance(data, list):
        raise MalformedReply("embeddings reply has no data list")
    placed: list[Any] = [None] * count
    seen: set[int] = set()
    for item in data:
        index = field(item, "index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise MalformedReply(f"embedding index {index!r} is not one of 0..{count - 1}")
        if index in seen:
            raise MalformedReply(f"embedding index {index} appears twice")
        seen.add(index)
        placed[index] = field(item, "embedding")
    return placed


def checked_vectors(
    reply: Any, count: int, expected_size: int | None = None
) -> list[tuple[Vector | None, str | None]]:
    """Each of ``count`` texts' vector from an embeddings reply, or why it is unusable."""
    placed = place_by_index(field(reply, "data"), count)
    return sized([check_vector(value) for value in placed], expected_size)


def sized(
    checked: list[tuple[Vector | None, str | None]], expected_size: int | None
) -> list[tuple[Vector | None, str | None]]:
    """``checked`` with each vector of another length than ``common_size`` refused."""
    size = common_size([v for v, _ in checked], expected_size)
    return [
        (None, f"vector of length {v.size}, expected {size}")
        if v is not None and v.size != size
        else (v, reason)
        for v, reason in checked
    ]


def embed_all(
    client: openai.OpenAI, model: str, texts: list[str], per_request: int = 512
) -> np.ndarray:
    """Vectors of ``texts`` (rows in order) from a synchronous client, for tools outside the
    graph; ``MalformedReply`` if any vector is unusable."""
    rows: list[Vector] = []
    for start in range(0, len(texts), per_request):
        chunk = texts[start : start + per_request]
        try:
            reply = client.embeddings.create(model=model, input=chunk, encoding_format="base64")
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            raise MalformedReply(f"unreadable embeddings reply ({type(exc).__name__})") from exc
        size = rows[0].size if rows else None
        for vector, reason in checked_vectors(reply, len(chunk), size):
            if vector is None:
                raise MalformedReply(reason or "unusable vector")
            rows.append(vector)
    return np.stack(rows).astype(np.float64)


class OpenAICompatibleEmbeddings(Embeddings):
    """``Embeddings`` over ``client.embeddings.create``, vectors placed by ``index``.

    The batcher uses ``aembed_indexed`` (a reason for each unusable vector); the ``Embeddings``
    methods raise ``MalformedReply`` for any unusable vector.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        usage: RoleLedger | None = None,
        direct: DirectPost | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.usage = usage
        """Where each request's usage is recorded (the run's ledger), if anywhere."""
        self.direct = direct
        """Sends requests straight through the aiohttp pool; None: through the client."""

    async def create(self, texts: list[str]) -> Any:
        """The reply to one request for ``texts``: typed, or JSON when sent directly."""
        if self.direct is None:
            return await self.client.embeddings.create(
                model=self.model, input=texts, encoding_format="base64"
            )
        body = {"model": self.model, "input": texts, "encoding_format": "base64"}
        return json.loads(await self.direct.post("embeddings", body))

    async def aembed_indexed(
        self, texts: list[str], expected_size: int | None = None
    ) -> list[tuple[Vector | None, str | None]]:
        """One (vector, None) or (None, reason) per text, in the order of ``texts``."""
        where = call_site(None)  # a batch serves many questions: no thread
        usage = self.usage
        request = None if usage is None else usage.sent(where, sum(map(text_tokens, texts)), 0)
        try:
            try:
                reply = await self.create(texts)
            except (ValueError, LookupError, TypeError, AttributeError) as exc:
                raise MalformedReply(f"unreadable embeddings reply ({type(exc).__name__})") from exc
        except BaseException as exc:
            if usage is not None and request is not None:
                usage.failed(request, exc)
            raise
        if usage is not None:
            usage.replied(embedding_usage(field(reply, "usage")), where, request, "".join(texts))
        return checked_vectors(reply, len(texts), expected_size)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of ``texts`` in order; ``MalformedReply`` if any is unusable."""
        vectors = []
        for vector, reason in await self.aembed_indexed(texts):
            if vector is None:
                raise MalformedReply(reason or "unusable vector")
            vectors.append(vector.tolist())
        return vectors

    async def aembed_query(self, text: str) -> list[float]:
        """The vector of one text."""
        return (await self.aembed_documents([text]))[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError("use aembed_documents: the client is asynchronous")

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError("use aembed_query: the client is asynchronous")
