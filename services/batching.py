"""Embedding requests coalesced across the questions of a run.

Every turn of every question embeds one new answer; sent one by one, each pays the full client
cost and one slot of the endpoint's requests-per-minute budget. One embeddings request takes
many texts, so the batcher sends what is waiting together:

* A call goes out at the end of the current event-loop step (so calls made in the same step
  share it) while fewer than ``MAX_BATCHES_IN_FLIGHT`` batches are in flight; otherwise it
  waits for the next free batch, at most one embedding round trip, which the judge (the slower
  scorer) covers. A full batch's worth of waiting texts goes at once: waiting would not make it
  fuller, and thousands of chains in flight would otherwise all wait on two batches at a time.
* Each batch holds one slot of the endpoint limiter and is bounded by the request timeout.
* A bad vector fails only the caller whose text it belongs to (``services.embeddings``).
* A batch failing with an error not worth retrying (a 400 for one bad text, say) or an
  unreadable reply is split, each caller's texts sent on their own, so one question's bad
  answer never fails another. The endpoint's errors (time-outs, 5xx) reach every caller.
* Retries are per caller (``services.retry``): a retried attempt queues again and shares a
  request with whatever waits then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from langchain_core.embeddings import Embeddings

from aidanbench.core.errors import MalformedReply
from aidanbench.services.embeddings import (
    OpenAICompatibleEmbeddings,
    Vector,
    check_vector,
    sized,
)
from aidanbench.services.errors import RETRYABLE_STATUSES, status_of
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.refusals import REFUSED_STATUSES
from aidanbench.services.retry import with_retries

MAX_BATCHES_IN_FLIGHT = 2
"""Batches one client may have in flight before calls start to wait and coalesce."""

MAX_TEXTS_PER_BATCH = 128
"""Texts per request: well under OpenAI's limits of inputs (2,048) and tokens per request, for
answers of a few kB."""


@dataclass
class _Call:
    texts: list[str]
    future: asyncio.Future[list[Vector]]


@dataclass
class EmbeddingBatcher:
    """Coalesces concurrent ``embed`` calls to one embeddings client (``client`` is built on
    first use, so a missing key is reported by the node that needs it)."""

    client: Callable[[], Embeddings]
    limiter: EndpointLimiter
    max_in_flight: int = MAX_BATCHES_IN_FLIGHT
    max_texts: int = MAX_TEXTS_PER_BATCH
    timeout: float | None = None
    """Seconds one request may take, all of it (None: unbounded)."""
    max_retries: int = 0
    """Retries of a caller's retryable failure (``services.retry``)."""
    size: Callable[[], int | None] = lambda: None
    """The vector length already established for this model (by the cache), if any."""
    requests: int = 0
    """Embedding requests sent so far (for tests and the benchmark)."""
    _waiting: list[_Call] = field(default_factory=list)
    _sending: set[asyncio.Task[None]] = field(default_factory=set)
    _scheduled: bool = False
    _texts: int = 0
    """Texts of the waiting calls."""

    async def embed(self, texts: list[str]) -> list[Vector]:
        """Vectors of ``texts``, in order, sent alone or with other callers' texts."""
        if not texts:
            return []
        return await with_retries(
            lambda: self._attempt(texts), self.max_retries, self.limiter.waits
        )

    async def _attempt(self, texts: list[str]) -> list[Vector]:
        loop = asyncio.get_running_loop()
        call = _Call(list(texts), loop.create_future())
        self._waiting.append(call)
        self._texts += len(call.texts)
        self._schedule(loop)
        return await call.future

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._scheduled and self._may_send():
            self._scheduled = True
            loop.call_soon(self._start_batch)

    def _may_send(self) -> bool:
        """Whether a batch may go now: a batch is free, or a full one waits."""
        return bool(self._waiting) and (
            len(self._sending) < self.max_in_flight or self._texts >= self.max_texts
        )

    def _start_batch(self) -> None:
        self._scheduled = False
        if not self._may_send():
            return
        batch: list[_Call] = []
        size = 0
        while self._waiting and (not batch or size + len(self._waiting[0].texts) <= self.max_texts):
            call = self._waiting.pop(0)
            self._texts -= len(call.texts)
            if not call.future.done():  # its question was cancelled meanwhile
                batch.append(call)
                size += len(call.texts)
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._finished)
        self._schedule(asyncio.get_running_loop())

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._schedule(asyncio.get_running_loop())

    async def _send(self, batch: list[_Call]) -> None:
        try:
            await self._deliver(batch)
        except Exception as exc:
            if len(batch) > 1 and _caller_specific(exc):
                await asyncio.gather(*(self._send([call]) for call in batch))
                return
            for call in batch:
                if not call.future.done():
                    call.future.set_exception(exc)

    async def _deliver(self, batch: list[_Call]) -> None:
        unique = list(dict.fromkeys(t for call in batch for t in call.texts))
        checked = await self._fetch(unique)
        by_text = dict(zip(unique, checked, strict=True))
        for call in batch:
            if call.future.done():
                continue
            results = [by_text[t] for t in call.texts]
            reasons = [reason for vector, reason in results if vector is None]
            if reasons:
                call.future.set_exception(MalformedReply(reasons[0]))
            else:
                call.future.set_result([vector for vector, _ in results if vector is not None])

    async def _fetch(self, texts: list[str]) -> list[tuple[Vector | None, str | None]]:
        """One request for ``texts``, in an endpoint slot and within the time-out."""
        client = self.client()
        async with self.limiter.slot(), asyncio.timeout(self.timeout):
            self.requests += 1
            return await self._request(client, texts)

    async def _request(
        self, client: Embeddings, texts: list[str]
    ) -> list[tuple[Vector | None, str | None]]:
        """Each text's vector or why it is unusable, whatever kind of client this is."""
        if isinstance(client, OpenAICompatibleEmbeddings):
            return await client.aembed_indexed(texts, self.size())
        vectors = await client.aembed_documents(texts)
        if len(vectors) != len(texts):
            raise MalformedReply(f"{len(vectors)} vectors for {len(texts)} texts")
        checked = [check_vector(v) for v in vectors]
        size = self.size()
        return checked if size is None else sized(checked, size)


def _caller_specific(exc: Exception) -> bool:
    """Whether ``exc`` may be caused by one caller's texts rather than by the endpoint: a 4xx
    not worth retrying that is no refusal (``REFUSED_STATUSES``), or an unreadable reply (one
    text may break the provider's encoder)."""
    if isinstance(exc, MalformedReply):
        return True
    status = status_of(exc)
    if status is None or not 400 <= status < 500:
        return False
    return status not in REFUSED_STATUSES | RETRYABLE_STATUSES
