"""Kept-alive HTTP/1.1 connections for JSON POSTs: what ``DirectPost`` sends on.

A request through aiohttp's session builds a request object, a response object, a stream,
header multidicts, timers per read and a task to write the body: most of what a request
costs beyond the round trip itself (``bench.turn_parts``, docs/performance.md), and a run
sends two requests a turn. Here a request is one write of its head and body on a kept-alive socket,
and its reply is parsed from what the socket delivers: the status line, the headers, a
body of ``Content-Length`` bytes, chunked, or read to the end of the connection, decoded
from gzip or deflate as aiohttp decodes it.

A connection is reused only after a whole reply that keeps it open (HTTP/1.1 without
``Connection: close``, its body framed), and not after ``keepalive_s`` idle (a server
closing an idle connection as it is reused would fail the request). One that fails,
times out or is cancelled is closed, never reused. A reply that never comes whole is a
``ConnectionError`` (connecting fails with an ``OSError``); the caller bounds the time
(``DirectPost``, which turns both into the OpenAI client's errors).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import zlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HEAD_MOST = 64 * 1024
"""Bytes a reply's status line and headers may take."""

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Reply:
    """A reply as it came: its status, its headers (names as sent) and its decoded body."""

    status: int
    headers: Headers
    body: bytes


class _Connection(asyncio.Protocol):
    """One socket and the reply being read on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Reply] | None = None
        self.lost = False
        self.idle_since = 0.0
        self.reusable = False
        self._head: tuple[int, Headers, bool] | None = None
        """The reply's status, headers and whether its version keeps the connection."""
        self._length: int | None = None
        self._chunked = False
        self._body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None and not self.waiter.done():
            try:
                self._read()
            except ConnectionError as exc:
                self.waiter.set_exception(exc)

    def eof_received(self) -> bool:
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._end()

    def expect(self, waiter: asyncio.Future[Reply]) -> None:
        """Read the next reply into ``waiter``."""
        self.waiter, self._head, self._body = waiter, None, bytearray()
        self._length, self._chunked, self.reusable = None, False, False

    def _end(self) -> None:
        """The server closed: a reply read to the end of the connection is whole; any other
        reply still expected is cut."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self._head is not None and self._length is None and not self._chunked:
            body, self.buffer = bytes(self.buffer), bytearray()
            self._finish(body, keep=False)
        else:
            waiter.set_exception(ConnectionError("the server closed the connection mid-reply"))

    def _read(self) -> None:
        """Move the reply on with what the buffer holds (``ConnectionError``: not HTTP)."""
        while self._head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > HEAD_MOST:
                    raise ConnectionError("a reply's headers exceed 64 KiB")
                return
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            status, headers, keeps = _parse_head(head)
            if 100 <= status < 200:  # an interim reply: the real one follows
                continue
            self._head = (status, headers, keeps)
            framing = {name.lower(): value for name, value in headers}
            if status in (204, 304):
                self._length = 0
            elif b"chunked" in framing.get(b"transfer-encoding", b"").lower():
                self._chunked = True
            elif b"content-length" in framing:
                try:
                    self._length = int(framing[b"content-length"])
                except ValueError as exc:
                    raise ConnectionError("a reply's Content-Length is not a number") from exc
        if self._chunked:
            if self._read_chunks():
                body, self._body = bytes(self._body), bytearray()
                self._finish(body, keep=not self.buffer)
        elif self._length is not None and len(self.buffer) >= self._length:
            body = bytes(self.buffer[: self._length])
            del self.buffer[: self._length]
            self._finish(body, keep=not self.buffer)

    def _read_chunks(self) -> bool:
        """Move chunks from the buffer to the body; whether the last chunk and the trailers
        have come."""
        while True:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return False
            size_text = bytes(self.buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as exc:
                raise ConnectionError("a reply's chunk size is not a number") from exc
            if size == 0:  # the last chunk, then trailers (if any) and a blank line
                trailers_end = self.buffer.find(b"\r\n\r\n", line_end)
                if trailers_end < 0:
                    return False
                del self.buffer[: trailers_end + 4]
                return True
            start = line_end + 2
            if len(self.buffer) < start + size + 2:
                return False
            self._body += self.buffer[start : start + size]
            del self.buffer[: start + size + 2]

    def _finish(self, body: bytes, keep: bool) -> None:
        """Answer the waiter with the reply whose body is ``body`` (as sent); an idle
        connection keeps no reply's bytes (an embeddings reply is megabytes)."""
        assert self._head is not None and self.waiter is not None
        status, headers, keeps = self._head
        if not self.buffer:
            self.buffer = bytearray()
        try:
            body = decoded(body, headers)
        except zlib.error as exc:
            self.waiter.set_exception(ConnectionError(f"a reply's body cannot be decoded: {exc}"))
            return
        self.reusable = keep and keeps and not self.lost
        self.waiter.set_result(Reply(status, headers, body))


def _parse_head(head: bytes) -> tuple[int, Headers, bool]:
    """A reply's status, headers and whether its version and headers keep the connection."""
    status_line, *lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP/1 reply: {status_line[:40]!r}")
    headers: Headers = []
    keeps = parts[0] == b"HTTP/1.1"
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ConnectionError(f"a reply's header line has no colon: {line[:40]!r}")
        value = value.strip()
        headers.append((name.strip(), value))
        if name.strip().lower() == b"connection" and b"close" in value.lower():
            keeps = False
    return int(parts[1]), headers, keeps


def decoded(body: bytes, headers: Headers) -> bytes:
    """``body`` decoded from the ``Content-Encoding`` the reply names (gzip or deflate, what
    ``ACCEPTED`` asks for); as it came otherwise."""
    named = (value for name, value in headers if name.lower() == b"content-encoding")
    encoding = next(named, b"").strip().lower()
    if encoding in (b"gzip", b"x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == b"deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:  # a raw deflate stream, as some servers send
            return zlib.decompress(body, -zlib.MAX_WBITS)
    return body


ACCEPTED = b"Accept-Encoding: gzip, deflate\r\n"
"""The encodings asked for: those aiohttp's session asks for without brotli."""


@dataclass
class Origin:
    """Kept-alive connections to one scheme, host and port."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    keepalive_s: float | None
    """Seconds a connection may stay idle and still be reused (None: any)."""
    idle: collections.deque[_Connection] = field(default_factory=collections.deque)
    open: set[_Connection] = field(default_factory=set)

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self.idle:
            connection = self.idle.pop()
            fresh = self.keepalive_s is None or now - connection.idle_since < self.keepalive_s
            if fresh and not connection.lost and not connection.buffer:
                return connection
            self._close(connection)
        server_hostname = self.host if self.tls is not None else None
        _, connection = await loop.create_connection(
            _Connection, self.host, self.port, ssl=self.tls, server_hostname=server_hostname
        )
        self.open.add(connection)
        return connection

    async def post(self, request: bytes) -> Reply:
        """The reply to ``request`` (a whole POST: head and body)."""
        connection = await self._connection()
        done = False
        try:
            waiter: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            connection.expect(waiter)
            assert connection.transport is not None
            connection.transport.write(request)
            reply = await waiter
            done = connection.reusable
            return reply
        finally:
            connection.waiter = None
            if done:
                connection.idle_since = asyncio.get_running_loop().time()
                self.idle.append(connection)
            else:
                self._close(connection)

    def _close(self, connection: _Connection) -> None:
        self.open.discard(connection)
        if connection.transport is not None:
            connection.transport.abort()

    def close(self) -> None:
        """Close every connection, idle or in use."""
        for connection in list(self.open):
            self._close(connection)
        self.idle.clear()


@dataclass
class Connections:
    """Every origin's connections of one HTTP pool."""

    tls: ssl.SSLContext | None
    keepalive_s: float | None
    origins: dict[tuple[str, str, int], Origin] = field(default_factory=dict)

    def origin(self, url: str) -> Origin:
        """The connections to ``url``'s origin."""
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        found = self.origins.get((scheme, host, port))
        if found is None:
            tls = self.tls if scheme == "https" else None
            found = self.origins[(scheme, host, port)] = Origin(host, port, tls, self.keepalive_s)
        return found

    def close(self) -> None:
        """Close every connection of every origin."""
        for origin in self.origins.values():
            origin.close()
