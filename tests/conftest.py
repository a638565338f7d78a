"""Shared fixtures. Every test is offline: connecting anywhere but loopback fails."""

from __future__ import annotations

import ipaddress
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench import reference
from aidanbench.services import OpenAIServices, ServicesFactory, default_services
from aidanbench.testing import OpenAIStub, ScriptedBrain

REPO = Path(__file__).resolve().parents[1]
REFERENCE_RUN = reference.published_run()

KEY_VARIABLES = ("OPENAI_API_KEY", "AIDANBENCH_TEST_KEY")
TEST_KEY = "sk-test-0000-not-a-real-key"


def pytest_configure(config: pytest.Config) -> None:
    """Let Ctrl-C reach the commands the tests start and interrupt.

    A non-interactive shell starts a background job (``cmd &``) with SIGINT ignored, an
    ignored signal stays ignored across ``exec``, and Python installs no Ctrl-C handler
    when it starts with SIGINT ignored: the tests that send SIGINT to a run (and expect
    it to stop, say how to resume and exit 130) would then see it ignored. A handler set
    here is reset to the default in every child, as a terminal's Ctrl-C would find it.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _loopback(address: Any) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
        if host in ("localhost",):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return True  # unix sockets


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse any connection that would leave this machine."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise ConnectionRefusedError(f"test tried to reach {address!r} (offline tests)")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _loopback(address):
            raise ConnectionRefusedError(f"test tried to reach {address!r} (offline tests)")
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(autouse=True)
def fresh_default_services() -> None:
    """Each test starts with a ``default_services`` that knows no endpoint: stub servers
    get free ports, and a port an earlier test's stub used would otherwise find that
    stub's scores and vectors' length."""
    default_services.forget()


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed width, so rich lays tables out the same everywhere."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A recognisable fake key in every variable the settings may name."""
    for name in KEY_VARIABLES:
        monkeypatch.setenv(name, TEST_KEY)
    return TEST_KEY


@pytest.fixture
def reference_run() -> Path:
    """The published reference run, bundled with the package (``aidanbench.reference``)."""
    return REFERENCE_RUN


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """A local OpenAI-compatible server with the default scripted brain."""
    with OpenAIStub(ScriptedBrain()) as server:
        yield server


@pytest.fixture(params=["httpx", "aiohttp"])
async def services(request: pytest.FixtureRequest) -> AsyncIterator[ServicesFactory]:
    """Both client stacks: the graph's default (``ChatOpenAI`` on httpx) and the command
    line's (``OpenAIChat`` on aiohttp)."""
    if request.param == "httpx":
        yield default_services
        return
    factory = OpenAIServices("aiohttp", chat="openai")
    yield factory
    await factory.aclose()
