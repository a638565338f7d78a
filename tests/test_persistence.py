"""Checkpointed runs: SQLite persistence, and exact resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from aidanbench.core.settings import Settings
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain
from aidanbench.testing.fakes import brain_services

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
        deadline = time.monotonic() + 60
        while stub.count("generate") < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
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
