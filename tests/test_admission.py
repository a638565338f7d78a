"""Questions in flight: every question by default, up to the memory ceiling; a number
given (``--concurrency N``, ``RunSpec.concurrency``) overrides it.

The witness is the server: each chain has at most one generate request out at a time, so
the most generate requests it saw at once is the number of chains in flight. Generation
is slow here (0.3 s) and the rest fast, so every chain admitted is seen at once.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidanbench.cli.main import build_parser, main
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import Progress, RunSpec, admission, run
from aidanbench.runner.local import drive_local
from aidanbench.runner.tasks import Task
from aidanbench.services import OpenAIServices
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags, stub_settings

QUESTIONS = bundled_questions(5)
MODELS = ("m1", "m2", "m3")
CHAINS = len(QUESTIONS) * len(MODELS)  # 15: more than the old default of 8


@pytest.fixture
def slow_stub() -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 1 for q in QUESTIONS})
    with OpenAIStub(brain, latency=Latency(generate=0.3, coherence=0.01, embed=0.01)) as stub:
        yield stub


def run_args(stub: OpenAIStub, run_dir: Path, *extra: str) -> list[str]:
    models = [a for m in MODELS for a in ("--model", m)]
    where = ["--run-dir", str(run_dir), *stub_flags(stub.base_url)]
    return ["run", *models, "--questions", str(len(QUESTIONS)), *where, *extra]


def recorded(run_dir: Path) -> tuple[object, object]:
    """What the session's metadata records: questions in flight, and whether the run
    decided it."""
    last = json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]
    return last["concurrency"], last["concurrency_automatic"]


def test_the_command_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    assert main(run_args(slow_stub, tmp_path / "run")) == 0
    assert slow_stub.max_concurrency("generate") == CHAINS
    assert recorded(tmp_path / "run") == (CHAINS, True)


def test_the_default_stops_at_the_memory_ceiling(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission, "MEMORY_BUDGET_BYTES", 6 * admission.BYTES_PER_CHAIN)
    assert main(run_args(slow_stub, tmp_path / "run")) == 0
    assert slow_stub.max_concurrency("generate") == 6
    assert recorded(tmp_path / "run") == (6, True)


def test_a_given_concurrency_overrides_the_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    assert main(run_args(slow_stub, tmp_path / "run", "--concurrency", "3")) == 0
    assert slow_stub.max_concurrency("generate") == 3
    assert recorded(tmp_path / "run") == (3, False)


async def test_the_python_api_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    settings = {f"{role}base_url": slow_stub.base_url for role in ("", "judge_", "embedding_")}
    settings |= {f"{role}api_key_env": TEST_KEY_VARIABLE for role in ("", "judge_", "embedding_")}
    spec = RunSpec(models=list(MODELS), questions=QUESTIONS, run_dir=tmp_path, settings=settings)
    assert spec.concurrency is None
    await run(spec, progress=Progress(out=io.StringIO(), live=False))
    assert slow_stub.max_concurrency("generate") == CHAINS


async def test_the_demo_drive_keeps_every_question_in_flight_by_default(
    slow_stub: OpenAIStub, tmp_path: Path, api_key: str
) -> None:
    """``aidanbench demo`` leaves ``--concurrency`` unset (a session of the run engine:
    every question in flight); ``drive_local`` alone, without the session, defaults to
    the session's in-flight count too."""
    assert build_parser(only="demo").parse_args(["demo"]).concurrency is None
    tasks = [
        Task(stub_settings(slow_stub.base_url, model=m, cache_path=str(tmp_path / "c")), q, 1)
        for m in MODELS
        for q in QUESTIONS
    ]
    async with OpenAIServices("aiohttp", chat="openai") as factory:
        lines = await drive_local(
            tasks, tmp_path, progress=Progress(out=io.StringIO(), live=False), services=factory
        )
    assert len(lines) == CHAINS
    assert slow_stub.max_concurrency("generate") == CHAINS


def test_the_ceiling_comes_from_memory_per_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    per_chain, budget = admission.BYTES_PER_CHAIN, admission.MEMORY_BUDGET_BYTES
    monkeypatch.setattr(admission, "physical_memory", lambda: 64 * budget)
    assert admission.ceiling() == budget // per_chain
    assert admission.chains_in_flight(None, 10) == 10
    assert admission.chains_in_flight(None, 10**7) == budget // per_chain
    assert admission.chains_in_flight(5, 10**7) == 5, "a number given is not capped"
    monkeypatch.setattr(admission, "physical_memory", lambda: 2 * budget)
    assert admission.ceiling() == budget // 2 // per_chain, "a quarter of a small machine"
    monkeypatch.setattr(admission, "physical_memory", lambda: None)
    assert admission.ceiling() == budget // per_chain
    assert admission.chains_in_flight(None, 10**7, remote=True) == admission.REMOTE_IN_FLIGHT


def test_a_session_adapts_its_window_only_when_no_number_is_given() -> None:
    """No ``--concurrency``: the window follows the event loop; a number given, or a
    LangGraph server running the chains, keeps a fixed one."""
    chosen = admission.admission(None, 100)
    assert chosen.adaptive and chosen.most == 100
    assert chosen.window == admission.START_IN_FLIGHT
    assert not admission.admission(5, 100).adaptive
    assert admission.admission(5, 100).window == 5
    assert not admission.admission(None, 100, remote=True).adaptive
