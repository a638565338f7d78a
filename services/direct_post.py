"""The command line's requests sent straight through aiohttp, past the OpenAI client.

On an aiohttp pool the OpenAI client turns every request into an httpx2 request, then an
aiohttp one, and every reply back: the largest share of what a turn's requests cost
(``bench/lab.py``'s ``client-post`` variant, docs/performance.md). ``DirectPost`` sends the same
request (URL, headers, time-outs, JSON body) on the same aiohttp session, and fails as the
client fails: an error status becomes the client's own status error, a time-out
``APITimeoutError``, any other failure ``APIConnectionError``.

It leans on three private names (httpx2's ``_transport_for_url``, the OpenAI client's vendored
``AiohttpTransport`` and ``_make_status_error_from_response``); without them, with a default
query string, or on a pool that is not aiohttp without a proxy, requests go through the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2
import openai

JSON_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""How httpx2 writes a JSON body; built once, as ``json.dumps`` builds one per call."""

DECODED = (b"content-encoding", b"content-length", b"transfer-encoding")
"""Headers describing the body as sent, not as aiohttp hands it over (decompressed, whole):
left out of the reply a status error carries."""


def aiohttp_session(pool: httpx2.AsyncClient, url: str) -> aiohttp.ClientSession | None:
    """The aiohttp session ``pool`` sends requests for ``url`` on (made now if the pool has sent
    none yet), or None when it has none."""
    try:  # private names of httpx2 and of the OpenAI client's aiohttp extra
        from openai._vendor.httpx_aiohttp.transport import AiohttpTransport

        transport = pool._transport_for_url(httpx2.URL(url))
    except (ImportError, AttributeError):  # other versions than these were written for
        return None
    if not isinstance(transport, AiohttpTransport) or transport.proxy is not None:
        return None
    if not isinstance(transport.client, aiohttp.ClientSession):
        transport.client = transport.get_client()
    return transport.client


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


@dataclass(frozen=True)
class DirectPost:
    """POSTs JSON to one endpoint as ``client`` would, on ``session``."""

    client: openai.AsyncOpenAI
    """The OpenAI client whose request this is; it makes the status errors."""
    session: aiohttp.ClientSession
    headers: Mapping[str, str]
    timeout: aiohttp.ClientTimeout
    base_url: str
    """The client's base URL (ending with ``/``), read once: the client's property builds it
    anew on every read."""

    @classmethod
    def of(cls, client: openai.AsyncOpenAI, pool: httpx2.AsyncClient | None) -> DirectPost | None:
        """``client``'s requests on ``pool``'s aiohttp session, or None (module docstring)."""
        session = None if pool is None else aiohttp_session(pool, str(client.base_url))
        if session is None or client.api_key == "" or client.default_query:
            return None
        if not hasattr(client, "_make_status_error_from_response"):
            return None
        headers, timeout = request_headers(client), client_timeout(client)
        return cls(client, session, headers, timeout, str(client.base_url))

    def url(self, path: str) -> str:
        """The URL of ``path`` under the client's base URL."""
        return self.base_url + path

    async def post(self, path: str, body: Mapping[str, Any]) -> bytes:
        """The body of a 2xx reply; the OpenAI client's errors otherwise."""
        url = self.url(path)
        data = JSON_BODY.encode(body).encode("utf-8")
        try:
            async with self.session.post(
                url, data=data, headers=self.headers, timeout=self.timeout
            ) as reply:
                content = await reply.read()
                status, headers = reply.status, reply.raw_headers
        except aiohttp.ServerTimeoutError as exc:
            raise openai.APITimeoutError(request=httpx2.Request("POST", url)) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise openai.APIConnectionError(request=httpx2.Request("POST", url)) from exc
        if not 200 <= status < 300:
            kept = [(k, v) for k, v in headers if k.lower() not in DECODED]
            response = httpx2.Response(
                status, headers=kept, content=content, request=httpx2.Request("POST", url)
            )
            raise self.client._make_status_error_from_response(response)
        return content
