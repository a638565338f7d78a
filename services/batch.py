"""Chat requests through a provider's batch API (OpenAI's protocol), resumable.

Where nothing waits for each reply (``aidanbench calibrate``, ``rescore --judge-model``), judge
calls can go through the batch API at half the price. The live question loop is never batched:
each judgment there decides the next step.

A batch is paid for once it is created, so its id is recorded in the score cache (keyed by the
sha256 of the request file) before anything else happens: a command killed while it waits
resumes polling it instead of creating a second one. A collected batch is marked so; asking
again for the same requests makes a new batch under the next free number of that key. One
window is left: a command killed between the provider's acceptance of a batch and the local
write of its id would create another on its next run.

Each HTTP call goes through the judge endpoint's limiter and ``services.retry``, except the
creation of a batch, which is not idempotent: it is made once (a failure is raised, and the
next run tries again: no id was recorded).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import openai
from langchain_core.messages import AIMessage

from aidanbench.core.errors import MalformedReply
from aidanbench.record.lines import numbered_lines
from aidanbench.services import retry
from aidanbench.services.cache import ScoreCache
from aidanbench.services.chat import read_reply
from aidanbench.services.embeddings import field
from aidanbench.services.limits import EndpointLimiter

ENDPOINT: Final = "/v1/chat/completions"
"""The endpoint every request of a batch goes to."""

COMPLETION_WINDOW: Final = "24h"
"""The only completion window OpenAI offers."""

FINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})
"""Batch statuses after which nothing more will be answered."""


@dataclass(frozen=True)
class BatchRequest:
    """One chat completion of a batch."""

    custom_id: str
    """Unique within the batch; the reply carries it back."""
    body: Mapping[str, Any]
    """The request body, as it would be sent to ``/chat/completions``."""


@dataclass(frozen=True)
class BatchResult:
    """What the batch answered to one request: a reply, or why there is none."""

    message: AIMessage | None
    error: str | None = None


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the last poll saw it (what progress shows)."""

    batch_id: str
    status: str
    completed: int
    failed: int
    total: int
    resumed: bool
    """The batch was created by an earlier, interrupted command."""


class NoBatchApi(Exception):
    """The endpoint answered 404 where the Batch API lives (nothing was created or spent)."""


def request_file(requests: Sequence[BatchRequest]) -> bytes:
    """The JSONL file of a batch: one request object per line, in the given order."""
    lines = [
        json.dumps(
            {"custom_id": r.custom_id, "method": "POST", "url": ENDPOINT, "body": dict(r.body)},
            ensure_ascii=False,
            sort_keys=True,
        )
        for r in requests
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def read_results(text: str) -> dict[str, list[BatchResult]]:
    """The results in an output or error file, by ``custom_id``, every line of an id in file
    order (a provider may repeat one; which line counts is the reader's choice). A status 200
    line holds a chat completion; anything else is an error naming it; non-JSON lines are skipped.
    """
    found: dict[str, list[BatchResult]] = {}
    for _, raw in numbered_lines(text):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
            found.setdefault(line["custom_id"], []).append(_result(line))
    return found


def _result(line: dict[str, Any]) -> BatchResult:
    response = line.get("response")
    error = line.get("error")
    status = field(response, "status_code")
    body = field(response, "body")
    if error:
        return BatchResult(None, f"batch error: {field(error, 'message') or error}")
    if status == 200:
        try:
            return BatchResult(read_reply(json.dumps(body).encode()))
        except MalformedReply as exc:
            return BatchResult(None, str(exc))
    detail = field(field(body, "error"), "message") if body else None
    return BatchResult(None, f"status {status}: {detail}")


def batch_key(data: bytes, number: int) -> str:
    """The cache key of the ``number``-th batch made of this request file."""
    return f"{hashlib.sha256(data).hexdigest()}:{number}"


@dataclass
class BatchClient:
    """Runs batches on one OpenAI-compatible endpoint, recording them in ``cache``."""

    client: openai.AsyncOpenAI
    cache: ScoreCache
    limiter: EndpointLimiter
    timeout: float | None
    max_retries: int
    poll_seconds: float = 30.0
    progress: Callable[[BatchStatus], None] | None = None

    async def _call(self, request: Callable[[], Awaitable[Any]], *, retried: bool = True) -> Any:
        return await retry.call(
            self.limiter,
            request,
            limit_s=self.timeout,
            max_retries=self.max_retries if retried else 0,
        )

    async def run(
        self,
        requests: Sequence[BatchRequest],
        *,
        on_created: Callable[[str], None] | None = None,
    ) -> tuple[str, dict[str, list[BatchResult]]]:
        """Submit ``requests`` as one batch (or resume the uncollected one submitted for exactly
        these requests), wait for it, and return its id and every request's results (the output
        file's lines, then the error file's; an unanswered request's names the final status).

        ``on_created`` is called once, right after a new batch is recorded (the caller counts
        its requests as sent: they are paid for from then on).
        """
        data = request_file(requests)
        number = 0
        while (found := self.cache.batch(batch_key(data, number))) is not None and found[1]:
            number += 1
        key = batch_key(data, number)
        resumed = found is not None
        if found is None:
            batch_id = await self._create(data)
            self.cache.put_batch(key, batch_id)
            if on_created is not None:
                on_created(batch_id)
        else:
            batch_id = found[0]
        batch = await self._wait(batch_id, resumed)
        results: dict[str, list[BatchResult]] = {}
        for name in ("output_file_id", "error_file_id"):
            file_id = field(batch, name)
            if file_id:
                for custom_id, lines in read_results(await self._download(str(file_id))).items():
                    results.setdefault(custom_id, []).extend(lines)
        status = field(batch, "status")
        for request in requests:
            results.setdefault(
                request.custom_id,
                [BatchResult(None, f"not answered by batch {batch_id} ({status})")],
            )
        self.cache.put_batch(key, batch_id, collected=True)
        return batch_id, results

    async def _download(self, file_id: str) -> str:
        content = await self._call(lambda: self.client.files.content(file_id))
        return str(content.text)

    async def _create(self, data: bytes) -> str:
        try:
            uploaded = await self._call(
                lambda: self.client.files.create(file=("judge-batch.jsonl", data), purpose="batch")
            )
            batch = await self._call(
                lambda: self.client.batches.create(
                    input_file_id=uploaded.id,
                    endpoint=ENDPOINT,
                    completion_window=COMPLETION_WINDOW,
                ),
                retried=False,
            )
        except openai.NotFoundError as exc:
            raise NoBatchApi(f"{exc.request.method} {exc.request.url.path}") from None
        return str(batch.id)

    async def _wait(self, batch_id: str, resumed: bool) -> Any:
        while True:
            batch = await self._call(lambda: self.client.batches.retrieve(batch_id))
            counts = field(batch, "request_counts")
            status = str(field(batch, "status"))
            if self.progress is not None:
                self.progress(
                    BatchStatus(
                        batch_id=batch_id,
                        status=status,
                        completed=int(field(counts, "completed") or 0),
                        failed=int(field(counts, "failed") or 0),
                        total=int(field(counts, "total") or 0),
                        resumed=resumed,
                    )
                )
            if status in FINAL_STATES:
                return batch
            await asyncio.sleep(self.poll_seconds)
