"""Judge calls through the provider's batch API (``--batch``), against the stub server
speaking OpenAI's protocol over real HTTP: files uploaded, batches created and polled,
output and error files downloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.record.results import QuestionResult
from aidanbench.services.batch import read_results
from aidanbench.testing import OpenAIStub
from aidanbench.testing.batches import BatchStore
from tests.judging import Unreadable, affine_judge, one_question_reference

KEY = "AIDANBENCH_TEST_KEY"


@pytest.fixture
def server(chains: list[QuestionResult]) -> Iterator[OpenAIStub]:
    with OpenAIStub(affine_judge(chains), batch_seconds=0.3) as stub:
        yield stub


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-not-a-key")


def prices(path: Path) -> Path:
    path.write_text(json.dumps({"models": {"stub-judge": {"input": 1.0, "output": 4.0}}}), "utf-8")
    return path


def calibrate_args(server: OpenAIStub, out: Path, *extra: str) -> list[str]:
    argv = ["calibrate", "--judge-model", "stub-judge", "--judge-base-url", server.base_url]
    return [*argv, "--judge-api-key-env", KEY, "--out", str(out), "--json", *extra]


def batches_created(server: OpenAIStub) -> int:
    return sum(1 for r in server.requests if (r.method, r.path) == ("POST", "/v1/batches"))


def figures(payload: dict[str, Any]) -> dict[str, Any]:
    return payload["judge"]


def test_calibrate_batch_equals_direct_at_half_price(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = prices(tmp_path / "prices.json")
    answers = one_question_reference(tmp_path / "small.json")
    small = ("--reference", str(tmp_path / "small.json"), "--prices", str(table))
    assert main(calibrate_args(server, tmp_path / "direct", *small)) == 0
    direct = json.loads(capsys.readouterr().out)
    asked = server.count("coherence")
    batch = calibrate_args(server, tmp_path / "batch", *small, "--batch")
    assert main([*batch, "--batch-poll-seconds", "0.05"]) == 0
    batched = json.loads(capsys.readouterr().out)
    assert server.count("coherence") == asked, "no direct judge call in batch mode"
    assert batches_created(server) == 1 and len(batched["judging"]["batches"]) == 1
    assert figures(batched) == figures(direct)
    assert direct["cost"]["dollars"] == pytest.approx(2 * batched["cost"]["dollars"])
    assert batched["cost"]["api_calls"] == direct["cost"]["api_calls"] == len(set(answers))
    ledger = tmp_path / "batch" / "judge-cache.usage.jsonl"
    replies = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert all(r["batch"] for r in replies if r["event"] == "usage")
    assert {r["batch"] for r in replies if r["event"] == "sent"} == set(
        batched["judging"]["batches"]
    )


@pytest.mark.e2e
def test_a_command_killed_while_polling_resumes_its_batch(
    server: OpenAIStub, tmp_path: Path
) -> None:
    """Killed (SIGKILL) while it waits for its batch, the same command finds the batch it
    created and polls it again: one batch is created, not two, and the calibration is
    the one a direct run gives."""
    server.batch_seconds = 3600.0
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "aidanbench.cli.main"]
    argv += calibrate_args(server, out, "--batch", "--batch-poll-seconds", "0.1")
    env = {**os.environ, KEY: "sk-test-not-a-key"}
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(r.path.startswith("/v1/batches/") for r in server.requests):
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the command never polled its batch"
        time.sleep(0.05)
    first.kill()
    first.communicate()
    assert batches_created(server) == 1
    server.batch_seconds = 0.0
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "(resumed: created by an earlier command)" in again.stderr
    assert batches_created(server) == 1
    resumed = json.loads(again.stdout)
    assert main(calibrate_args(server, tmp_path / "direct")) == 0
    # the direct run's output is on this process's stdout: read the file it wrote
    direct = json.loads((tmp_path / "direct" / "calibration-judge-stub-judge.json").read_text())
    assert figures(resumed) == figures(direct)


def test_unreadable_batch_replies_are_asked_again_in_a_new_batch(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reply that cannot be read goes into the next batch (up to --judge-attempts
    batches); still unreadable, the answer is left undecided (said, out of the figures),
    and a rerun asks for it alone."""
    small = tmp_path / "small.json"
    answer = one_question_reference(small)[1]
    judge = server.brain
    server.brain = Unreadable(judge, answer)
    argv = calibrate_args(server, tmp_path / "out", "--batch", "--batch-poll-seconds", "0.05")
    argv += ["--reference", str(small), "--judge-attempts", "2"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["judging"]["refused"] == 1
    assert batches_created(server) == 2
    server.brain = judge
    assert main(argv) == 0
    capsys.readouterr()
    assert batches_created(server) == 3
    store = server.batch_store
    assert store is not None
    last = list(store.batches.values())[-1]
    lines = store.files[last.input_file_id].data.decode().splitlines()
    assert len(lines) == 1, "the third batch held that one request"


@pytest.mark.parametrize("command", ["calibrate", "rescore"])
def test_an_endpoint_without_a_batch_api_is_one_line(
    chains: list[QuestionResult],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """404 on ``/v1/files``: one line naming the endpoint and the way out (exit 2), and
    nothing asked of the judge."""
    with OpenAIStub(affine_judge(chains), batch_api=False) as bare:
        small = tmp_path / "small.json"
        one_question_reference(small)
        judge = ["--judge-model", "stub-judge", "--judge-base-url", bare.base_url]
        judge += ["--judge-api-key-env", KEY, "--batch", "--cache", str(tmp_path / "c.sqlite")]
        where = ["--reference", str(small), "--out", str(tmp_path / "out")]
        if command == "rescore":
            where = [str(small), "--coherence-threshold", "15", "--novelty-threshold", "0.15"]
        assert main([command, *where, *judge]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert bare.count("coherence") == 0
        assert f"error: {bare.base_url} has no Batch API (POST /v1/files answered 404)" in last
        assert last.endswith("nothing was spent; without --batch the judge is asked directly")


def _refusal(line: str) -> str:
    data = json.loads(line)
    data["response"]["body"]["choices"][0]["message"]["content"] = "I would rather not say."
    return json.dumps(data)


@pytest.mark.parametrize("refusal_first", [False, True])
def test_a_repeated_id_never_discards_a_readable_reply(
    server: OpenAIStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    refusal_first: bool,
) -> None:
    """An output file holding each id twice, a refusal beside the readable reply (after
    it, or before it): the readable reply decides, and the figures are a direct run's."""
    small = tmp_path / "small.json"
    one_question_reference(small)
    where = ["--reference", str(small), "--judge-attempts", "1"]
    assert main([*calibrate_args(server, tmp_path / "direct"), *where]) == 0
    direct = json.loads(capsys.readouterr().out)
    answer = BatchStore._answer

    def doubled(store: BatchStore, stub: OpenAIStub, batch: Any) -> None:
        answer(store, stub, batch)
        stored = store.files[batch.output_file_id]
        lines = stored.data.decode().splitlines()
        pairs = [(_refusal(x), x) if refusal_first else (x, _refusal(x)) for x in lines]
        stored.data = "".join(f"{a}\n{b}\n" for a, b in pairs).encode()

    monkeypatch.setattr(BatchStore, "_answer", doubled)
    argv = calibrate_args(server, tmp_path / "batch", "--batch", "--batch-poll-seconds", "0.05")
    assert main([*argv, *where]) == 0
    batched = json.loads(capsys.readouterr().out)
    assert batches_created(server) == 1
    assert batched["judging"]["refused"] == 0
    assert figures(batched) == figures(direct)


def test_results_files_are_read_line_by_line() -> None:
    completion = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "<s>1</s>"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    text = "\n".join(
        json.dumps(line)
        for line in [
            {"custom_id": "a", "response": {"status_code": 200, "body": completion}, "error": None},
            {
                "custom_id": "b",
                "response": {"status_code": 500, "body": {"error": {"message": "overloaded"}}},
                "error": None,
            },
            {"custom_id": "c", "response": None, "error": {"code": "x", "message": "expired"}},
            {"custom_id": "d", "response": {"status_code": 200, "body": {"no": "choices"}}},
        ]
    )
    found = {k: v for k, [v] in read_results(text + "\nnot json\n").items()}
    assert found["a"].message is not None and found["a"].message.content == "<s>1</s>"
    assert found["b"].error == "status 500: overloaded"
    assert found["c"].error == "batch error: expired"
    assert found["d"].message is None and "no choices" in (found["d"].error or "")
