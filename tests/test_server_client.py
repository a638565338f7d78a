"""``aidanbench run --server`` when the server has a bad day: one failed question, a dead server.

A real ``langgraph dev`` of its own (the last test kills it), driven by the real
``aidanbench`` command as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain, when
from aidanbench.testing.faults import Fault

from .conftest import REPO
from .test_bad_input import AIDANBENCH, run_args
from .test_server import Server, langgraph_dev

pytestmark = [pytest.mark.server, pytest.mark.e2e]

QUESTIONS = bundled_questions(3)
BROKEN = QUESTIONS[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with langgraph_dev(tmp_path_factory.mktemp("langgraph-dev")) as running:
        yield running


def client(stub: OpenAIStub, run_dir: Path, server: Server) -> subprocess.Popen[str]:
    args = [*run_args(stub, run_dir, "--max-retries", "0"), "--server", server.url]
    args[args.index("--questions") + 1] = str(len(QUESTIONS))
    return subprocess.Popen(
        [AIDANBENCH, *args],
        env={**os.environ, "COLUMNS": "200"},  # the client needs no key
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


EMPTY_CHOICES = Fault(
    status=200,
    body={"id": "x", "object": "chat.completion", "created": 0, "model": "m1", "choices": []},
)


def test_one_failed_question_does_not_stop_the_others(server: Server, tmp_path: Path) -> None:
    brain = ScriptedBrain({q: 3 for q in QUESTIONS}, default_ending="coherence")
    with OpenAIStub(brain, faults=when("generate", EMPTY_CHOICES, match=BROKEN)) as stub:
        proc = client(stub, tmp_path / "r", server)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "athrow" not in err
    assert "1 question(s) stopped on an error" in err
    assert [line for line in err.splitlines() if BROKEN[:40] in line and " — " in line]
    lines = [json.loads(x) for x in (tmp_path / "r" / "questions.jsonl").read_text().splitlines()]
    by_question = {line["question"]: line for line in lines}
    assert by_question[BROKEN]["stop_reason"] == "error"
    assert [by_question[q]["score"] for q in QUESTIONS if q != BROKEN] == [3, 3]


def test_dead_server_is_one_line_with_a_resume_hint(server: Server, tmp_path: Path) -> None:
    brain = ScriptedBrain({q: 30 for q in QUESTIONS}, default_ending="coherence")
    with OpenAIStub(brain, latency=Latency(generate=0.05, coherence=0.05)) as stub:
        proc = client(stub, tmp_path / "r", server)
        deadline = time.monotonic() + 120
        while stub.count("generate") < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()
        started = time.monotonic()
        _, err = proc.communicate(timeout=180)
        waited = time.monotonic() - started
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "lost the LangGraph server" in lines[0] and "run the same command again" in lines[0]
    print(f"client exited {waited:.1f} s after the server was killed")
