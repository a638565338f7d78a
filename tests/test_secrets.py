"""API keys never leave the environment: not in any file a run writes, nor in its output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aidanbench.testing import OpenAIStub, ScriptedBrain, combine, http_error, when

from .commands import run_cli
from .test_cli_run import QUESTIONS, run_args

pytestmark = pytest.mark.e2e

CANARY = "sk-canary-7f3a9c-do-not-leak"


def test_key_appears_nowhere(tmp_path: Path) -> None:
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    faults = combine(
        when("coherence", http_error(401, "Incorrect API key provided"), match=QUESTIONS[1]),
        when("embed", http_error(500), match="Idea 2"),
        when("generate", http_error(503), times=1),
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LANGSMITH")},
        "AIDANBENCH_TEST_KEY": CANARY,
    }
    run_dir = tmp_path / "run"
    outputs = []
    with OpenAIStub(brain, faults=faults, api_key=CANARY) as stub:
        args = run_args(stub, run_dir, "--max-retries", "1")
        for command in (args, ["report", str(run_dir)], ["report", str(run_dir), "--json"]):
            proc = run_cli(command, env, timeout=300)
            outputs.append(proc.stdout + proc.stderr)
        assert stub.requests[0].headers["authorization"] == f"Bearer {CANARY}"
    assert "error" in outputs[0], "the run went through errors"
    assert "HTTP 401" in outputs[0]
    for text in outputs:
        assert CANARY not in text
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {
        "results.json",
        "answers.jsonl",
        "questions.jsonl",
        "metadata.json",
        "checkpoints.sqlite",
        "cache.sqlite",
    }
    for path in files:
        assert CANARY.encode() not in path.read_bytes(), f"key found in {path.name}"
