"""The command line's requests sent straight through aiohttp, past the OpenAI client.

On an aiohttp pool (``services.clients``) the OpenAI client turns every request into its
options model, an httpx2 request, then (its transport adapter) an aiohttp request, and
every reply back the same way: about 0.45 ms of CPU per request on top of aiohttp's own
0.2 ms, the largest share of what a turn's requests cost (``bench/lab.py``'s
``client-post`` variant measures it). ``DirectPost`` sends the same request on the same
pool: the pool's aiohttp session and connections, the client's URL, headers (key, user
agent, platform headers, retry count, read time-out) and time-outs, the same JSON body.
It fails as the client fails: a reply with an error status becomes the status error the
client itself makes of it (``RateLimitError`` with its ``Retry-After``,
``NotFoundError``...), a time-out ``APITimeoutError``, any other failure to get a reply
``APIConnectionError``.

It leans on three private names (httpx2's ``_transport_for_url``, the OpenAI client's
vendored ``AiohttpTransport`` and its ``_make_status_error_from_response``); with a
version lacking any of them, or a client with a default query string (which
``DirectPost`` does not add), requests go through the client as before.

Only a pool whose requests to the endpoint go to aiohttp with no proxy has a session to
share (``aiohttp_session``); any other (httpx, a proxy from the environment, a test's
transport) gets None, and its clients post through the OpenAI client.
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
"""How httpx2 (under the OpenAI client) writes a JSON body; built once, as ``json.dumps``
builds an encoder on every call given any option."""

DECODED = (b"content-encoding", b"content-length", b"transfer-encoding")
"""Headers that describe the body as sent, not as aiohttp hands it over (decompressed,
whole): left out of the reply a status error carries."""


def aiohttp_session(pool: httpx2.AsyncClient, url: str) -> aiohttp.ClientSession | None:
    """The aiohttp session ``pool`` sends requests for ``url`` on (made now if the pool
    has sent none yet), or None when it sends them otherwise."""
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
    """The headers the OpenAI client sends with a first attempt (it makes no other:
    ``max_retries=0``)."""
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

    @classmethod
    def of(cls, client: openai.AsyncOpenAI, pool: httpx2.AsyncClient | None) -> DirectPost | None:
        """``client``'s requests sent on ``pool``'s aiohttp session, or None when the pool
        has none to share (see the module docstring)."""
        session = None if pool is None else aiohttp_session(pool, str(client.base_url))
        if session is None or client.api_key == "" or client.default_query:
            return None
        if not hasattr(client, "_make_status_error_from_response"):
            return None
        return cls(client, session, request_headers(client), client_timeout(client))

    def url(self, path: str) -> str:
        """The URL of ``path`` under the client's base URL (which ends with ``/``)."""
        return f"{self.client.base_url}{path}"

    async def post(self, path: str, body: Mapping[str, Any]) -> bytes:
        """The body of a 2xx reply to ``body`` sent to ``path``; the OpenAI client's
        errors otherwise."""
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
