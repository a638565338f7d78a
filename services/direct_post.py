"""The command line's requests sent straight on kept-alive sockets, past the OpenAI client.

On an aiohttp pool the OpenAI client turns every request into an httpx2 request, then an
aiohttp one, and every reply back: the largest share of what a turn's requests cost
(``bench/lab.py``'s ``client-post`` variant, docs/performance.md). ``DirectPost`` sends the same
request (URL, headers, time-out, JSON body) on the pool's own connections to the endpoint
(``services.http1``, which costs a fraction of aiohttp's session; ``bench/lab.py``'s
``aiohttp-post`` variant sends through that session instead), and fails as the client fails:
an error status becomes the client's own status error, a time-out ``APITimeoutError``, any
other failure ``APIConnectionError``.

It leans on three private names (httpx2's ``_transport_for_url``, the OpenAI client's vendored
``AiohttpTransport`` and ``_make_status_error_from_response``); without them, with a default
query string, or on a pool that is not aiohttp without a proxy, requests go through the client.
The connections are the pool's: closing the pool closes them (``connections_of``).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx2
import openai

from aidanbench.services.http1 import ACCEPTED, Connections, Origin

JSON_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""How httpx2 writes a JSON body; built once, as ``json.dumps`` builds one per call."""

DECODED = (b"content-encoding", b"content-length", b"transfer-encoding")
"""Headers describing the body as sent, not as handed over (decoded, whole): left out of the
reply a status error carries."""

REDIRECTS = (301, 302, 303, 307, 308)
"""Statuses the client follows to their ``Location``: such a request is sent again through
aiohttp's session, which follows them as the client does (an endpoint seldom redirects)."""

_CONNECTIONS: weakref.WeakKeyDictionary[httpx2.AsyncClient, Connections] = (
    weakref.WeakKeyDictionary()
)


def aiohttp_transport(pool: httpx2.AsyncClient, url: str) -> Any:
    """The OpenAI client's aiohttp transport ``pool`` sends requests for ``url`` on, or None
    when it has none (another transport, a proxy, other library versions)."""
    try:  # private names of httpx2 and of the OpenAI client's aiohttp extra
        from openai._vendor.httpx_aiohttp.transport import AiohttpTransport

        transport = pool._transport_for_url(httpx2.URL(url))
    except (ImportError, AttributeError):  # other versions than these were written for
        return None
    if not isinstance(transport, AiohttpTransport) or transport.proxy is not None:
        return None
    return transport


def aiohttp_session(pool: httpx2.AsyncClient, url: str) -> aiohttp.ClientSession | None:
    """The aiohttp session ``pool`` sends requests for ``url`` on (made now if the pool has sent
    none yet), or None when it has none."""
    transport = aiohttp_transport(pool, url)
    if transport is None:
        return None
    if not isinstance(transport.client, aiohttp.ClientSession):
        transport.client = transport.get_client()
    return transport.client


def connections_of(pool: httpx2.AsyncClient, transport: Any) -> Connections:
    """The kept-alive connections of ``pool`` (its TLS context and keep-alive expiry), closed
    when the pool is: whoever owns the pool closes them with it."""
    found = _CONNECTIONS.get(pool)
    if found is None:
        expiry = getattr(getattr(transport, "limits", None), "keepalive_expiry", None)
        found = _CONNECTIONS[pool] = Connections(transport.ssl_context, expiry)
        closing = pool.aclose

        async def aclose() -> None:
            found.close()
            await closing()

        pool.aclose = aclose  # type: ignore[method-assign]
    return found


def request_headers(client: openai.AsyncOpenAI) -> dict[str, str]:
    """The headers the OpenAI client sends with a first attempt (the only one it makes)."""
    headers = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
    headers["Authorization"] = f"Bearer {client.api_key}"
    headers["X-Stainless-Retry-Count"] = "0"
    timeout = client.timeout
    read = timeout.read if isinstance(timeout, httpx2.Timeout) else timeout
    if read is not None:
        headers["X-Stainless-Read-Timeout"] = str(read)
    return headers


def client_timeout(client: openai.AsyncOpenAI) -> aiohttp.ClientTimeout:
    """The client's time-outs as its aiohttp transport passes them on."""
    timeout = client.timeout
    limits = timeout if isinstance(timeout, httpx2.Timeout) else httpx2.Timeout(timeout)
    return aiohttp.ClientTimeout(
        sock_connect=limits.connect, sock_read=limits.read, connect=limits.pool
    )


def head_bytes(headers: Mapping[str, str]) -> bytes:
    """``headers`` as request header lines."""
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")


@dataclass(frozen=True)
class DirectPost:
    """POSTs JSON to one endpoint as ``client`` would, on ``connections``."""

    client: openai.AsyncOpenAI
    """The OpenAI client whose request this is; it makes the status errors."""
    session: aiohttp.ClientSession
    headers: Mapping[str, str]
    timeout: aiohttp.ClientTimeout
    base_url: str
    """The client's base URL (ending with ``/``), read once: the client's property builds it
    anew on every read."""
    connections: Connections | None = None
    """The pool's own connections (None: through ``session``, the ``aiohttp-post`` variant)."""
    _targets: dict[str, tuple[Origin, bytes]] = field(default_factory=dict)

    @classmethod
    def of(cls, client: openai.AsyncOpenAI, pool: httpx2.AsyncClient | None) -> DirectPost | None:
        """``client``'s requests on ``pool``'s connections, or None (module docstring)."""
        base_url = str(client.base_url)
        transport = None if pool is None else aiohttp_transport(pool, base_url)
        if pool is None or transport is None or client.api_key == "" or client.default_query:
            return None
        if not hasattr(client, "_make_status_error_from_response"):
            return None
        session = aiohttp_session(pool, base_url)
        assert session is not None
        headers, timeout = request_headers(client), client_timeout(client)
        return cls(client, session, headers, timeout, base_url, connections_of(pool, transport))

    def url(self, path: str) -> str:
        """The URL of ``path`` under the client's base URL."""
        return self.base_url + path

    async def post(self, path: str, body: Mapping[str, Any]) -> bytes:
        """The body of a 2xx reply; the OpenAI client's errors otherwise."""
        data = JSON_BODY.encode(body).encode("utf-8")
        try:
            if self.connections is None:
                status, headers, content = await self._through_session(self.url(path), data)
            else:
                status, headers, content = await self._sent(path, data)
                if status in REDIRECTS and any(k.lower() == b"location" for k, _ in headers):
                    status, headers, content = await self._through_session(self.url(path), data)
        except aiohttp.ServerTimeoutError as exc:
            raise openai.APITimeoutError(request=httpx2.Request("POST", self.url(path))) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise openai.APIConnectionError(request=httpx2.Request("POST", self.url(path))) from exc
        if not 200 <= status < 300:
            kept = [(k, v) for k, v in headers if k.lower() not in DECODED]
            request = httpx2.Request("POST", self.url(path))
            response = httpx2.Response(status, headers=kept, content=content, request=request)
            raise self.client._make_status_error_from_response(response)
        return content

    async def _sent(self, path: str, data: bytes) -> tuple[int, Any, bytes]:
        """The reply on the pool's connections, within the client's read time-out as a
        whole (each attempt has that deadline too, set before it: ``services.retry``)."""
        origin, head = self._target(path)
        request = b"%s%d\r\n\r\n%s" % (head, len(data), data)
        try:
            async with asyncio.timeout(self.timeout.sock_read) as deadline:
                reply = await origin.post(request)
        except TimeoutError as exc:
            if not deadline.expired():  # a socket's own time-out: a connection failure
                raise
            raise openai.APITimeoutError(request=httpx2.Request("POST", self.url(path))) from exc
        return reply.status, reply.headers, reply.body

    def _target(self, path: str) -> tuple[Origin, bytes]:
        """The origin of ``path`` and the head of a POST to it up to its ``Content-Length``
        value, made once per path."""
        found = self._targets.get(path)
        if found is None:
            assert self.connections is not None
            url = self.url(path)
            parts = urlsplit(url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rsplit("@", 1)[-1]
            head = f"POST {target} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
            head += head_bytes(self.headers) + ACCEPTED + b"Content-Length: "
            found = self._targets[path] = (self.connections.origin(url), head)
        return found

    async def _through_session(self, url: str, data: bytes) -> tuple[int, Any, bytes]:
        """The reply through aiohttp's session (the ``aiohttp-post`` variant)."""
        async with self.session.post(
            url, data=data, headers=self.headers, timeout=self.timeout
        ) as reply:
            content = await reply.read()
            return reply.status, reply.raw_headers, content
