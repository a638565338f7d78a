"""The socket side of ``OpenAIStub``: a threading HTTP/1.1 server and its handler.

One thread per keep-alive connection; each request is validated, counted, offered to the fault
hook, delayed and answered from the stub's brain.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from . import protocol
from .brain import Kind, classify
from .faults import RequestInfo, content_key, error_body

if TYPE_CHECKING:
    from .server import OpenAIStub

_log = logging.getLogger("aidanbench.testing.server")

_BATCH = re.compile(r"/v1/batches/([^/]+)")
_FILE_CONTENT = re.compile(r"/v1/files/([^/]+)/content")

_ABORT = struct.pack("ii", 1, 0)
"""SO_LINGER on, timeout 0: ``close()`` sends a RST instead of a FIN."""


@dataclass
class Draft:
    """The parts of a record learnt while the request is handled."""

    kind: Kind = "other"
    model: str | None = None
    body: Any = None
    attempt: int = 0
    prompt: str = ""
    texts: tuple[str, ...] = ()
    extra_headers: dict[str, str] = field(default_factory=dict)
    drip: float = 0.0


@dataclass(frozen=True)
class Raw:
    """A response body sent as these exact bytes (a malformed reply)."""

    data: bytes
    content_type: str


class Reset(Exception):
    """Abandon the request: close the socket without a response."""


class StubServer(ThreadingHTTPServer):
    """Tracks its handler threads and sockets, which ``ThreadingHTTPServer`` forgets for daemon
    threads, so ``stop()`` ends keep-alive connections instead of leaving them served."""

    daemon_threads = True
    request_queue_size = 256  # the default 5 drops bursts of connects (1 s SYN retry)

    def __init__(self, address: tuple[str, int], handler: type[Handler], stub: OpenAIStub):
        self.stub = stub
        self._handlers: dict[threading.Thread, socket.socket] = {}  # open connections
        self._all_threads: list[threading.Thread] = []  # every handler thread not yet joined
        self._handlers_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"openai-stub-{self.server_address[1]}-connection",
            daemon=True,
        )
        with self._handlers_lock:
            self._handlers[thread] = request
            self._all_threads = [t for t in self._all_threads if t.is_alive()] + [thread]
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._handlers_lock:
                self._handlers.pop(threading.current_thread(), None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.debug("stub connection from %s failed", client_address, exc_info=True)

    def close_connections(self) -> None:
        with self._handlers_lock:
            sockets = list(self._handlers.values())
        for sock in sockets:
            # Abortive close (no TIME_WAIT left holding the port); OSError: already closed.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
                sock.shutdown(socket.SHUT_RDWR)

    def join_handlers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._handlers_lock:
            threads = list(self._all_threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class Handler(BaseHTTPRequestHandler):
    """One connection's requests. HTTP/1.1 keep-alive, because the openai client pools
    connections and a server that closes after each answer would hide pool bugs."""

    protocol_version = "HTTP/1.1"
    server: StubServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle plus delayed ACKs
        # can add ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("stub %s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        started = time.monotonic()
        stub = self.server.stub
        draft = Draft()
        path = urlsplit(self.path).path
        status: int | None
        try:
            raw = self._read_body()
            status, payload = self._route(stub, method, path, raw, draft)
        except protocol.HTTPError as exc:
            status, payload = exc.status, error_body(exc.status, exc.message)
        except Reset:
            status, payload = None, None
        except Exception as exc:  # a brain or hook bug: show it to the client as a 500
            _log.exception("stub failed answering %s %s", method, path)
            status, payload = 500, error_body(500, f"{type(exc).__name__}: {exc}")
        stub._record(
            draft,
            method=method,
            path=path,
            headers=self._headers(),
            started=started,
            status=status,
            response=payload,
        )
        if status is None:
            self._reset()
        else:
            self._send(status, payload, draft.extra_headers, draft.drip)

    def _route(
        self, stub: OpenAIStub, method: str, path: str, raw: bytes, draft: Draft
    ) -> tuple[int, Any]:
        expected = None if stub.api_key is None else f"Bearer {stub.api_key}"
        given = self.headers.get("Authorization")
        if expected is not None and given != expected:
            return 401, protocol.unauthorized(given)
        if method == "GET" and path == "/v1/models" and stub.list_models == "refused":
            return 401, protocol.unauthorized(given)
        if method == "GET" and path == "/v1/models" and stub.list_models:
            after = parse_qs(urlsplit(self.path).query).get("after", [None])[0]
            return 200, protocol.models_list(stub._served_models(), stub.models_page, after)
        batch_answer = self._batch_route(stub, method, path, raw, draft)
        if batch_answer is not None:
            return batch_answer
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/embeddings"):
            raise protocol.HTTPError(404, f"Invalid URL ({method} {path})")
        draft.body = body = protocol.parse_json(raw)
        draft.model = model = protocol.model_of(body)
        if path == "/v1/embeddings":
            draft.kind, draft.texts = "embed", protocol.embedding_inputs(body)
        else:
            draft.prompt = protocol.chat_prompt(body)
            draft.kind = classify(draft.prompt)
        if not stub._serves(model):
            return 404, protocol.model_not_found(model)
        key = content_key(model, draft.prompt, draft.texts)
        draft.attempt = stub._next_attempt(draft.kind, key)
        info = RequestInfo(draft.kind, model, draft.prompt, draft.texts, draft.attempt, key, body)
        fault = stub.faults(info) if stub.faults is not None else None
        if fault is not None:
            stub._wait(fault.delay)
            draft.drip = fault.drip
            if fault.reset:
                raise Reset
            if fault.raw is not None:
                return fault.status or 200, Raw(fault.raw, fault.content_type)
            if fault.status is not None:
                draft.extra_headers.update(fault.headers)
                if fault.echo_key:
                    given = self.headers.get("Authorization", "")
                    return fault.status, error_body(fault.status, f"Invalid key: {given}")
                return fault.status, fault.body or error_body(fault.status)
        stub._wait(stub.latency.for_kind(draft.kind))
        status, payload = self._answer(stub, draft, model, body, key)
        if fault is not None and fault.rewrite is not None:
            payload = fault.rewrite(payload, info)
        return status, payload

    def _batch_route(
        self, stub: OpenAIStub, method: str, path: str, raw: bytes, draft: Draft
    ) -> tuple[int, Any] | None:
        """The Batch API's files and batches (``testing.batches``), or None for any other
        path. Fault hooks do not apply here: a batch's lines are answered by the brain."""
        store = stub.batch_store
        if store is None:
            return None
        if method == "POST" and path == "/v1/files":
            return 200, store.upload(self.headers.get("Content-Type", ""), raw)
        if method == "POST" and path == "/v1/batches":
            draft.body = body = protocol.parse_json(raw)
            return 200, store.create(body)
        found = _BATCH.fullmatch(path)
        if method == "GET" and found is not None:
            return 200, store.retrieve(stub, found.group(1))
        found = _FILE_CONTENT.fullmatch(path)
        if method == "GET" and found is not None:
            return 200, Raw(store.content(found.group(1)), "application/octet-stream")
        return None

    def _answer(
        self, stub: OpenAIStub, draft: Draft, model: str, body: dict[str, Any], key: str
    ) -> tuple[int, Any]:
        if draft.kind == "embed":
            vectors = stub.brain.embed(model, draft.texts)
            return 200, protocol.embeddings_response(
                vectors,
                model,
                draft.texts,
                encoding_format=body.get("encoding_format"),
                dimensions=body.get("dimensions"),
            )
        reply = stub.brain.chat(draft.kind, model, draft.prompt, body)
        options = body.get("stream_options")
        return 200, protocol.chat_completion(
            reply,
            model,
            draft.prompt,
            f"chatcmpl-stub-{key[:12]}-{draft.attempt}",
            stream=bool(body.get("stream")),
            usage_chunk=isinstance(options, dict) and bool(options.get("include_usage")),
        )

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise protocol.HTTPError(411, "send a Content-Length; chunked bodies unsupported")
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any, headers: dict[str, str], drip: float = 0.0) -> None:
        if isinstance(payload, protocol.EventStream):
            data, content_type = payload.data, "text/event-stream"
        elif isinstance(payload, Raw):
            data, content_type = payload.data, payload.content_type
        else:
            data, content_type = json.dumps(payload).encode("utf-8"), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if drip > 0:
                self.wfile.flush()
                for i in range(len(data)):
                    self.server.stub._wait(drip)
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(data)
        except (OSError, Reset):  # the client gave up (timeout) or stop() cut the socket
            self.close_connection = True

    def _reset(self) -> None:
        """Close with SO_LINGER 0, so the client gets a RST instead of any response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
        self.rfile.close()  # drop the makefile reference, or close() would be deferred
        self.connection.close()
