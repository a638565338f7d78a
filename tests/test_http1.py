"""``services.http1``: the kept-alive connections ``DirectPost`` sends on, against a server
in this process that answers each request as scripted, byte for byte, so every way an
HTTP/1.1 reply can be framed, encoded or cut reaches the client as it would from a provider.
(``test_direct_post`` checks the same requests and failures against the OpenAI client.)"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import json
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from aidanbench.services import clients
from aidanbench.services.chat import OpenAIChat
from aidanbench.testing.settings import stub_settings

BODY = json.dumps(
    {"choices": [{"message": {"content": "<answer>a use</answer>"}}], "model": "m"}
).encode()

Answer = Callable[[int], bytes | None]
"""What the server sends for its ``n``-th request (0-based) on any connection; None: it
closes the connection without a reply."""


def framed(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    """A reply with ``Content-Length``."""
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def chunked(body: bytes, *, size: int = 7, trailer: str = "") -> bytes:
    """A chunked reply, in chunks of ``size`` bytes (with a chunk extension), and a trailer."""
    chunks = b"".join(
        b"%x;ext=1\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    )
    end = b"0\r\n" + (f"{trailer}\r\n".encode() if trailer else b"") + b"\r\n"
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + end


@asynccontextmanager
async def server(answer: Answer, *, close_after: bool = False) -> AsyncIterator[dict[str, Any]]:
    """A server on 127.0.0.1 reading each request whole (head and ``Content-Length`` body),
    then writing ``answer(n)`` in pieces (and closing the connection when ``close_after``);
    yields its base URL and what it saw."""
    seen: dict[str, Any] = {"requests": 0, "connections": 0, "heads": []}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                n = seen["requests"]
                seen["requests"] += 1
                seen["heads"].append(head.decode())
                reply = answer(n)
                if reply is None:
                    break
                for i in range(0, len(reply), 50):  # in pieces, as a network delivers
                    writer.write(reply[i : i + 50])
                    await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    seen["url"] = f"http://127.0.0.1:{port}/v1"
    try:
        yield seen
    finally:
        listening.close()


async def replies(
    answer: Answer, count: int, *, close_after: bool = False, between: Any = None
) -> tuple[list[Any], dict[str, Any]]:
    """``count`` chat requests one after another as the command line sends them (``between``
    called with the connections after each); each reply's text, or the exception it raised,
    and what the server saw. Closing the pool must close every connection."""
    async with server(answer, close_after=close_after) as seen:
        config = stub_settings(seen["url"], request_timeout=5.0)
        pool = clients.http_pool(config, "aiohttp", 8)
        chat = clients.model_under_test(config, pool, "openai")
        assert isinstance(chat, OpenAIChat) and chat.direct is not None
        connections = chat.direct.connections
        assert connections is not None, "sent on the pool's own connections"
        got: list[Any] = []
        try:
            for _ in range(count):
                try:
                    got.append((await chat.reply("q")).content)
                except openai.APIError as exc:
                    got.append(exc)
                if between is not None:
                    await between(connections)
        finally:
            await pool.aclose()
        assert all(not origin.open for origin in connections.origins.values())
    return got, seen


ANSWER = "<answer>a use</answer>"


@pytest.mark.parametrize(
    "reply",
    [
        framed(BODY, "Content-Type: application/json"),
        chunked(BODY),
        chunked(BODY, size=1, trailer="X-Trailer: yes"),
        framed(gzip.compress(BODY), "Content-Encoding: gzip"),
        framed(zlib.compress(BODY), "Content-Encoding: deflate"),
        framed(zlib.compress(BODY)[2:-4], "Content-Encoding: deflate"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + framed(BODY),
    ],
    ids=["length", "chunked", "chunked bytewise", "gzip", "deflate", "raw deflate", "100"],
)
async def test_each_framing_reads_the_reply_and_keeps_the_connection(
    api_key: str, reply: bytes
) -> None:
    got, seen = await replies(lambda n: reply, 3)
    assert got == [ANSWER] * 3
    assert seen["connections"] == 1, "one kept-alive connection for all three"
    head = seen["heads"][0]
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Authorization: Bearer {api_key}" in head and "Host: 127.0.0.1:" in head


@pytest.mark.parametrize(
    "reply",
    [
        framed(BODY, "Connection: close"),
        b"HTTP/1.1 200 OK\r\n\r\n" + BODY,  # no length: the body ends with the connection
        b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    ],
    ids=["connection close", "read to the end", "HTTP/1.0"],
)
async def test_a_reply_that_ends_its_connection_is_read_and_not_reused(
    api_key: str, reply: bytes
) -> None:
    got, seen = await replies(lambda n: reply, 2, close_after=True)
    assert got == [ANSWER] * 2
    assert seen["connections"] == 2, "a new connection for the second request"


async def test_an_idle_connection_the_server_closed_is_not_reused(api_key: str) -> None:
    """A server that closes an idle connection (its keep-alive time-out) makes the next
    request open a new one, not fail on the closed one."""

    async def server_closes_idle(connections: Any) -> None:
        for origin in connections.origins.values():
            for connection in origin.idle:
                connection.transport.close()
        await asyncio.sleep(0.05)

    got, seen = await replies(lambda n: framed(BODY), 2, between=server_closes_idle)
    assert got == [ANSWER] * 2
    assert seen["connections"] == 2


async def test_a_connection_idle_past_the_keep_alive_expiry_is_not_reused(api_key: str) -> None:
    async def expire(connections: Any) -> None:
        for origin in connections.origins.values():
            for connection in origin.idle:
                connection.idle_since -= origin.keepalive_s + 1

    got, seen = await replies(lambda n: framed(BODY), 2, between=expire)
    assert got == [ANSWER] * 2
    assert seen["connections"] == 2


@pytest.mark.parametrize(
    "reply",
    [
        None,
        framed(BODY)[:-10],
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        framed(b"not gzip", "Content-Encoding: gzip"),
        chunked(BODY)[:-20],
    ],
    ids=["no reply", "cut mid-body", "not HTTP", "length not a number", "bad gzip", "cut chunk"],
)
async def test_a_reply_that_never_comes_whole_is_a_connection_error(
    api_key: str, reply: bytes | None
) -> None:
    """Each a ``APIConnectionError``, as aiohttp's failures were (retried by
    ``services.retry``), and the next request is answered on a new connection."""
    got, _ = await replies(lambda n: reply if n == 0 else framed(BODY), 2, close_after=True)
    assert type(got[0]) is openai.APIConnectionError, got[0]
    assert got[1] == ANSWER


async def test_a_reply_slower_than_the_time_out_is_a_time_out(api_key: str) -> None:
    """The client's read time-out bounds the whole reply (each attempt's deadline does too,
    from before it: ``services.retry``): ``APITimeoutError``, and the connection is not
    reused."""

    def answer(n: int) -> bytes:
        return framed(BODY)[:-10] if n == 0 else framed(BODY)

    async with server(answer) as seen:
        config = stub_settings(seen["url"], request_timeout=0.3)
        pool = clients.http_pool(config, "aiohttp", 8)
        chat = clients.model_under_test(config, pool, "openai")
        assert isinstance(chat, OpenAIChat)
        try:
            with pytest.raises(openai.APITimeoutError):
                await chat.reply("q")
            assert (await chat.reply("q")).content == ANSWER
        finally:
            await pool.aclose()
    assert seen["connections"] == 2


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` signed by itself, and its key (PEM files)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_an_https_endpoint_is_reached_over_tls_with_its_name_checked(
    api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ``https`` the connections verify the endpoint's certificate against the pool's
    trust (its name included), as aiohttp did: a certificate the pool does not trust is a
    connection error, never a reply."""
    cert, key = self_signed(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(framed(BODY))
                await writer.drain()
        writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=served)
    url = f"https://localhost:{listening.sockets[0].getsockname()[1]}/v1"
    try:
        for trust, expected in ((trusting, ANSWER), (ssl.create_default_context(), None)):
            monkeypatch.setattr(clients, "tls_context", lambda trust=trust: trust)
            config = stub_settings(url)
            pool = clients.http_pool(config, "aiohttp", 8)
            chat = clients.model_under_test(config, pool, "openai")
            assert isinstance(chat, OpenAIChat) and chat.direct is not None
            assert chat.direct.connections is not None
            try:
                if expected is None:
                    with pytest.raises(openai.APIConnectionError):
                        await chat.reply("q")
                else:
                    assert [(await chat.reply("q")).content for _ in range(2)] == [expected] * 2
            finally:
                await pool.aclose()
    finally:
        listening.close()
