"""Shared fixtures. Every test is offline (pytest-socket allows 127.0.0.1 and localhost
only), and a test of the fast tier starts no process."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench import reference
from aidanbench.record.results import QuestionResult
from aidanbench.services import OpenAIServices, ServicesFactory, default_services, retry
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.published import published_chains

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


E2E = "e2e"
"""The marker of the end-to-end tier (deselected by default, run by ``pytest -m e2e``)."""

IN_PROCESS_COMMANDS = (("git", "rev-parse", "HEAD"), ("uname", "-p"))
"""Commands an in-process test may still start: a run records its checkout's commit, and
the OpenAI client asks ``platform`` for its headers once per process."""


@pytest.fixture(autouse=True)
def in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fast tier starts no process: a test that starts one fails, asking to be marked
    ``e2e``. (Offline is pytest-socket's, ``--allow-hosts`` in pyproject's ``addopts``:
    a connection beyond loopback fails in every test of either tier.)

    The process still starts, and the test fails at its end: failing inside
    ``Popen`` would reach the code under test as an error it might handle.
    """
    if request.node.get_closest_marker(E2E) is not None:
        yield
        return
    started: list[tuple[Any, ...]] = []
    start = subprocess.Popen.__init__

    def record(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        command = tuple(args) if isinstance(args, list | tuple) else (args,)
        if command not in IN_PROCESS_COMMANDS:
            started.append(command)
        start(self, args, *rest, **options)

    monkeypatch.setattr(subprocess.Popen, "__init__", record)
    yield
    if started:
        pytest.fail(
            f"a test of the fast tier started {len(started)} process(es), the first "
            f"{started[0][:3]!r}: mark it @pytest.mark.{E2E}",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def fresh_default_services() -> None:
    """Each test starts with ``default_services`` as new: no score cached, no limiter.
    The instance lives as long as the process, and a stub server may get a port an
    earlier test's stub used, whose cached scores and vectors' length would then answer
    for it."""
    default_services.forget()


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-offs from 20 ms instead of 0.5 s (``services.retry``), for tests that count
    attempts and what they leave, not how far apart they are."""
    monkeypatch.setattr(retry, "INITIAL_BACKOFF_S", 0.02)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed width, so rich lays tables out the same everywhere."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def chains() -> list[QuestionResult]:
    """The published run's chains, as the stub's brains replay them."""
    return published_chains()


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
