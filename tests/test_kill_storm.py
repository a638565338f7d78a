"""SIGKILL at random moments, 20 times in a row across a run: nothing lost or doubled."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain

from .test_cli_run import QUESTIONS, cli, read_results

KILLS = 20
CHAIN = 20
"""Valid answers of the first question: long enough that the run (2 models x 4 questions,
at least 2 x 4 x 24 generations) outlasts 20 kills of at most 6 generations each plus
what arrives in the random pause before each kill."""


@pytest.mark.slow
def test_twenty_kills_then_the_same_results(tmp_path: Path, api_key: str) -> None:
    rng = random.Random(20261122)
    brain = ScriptedBrain({q: CHAIN + 2 * i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=Latency(generate=0.02, coherence=0.03, embed=0.01)) as stub:
        clean_dir = tmp_path / "clean"
        proc = cli(stub, clean_dir, api_key)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err

        run_dir = tmp_path / "killed"
        kills = 0
        for _ in range(KILLS):
            proc = cli(stub, run_dir, api_key)
            start = stub.count("generate")
            target = start + rng.randint(1, 6)
            deadline = time.monotonic() + 120
            while stub.count("generate") < target and proc.poll() is None:
                assert time.monotonic() < deadline, "no progress between kills"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.05))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.communicate(timeout=60)
        assert kills == KILLS, "the run must still be going for every kill"
        proc = cli(stub, run_dir, api_key)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err

    assert read_results(run_dir) == read_results(clean_dir)
    answers = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    keys = [(a["model"], a["question"], a["index"]) for a in answers]
    assert len(keys) == len(set(keys))
    assert len(keys) == 2 * sum(CHAIN + 2 * i + 1 for i in range(len(QUESTIONS)))
