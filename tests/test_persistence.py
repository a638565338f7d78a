"""Checkpointed runs: SQLite persistence, and exact resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from aidanbench.core.settings import Settings
from aidanbench.testing import Fault, Latency, OpenAIStub, RequestInfo, ScriptedBrain
from aidanbench.testing.fakes import brain_services

from .commands import interrupt_after
from .conftest import REPO
from .graphs import comparable, finish, run_question

Q = "Name a use for a paperclip."


def without_embed_calls(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``comparable`` records without the embedding call counts.

    A vector embedded just before the kill is already in the score cache (written as it
    arrives), so the resumed turn reads it instead of asking again and its record shows
    no embedding call where the clean run shows one; every other field must match.
    """
    out = comparable(answers)
    for record in out:
        record["calls"].pop("embed", None)
    return out


def child(run_dir: Path, stub: OpenAIStub, api_key: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AIDANBENCH_TEST_KEY": api_key}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.run_question", str(run_dir), stub.base_url, Q, *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("pipeline", [True, False])
def test_sigkill_mid_question_then_resume(tmp_path: Path, api_key: str, pipeline: bool) -> None:
    extra = () if pipeline else ("--no-pipeline",)
    brain = ScriptedBrain({Q: 12})
    latency = Latency(generate=0.04, coherence=0.06, embed=0.02)
    with OpenAIStub(brain, latency=latency) as stub:
        (tmp_path / "clean").mkdir()
        clean = finish(child(tmp_path / "clean", stub, api_key, *extra))
        assert clean["score"] == 12

        run_dir = tmp_path / "killed"
        run_dir.mkdir()
        stub.clear()
        proc = child(run_dir, stub, api_key, *extra)
        interrupt_after(proc, stub, 6, signal.SIGKILL)
        assert proc.returncode == -signal.SIGKILL
        judged_before = stub.count("coherence")
        assert 0 < judged_before < 13, "the kill must land in the middle of the question"

        resumed = finish(child(run_dir, stub, api_key, *extra))
    answers = resumed["answers"]
    assert [a["index"] for a in answers] == list(range(1, 14)), "no answer lost or duplicated"
    assert without_embed_calls(answers) == without_embed_calls(clean["answers"])
    for got, want in zip(answers, clean["answers"], strict=True):
        assert got["calls"]["embed"]["calls"] <= want["calls"]["embed"]["calls"]
    assert resumed["score"] == clean["score"] == 12
    assert resumed["stop_reason"] == "novelty"


async def test_sqlite_thread_survives_reopen(tmp_path: Path) -> None:
    db = str(tmp_path / "checkpoints.sqlite")
    services = brain_services(ScriptedBrain({Q: 3}))
    async with AsyncSqliteSaver.from_conn_string(db) as saver:
        first = await run_question(services, Q, Settings(), checkpointer=saver)
    async with AsyncSqliteSaver.from_conn_string(db) as saver:
        again = await run_question(services, Q, Settings(), checkpointer=saver)
    assert again["answers"] == first["answers"]
    assert again["score"] == 3


# --- a SIGKILL loses at most the step in flight (synchronous durability) ----------------


def killing_at(count: int, victim: list[subprocess.Popen[str]]) -> Callable[..., Fault | None]:
    """A fault hook that SIGKILLs the client at its ``count``-th embedding request.

    The request is cut (never answered), so that text is not embedded by the killed run.
    """
    seen = [0]
    lock = threading.Lock()

    def hook(info: RequestInfo) -> Fault | None:
        if info.kind != "embed" or not victim:
            return None
        with lock:
            seen[0] += 1
            if seen[0] != count:
                return None
        victim[0].send_signal(signal.SIGKILL)
        victim.clear()
        return Fault(reset=True)

    return hook


def asked_again(stub: OpenAIStub, kind: str) -> Counter[str]:
    """Prompts of ``kind`` the server received more than once, with their extra count."""
    seen = Counter(r.prompt for r in stub.of_kind(kind))  # type: ignore[arg-type]
    return Counter({prompt: n - 1 for prompt, n in seen.items() if n > 1})


def embedded_texts(stub: OpenAIStub) -> Counter[str]:
    """How often each text was embedded (answered embedding requests only)."""
    return Counter(t for r in stub.of_kind("embed") if r.status == 200 for t in r.texts)


@pytest.mark.e2e
@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "sequential"])
def test_a_killed_run_redoes_at_most_the_step_in_flight(
    tmp_path: Path, api_key: str, pipeline: bool
) -> None:
    """Killed at its 6th embedding request, the resumed run re-asks only that step's calls.

    Checkpoint writes are slowed (a slow disk), so a step that started before its
    predecessor's checkpoint was committed loses that predecessor too.
    """
    extra = ("--slow-commits", "0.05", *(() if pipeline else ("--no-pipeline",)))
    brain = ScriptedBrain({Q: 10}, ending={Q: "coherence"})  # every prompt distinct
    latency = Latency(generate=0.01, coherence=0.01, embed=0.01)
    victim: list[subprocess.Popen[str]] = []
    with OpenAIStub(brain, latency=latency, faults=killing_at(6, victim)) as stub:
        run_dir = tmp_path / "killed"
        run_dir.mkdir()
        proc = child(run_dir, stub, api_key, *extra)
        victim.append(proc)
        proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, "the kill must land mid-question"
        killed_at = stub.count("generate")
        resumed = finish(child(run_dir, stub, api_key, *extra))
        generate_again = asked_again(stub, "generate")
        judge_again = asked_again(stub, "coherence")
        embedded = embedded_texts(stub)

    assert resumed["score"] == 10 and resumed["stop_reason"] == "coherence"
    assert [a["index"] for a in resumed["answers"]] == list(range(1, 12))
    assert 5 <= killed_at < 11
    # the step in flight holds at most one generation and one coherence judgement
    assert sum(generate_again.values()) <= 1, generate_again
    assert sum(judge_again.values()) <= 1, judge_again
    # each answer embedded once across the restart (the cut request was never answered)
    answers = {a["answer"] for a in resumed["answers"]}
    assert set(embedded) == answers
    assert max(embedded.values()) == 1, embedded.most_common(3)
