"""SIGKILL at random moments, many times in a row across a run: no answer lost or doubled,
and no request the provider may bill missing from the ledger."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from aidanbench.cli.main import main
from aidanbench.testing import Fault, Latency, OpenAIStub, RequestInfo, ScriptedBrain

from .test_cli_run import QUESTIONS, cli, read_results, run_to_the_end

pytestmark = pytest.mark.e2e

KILLS = 20
CHAIN = 20
"""Valid answers of the first question: long enough that the run (2 models x 4 questions,
at least 2 x 4 x 24 generations) outlasts 20 kills of at most 6 generations each plus
what arrives in the random pause before each kill."""


def kill_storm(
    stub: OpenAIStub,
    run_dir: Path,
    api_key: str,
    rng: random.Random,
    runs: int,
    generations: tuple[int, int],
    pause: float,
) -> int:
    """Start the run ``runs`` times, each time SIGKILLing it after a random number of
    generate requests (in ``generations``) and a random pause (up to ``pause`` s); then
    resume it to its end. The number of kills that found it still going."""
    kills = 0
    for _ in range(runs):
        proc = cli(stub, run_dir, api_key)
        target = stub.count("generate") + rng.randint(*generations)
        deadline = time.monotonic() + 120
        while stub.count("generate") < target and proc.poll() is None:
            assert time.monotonic() < deadline, "no progress between kills"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, pause))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.communicate(timeout=60)
    run_to_the_end(stub, run_dir, api_key, timeout=300)
    return kills


def test_twenty_kills_then_the_same_results(tmp_path: Path, api_key: str) -> None:
    rng = random.Random(20261122)
    brain = ScriptedBrain({q: CHAIN + 2 * i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=Latency(generate=0.02, coherence=0.03, embed=0.01)) as stub:
        clean_dir = tmp_path / "clean"
        run_to_the_end(stub, clean_dir, api_key, timeout=300)

        run_dir = tmp_path / "killed"
        kills = kill_storm(stub, run_dir, api_key, rng, KILLS, (1, 6), pause=0.05)
        assert kills == KILLS, "the run must still be going for every kill"

    assert read_results(run_dir) == read_results(clean_dir)
    answers = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    keys = [(a["model"], a["question"], a["index"]) for a in answers]
    assert len(keys) == len(set(keys))
    assert len(keys) == 2 * sum(CHAIN + 2 * i + 1 for i in range(len(QUESTIONS)))


LEDGER_KILLS = 10


def every_fifth_fails(info: RequestInfo) -> Fault | None:
    """A fault on about a fifth of first attempts, decided by content (not call order):
    a 500, or a reset connection (a reply the client never reads)."""
    if info.attempt != 1 or int(info.key[:8], 16) % 5:
        return None
    return Fault(status=500) if int(info.key[8:16], 16) % 2 else Fault(reset=True)


def test_a_kill_storm_leaves_every_request_in_the_ledger(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every request the server received has a ``sent`` line (the lines it never received
    were in flight at a kill), and the requests without a recorded reply are counted and
    named by ``report``: those the server answered while the process died included."""
    rng = random.Random(20261125)
    brain = ScriptedBrain({q: 8 + i for i, q in enumerate(QUESTIONS)})
    latency = Latency(generate=0.03, coherence=0.03, embed=0.01)
    run_dir = tmp_path / "killed"
    with OpenAIStub(brain, latency=latency, faults=every_fifth_fails) as stub:
        kills = kill_storm(stub, run_dir, api_key, rng, LEDGER_KILLS, (2, 6), pause=0.03)
        received = [r for r in stub.requests if r.method == "POST"]
    assert kills >= LEDGER_KILLS - 2, "the run must be going for (nearly) every kill"

    ledger = [json.loads(x) for x in (run_dir / "usage.jsonl").read_text().splitlines()]
    sent = sum(1 for line in ledger if line["event"] == "sent")
    replied = sum(1 for line in ledger if line["event"] == "usage")
    refused = sum(1 for line in ledger if line["event"] == "refused")
    in_flight = sent - len(received)
    assert 0 <= in_flight <= 8 * kills, "only requests in flight at a kill never arrived"
    answered = sum(1 for r in received if r.status == 200)
    assert replied <= answered
    lost = answered - replied
    assert lost > 0, "replies the server produced while the process died (a provider bills)"

    meta = json.loads((run_dir / "metadata.json").read_text())
    usage = meta["usage"]
    assert (usage["api_calls"], usage["replies"], usage["refused"]) == (sent, replied, refused)
    unrecorded = usage["unrecorded"]
    assert unrecorded == sent - replied - refused
    assert unrecorded >= lost, "every billed reply that was lost is among the unrecorded"
    assert refused <= sum(1 for r in received if r.status == 500)

    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert f"{unrecorded} requests were sent without a recorded reply" in text
    assert f"sent {sent}: {replied} replied, {refused} refused" in text
    assert "every call" not in text, "the total is not called complete when it is not"
