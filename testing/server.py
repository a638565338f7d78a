"""``OpenAIStub``: a real OpenAI-compatible HTTP server on 127.0.0.1 for tests and demos.

Mocks that patch the HTTP client stop intercepting when its transport changes, and fake chat
models skip what matters (request bodies, retries, timeouts, connection pools); a real socket
exercises it all, offline. Each request has its own thread, so latencies overlap as a remote
API's do and the benchmark's concurrency is measured, not simulated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from .batches import BatchStore
from .brain import Brain, Kind, ScriptedBrain
from .faults import FaultHook
from .handler import Draft, Handler, Reset, StubServer

_JOIN_TIMEOUT = 5.0


@dataclass(frozen=True)
class Latency:
    """Seconds each kind of request waits in its handler thread before the answer."""

    generate: float = 0.0
    coherence: float = 0.0
    similarity: float = 0.0
    embed: float = 0.0
    other: float = 0.0

    def for_kind(self, kind: Kind) -> float:
        """The delay for ``kind``."""
        delay: float = getattr(self, kind)
        return delay


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it; times are ``time.monotonic()`` seconds. ``status`` is
    ``None`` for a reset connection; ``attempt`` is 0 for requests refused before being counted
    (bad JSON, unknown path)."""

    kind: Kind
    method: str
    path: str
    model: str | None
    body: Any
    headers: dict[str, str]
    started: float
    ended: float
    status: int | None = None
    attempt: int = 0
    prompt: str = ""
    texts: tuple[str, ...] = ()
    response: Any = None


class OpenAIStub:
    """A local OpenAI-compatible server answering from a ``Brain``.

    Use ``with OpenAIStub() as stub:`` or ``start()``/``stop()``; point clients at
    ``stub.base_url``. ``brain``, ``latency`` and ``faults`` may be replaced while it runs.
    ``api_key`` makes it answer 401, with OpenAI's body, to requests without that bearer token.
    It serves any model name, listing ``models`` and every model asked for so far; a
    ``catalogue`` (id to ``shutdown_date``, ``YYYY-MM-DD`` or None) answers as OpenAI does
    today: those models only, with their shutdown dates, 404 ``model_not_found`` for others.
    ``list_models=False`` plays a server without ``GET /v1/models``, ``"refused"`` a gateway
    answering it 401; ``models_page`` pages that list as OpenAI does (``after``). The Batch API
    (``testing.batches``) completes a batch ``batch_seconds`` after its creation;
    ``batch_api=False`` plays an endpoint without one (404)."""

    def __init__(
        self,
        brain: Brain | None = None,
        *,
        latency: Latency | None = None,
        faults: FaultHook | None = None,
        api_key: str | None = None,
        models: Sequence[str] = (),
        batch_seconds: float = 0.0,
        batch_api: bool = True,
        catalogue: Mapping[str, str | None] | None = None,
        list_models: bool | Literal["refused"] = True,
        models_page: int | None = None,
    ) -> None:
        self.brain: Brain = brain if brain is not None else ScriptedBrain()
        self.latency = latency if latency is not None else Latency()
        self.faults = faults
        self.api_key = api_key
        self.models = tuple(models)
        self.batch_seconds = batch_seconds
        self.batch_store = BatchStore() if batch_api else None
        self.catalogue = None if catalogue is None else dict(catalogue)
        self.list_models = list_models
        self.models_page = models_page
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._attempts: dict[tuple[Kind, str], int] = {}
        self._server: StubServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread (idempotent)."""
        if self._server is not None:
            return self
        self._stopping = threading.Event()
        server = StubServer(("127.0.0.1", 0), Handler, self)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"openai-stub-{server.server_address[1]}",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Stop accepting, cut open connections and hangs short, release the port."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(_JOIN_TIMEOUT)
        server.join_handlers(_JOIN_TIMEOUT)
        self._server = self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is accepting connections."""
        return self._server is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (a new one after each ``start``)."""
        if self._server is None:
            raise RuntimeError("OpenAIStub is not running; call start() first")
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the server root."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, what OpenAI clients take as ``base_url``."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every finished request, in completion order. Each is recorded just before its response
        is sent, so a client holding its answer (or error) finds the request here."""
        with self._lock:
            return list(self._records)

    def of_kind(self, kind: Kind | None = None) -> list[RecordedRequest]:
        """The finished requests of one kind, or all."""
        return [r for r in self.requests if kind is None or r.kind == kind]

    def count(self, kind: Kind | None = None) -> int:
        """How many requests (of ``kind``, or all) have finished."""
        return len(self.of_kind(kind))

    def asked(self, kind: Kind | None = None) -> int:
        """How many chat and embedding requests (of ``kind``, or all) came: what a run pays for."""
        return sum(r.method == "POST" for r in self.of_kind(kind))

    def max_concurrency(self, kind: Kind | None = None) -> int:
        """The most requests (of ``kind``, or all) that were in the server at once."""
        chosen = self.of_kind(kind)
        events = sorted([(r.started, 1) for r in chosen] + [(r.ended, -1) for r in chosen])
        best = level = 0
        for _, step in events:  # at equal times -1 sorts first: touching is not overlap
            level += step
            best = max(best, level)
        return best

    def clear(self) -> None:
        """Forget recorded requests and attempt counters."""
        with self._lock:
            self._records.clear()
            self._attempts.clear()

    def _next_attempt(self, kind: Kind, key: str) -> int:
        with self._lock:
            attempt = self._attempts.get((kind, key), 0) + 1
            self._attempts[(kind, key)] = attempt
            return attempt

    def _record(
        self,
        draft: Draft,
        *,
        method: str,
        path: str,
        headers: dict[str, str],
        started: float,
        status: int | None,
        response: Any,
    ) -> None:
        record = RecordedRequest(
            kind=draft.kind,
            method=method,
            path=path,
            model=draft.model,
            body=draft.body,
            headers=headers,
            started=started,
            ended=time.monotonic(),
            status=status,
            attempt=draft.attempt,
            prompt=draft.prompt,
            texts=draft.texts,
            response=response,
        )
        with self._lock:
            self._records.append(record)

    def _served_models(self) -> dict[str, str | None]:
        if self.catalogue is not None:
            return dict(sorted(self.catalogue.items()))
        with self._lock:
            seen = {r.model for r in self._records if r.model}
        return dict.fromkeys(sorted(seen | set(self.models)))

    def _serves(self, model: str) -> bool:
        """Whether a request for ``model`` is answered (else 404 ``model_not_found``)."""
        return self.catalogue is None or model in self.catalogue

    def _wait(self, seconds: float) -> None:
        """Sleep, but give up (and drop the request) as soon as ``stop()`` is called."""
        if seconds > 0 and self._stopping.wait(seconds):
            raise Reset
