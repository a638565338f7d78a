"""Runs that last a campaign: sessions that change how, never what, and runs that grow.

Through the real ``aidanbench run`` command (in-process ``main`` and real subprocesses)
and the Python API, against the local OpenAI-compatible server. The server's request log
is the witness: which (model, question) was asked, when, and how many requests a session
made.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.core.setting_kinds import OPERATIONAL_FIELDS, SCORING_FIELDS
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import Progress, RunSpec, run, run_sync
from aidanbench.testing import Latency, OpenAIStub, RecordedRequest, ScriptedBrain, http_error, when

from .commands import stub_endpoints
from .conftest import REPO

QUESTIONS = bundled_questions(4)
CHAINS = {q: 3 + i for i, q in enumerate(QUESTIONS)}
KEY = "AIDANBENCH_TEST_KEY"
SCORED = ("generate", "coherence", "similarity", "embed")
SERVED = ("m1", "m2", "o1-mini", "text-embedding-3-large")
"""What the stubs list on ``GET /v1/models``: the preflight then asks nothing more."""


def args(url: str, run_dir: Path, models: tuple[str, ...], n: int, *extra: str) -> list[str]:
    return [
        "run",
        *(a for m in models for a in ("--model", m)),
        "--questions",
        str(n),
        *("--base-url", url, "--judge-base-url", url, "--embedding-base-url", url),
        *("--api-key-env", KEY, "--judge-api-key-env", KEY, "--embedding-api-key-env", KEY),
        "--run-dir",
        str(run_dir),
        *extra,
    ]


def asked(requests: list[RecordedRequest]) -> set[tuple[str | None, str]]:
    """(model, question) of every generate request."""
    found = set()
    for request in requests:
        if request.kind == "generate":
            question = next(q for q in QUESTIONS if f"<question>{q}</question>" in request.prompt)
            found.add((request.model, question))
    return found


def lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]


def scores(run_dir: Path) -> dict[tuple[str, str, int], int]:
    return {(x["model"], x["question"], x["repeat"]): x["score"] for x in lines(run_dir)}


def test_every_settings_field_is_scoring_or_operational() -> None:
    fields = set(Settings.model_fields)
    assert not SCORING_FIELDS & OPERATIONAL_FIELDS
    assert fields == SCORING_FIELDS | OPERATIONAL_FIELDS, (
        f"unclassified: {sorted(fields - SCORING_FIELDS - OPERATIONAL_FIELDS)}; "
        f"not fields: {sorted((SCORING_FIELDS | OPERATIONAL_FIELDS) - fields)}"
    )


def command(url: str, run_dir: Path, api_key: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aidanbench.cli.main",
            *args(url, run_dir, ("m1", "m2"), len(QUESTIONS), "--concurrency", "3", *extra),
        ],
        cwd=REPO,
        env={**os.environ, KEY: api_key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.e2e
def test_killed_run_resumes_on_a_moved_endpoint_with_a_lower_rate(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kill a run; the endpoint comes back on another port; rerun with the new URL and
    ``--requests-per-minute 12``: the run resumes, makes exactly 12 requests and waits
    for the window (it would have gone on at once without the limit), and metadata
    records each session's URL and rate."""
    run_dir = tmp_path / "run"
    latency = Latency(generate=0.03, coherence=0.04, embed=0.01)
    with OpenAIStub(ScriptedBrain(CHAINS), latency=latency, models=SERVED) as first:
        old_url = first.base_url
        proc = command(old_url, run_dir, api_key)
        wait_for(lambda: first.count("generate") >= 8, "8 answers")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    with OpenAIStub(ScriptedBrain(CHAINS), models=SERVED) as moved:
        new_url = moved.base_url
        assert new_url != old_url
        proc = command(new_url, run_dir, api_key, "--requests-per-minute", "12")
        scored = lambda: [r for r in moved.requests if r.kind in SCORED]  # noqa: E731
        wait_for(lambda: len(scored()) >= 12, "12 requests at the moved endpoint")
        time.sleep(1.5)  # without the limit, the rest of the run would be asked meanwhile
        window = scored()
        assert proc.poll() is None, proc.communicate()[1]
        assert len(window) == 12, "12 requests per minute: the 13th waits for the window"
        assert window[-1].started - window[0].started < 60
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err

        capsys.readouterr()
        assert main(args(new_url, run_dir, ("m1", "m2"), len(QUESTIONS))) == 0
    assert scores(run_dir) == {(m, q, 1): CHAINS[q] for m in ("m1", "m2") for q in QUESTIONS}, (
        "every question scored as in a clean run"
    )
    meta = json.loads((run_dir / "metadata.json").read_text())
    sessions = [
        (s["operational"]["base_url"], s["operational"]["requests_per_minute"], s["status"])
        for s in meta["sessions"]
    ]
    assert sessions == [
        (old_url, None, "killed"),  # it never wrote its end
        (new_url, 12.0, "interrupted"),
        (new_url, None, "finished"),
    ]
    assert meta["endpoints"]["model"] == new_url.split("//")[1].split("/")[0]


def test_a_grown_run_asks_only_its_new_threads(
    stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    stub.brain = ScriptedBrain(CHAINS)
    run_dir = tmp_path / "run"
    assert main(args(stub.base_url, run_dir, ("m1",), 2)) == 0
    assert asked(stub.requests) == {("m1", q) for q in QUESTIONS[:2]}

    before = stub.count()
    assert main(args(stub.base_url, run_dir, ("m1", "m2"), 4)) == 0
    assert asked(stub.requests[before:]) == {
        *(("m1", q) for q in QUESTIONS[2:]),
        *(("m2", q) for q in QUESTIONS),
    }, "a model and two questions added: only their threads run"

    before = stub.count()
    assert main(args(stub.base_url, run_dir, ("m2",), 1, "--repeats", "2")) == 0
    assert asked(stub.requests[before:]) == {("m2", QUESTIONS[0])}, "repeat 2 of one question"
    assert scores(run_dir) == {
        **{(m, q, 1): CHAINS[q] for m in ("m1", "m2") for q in QUESTIONS},
        ("m2", QUESTIONS[0], 2): CHAINS[QUESTIONS[0]],
    }, "what the last command left out is still in the outputs"
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results["models"]["m1"]["0.7"]) == QUESTIONS
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert (meta["spec"]["models"], meta["spec"]["repeats"]) == (["m1", "m2"], 2)
    assert meta["questions"] == 4 and meta["totals"]["questions"] == 9
    assert [s["models"] for s in meta["sessions"]] == [["m1"], ["m1", "m2"], ["m2"]]

    before = stub.count()
    assert main(args(stub.base_url, run_dir, ("m1", "m2"), 4, "-T", "0.7", "-T", "1.0")) == 0
    assert asked(stub.requests[before:]) == {(m, q) for m in ("m1", "m2") for q in QUESTIONS}
    assert {r.body["temperature"] for r in stub.requests[before:] if r.kind == "generate"} == {
        1.0
    }, "a temperature added: only its threads run"


def api_spec(stub: OpenAIStub, run_dir: Path, **fields: Any) -> RunSpec:
    settings = stub_endpoints(stub.base_url)
    base = {"models": ["m1", "m2"], "questions": 4, "run_dir": run_dir, "settings": settings}
    return RunSpec.model_validate(base | fields)


def test_python_api_runs_resumes_and_returns_the_summary(
    stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    stub.brain = ScriptedBrain(CHAINS)
    quiet = Progress(out=io.StringIO(), live=False)
    result = run_sync(api_spec(stub, tmp_path / "run"), progress=quiet)
    assert [(row.model, row.score) for row in result.summary] == [("m1", 18), ("m2", 18)]
    assert result.totals.score == 36 and not result.failed
    assert (tmp_path / "run" / "results.json").exists()
    calls = stub.asked()
    again = run_sync(api_spec(stub, tmp_path / "run"), progress=Progress(out=io.StringIO()))
    assert stub.asked() == calls, "finished threads are reused"
    assert again.totals == result.totals


async def test_python_api_is_awaitable(stub: OpenAIStub, api_key: str, tmp_path: Path) -> None:
    stub.brain = ScriptedBrain(CHAINS)
    spec = api_spec(stub, tmp_path / "run", models=["m1"], questions=QUESTIONS[:1])
    result = await run(spec, progress=Progress(out=io.StringIO(), live=False))
    assert [row.score for row in result.summary] == [CHAINS[QUESTIONS[0]]]


def test_live_table_ends_equal_to_the_summary_after_a_resume(
    stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    """The first session leaves questions finished and one stopped on an error; the
    second counts the finished ones from their lines and the retried one from its final
    line, so its table ends on the run's totals (API calls and tokens included)."""
    stub.brain = ScriptedBrain(CHAINS)
    run_dir = tmp_path / "run"
    stub.faults = when("coherence", http_error(400, "bad request"), match=QUESTIONS[2])
    first = run_sync(api_spec(stub, run_dir), progress=Progress(out=io.StringIO(), live=False))
    assert len(first.failed) == 2
    stub.faults = None
    progress = Progress(out=io.StringIO(), live=False)
    result = run_sync(api_spec(stub, run_dir), progress=progress)
    assert not result.failed
    for row in result.summary:
        live = progress.rows[f"{row.model} (T={row.temperature:g})"]
        shown = live.figures()
        assert (shown.score, shown.tokens) == (row.score, row.tokens)
        assert (shown.answers, shown.calls) == (row.answers, row.api_calls)
        assert shown.dollars == row.cost_usd
        assert (live.done, live.running, live.queued, live.errored) == (4, 0, 0, 0)
    # the table counts what the lines record; the ledger's figures (what was sent, one
    # embeddings request serving several questions) are metadata's api_calls and tokens
    recorded = result.totals
    figures = [r.figures() for r in progress.rows.values()]
    assert sum(f.calls for f in figures) == recorded.recorded_api_calls
    assert sum(f.tokens or 0 for f in figures) == recorded.recorded_tokens


def test_live_table_of_the_command_ends_on_the_summary(
    stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logged (not a terminal), the command's progress ends with the table's final counts."""
    stub.brain = ScriptedBrain(CHAINS)
    run_dir = tmp_path / "run"
    assert main(args(stub.base_url, run_dir, ("m1",), 2)) == 0
    capsys.readouterr()
    assert main(args(stub.base_url, run_dir, ("m1",), 4)) == 0
    err = capsys.readouterr().err
    meta = json.loads((run_dir / "metadata.json").read_text())
    (row,) = [x for x in err.splitlines() if "m1 (T=0.7)" in x and "│" in x]
    cells = [c.strip().replace(",", "") for c in row.split("│")[2:-1]]
    totals = meta["totals"]
    assert cells[:-1] == [  # the last, spent, is tests/test_cost.py's
        "4",
        "0",
        "0",
        "0",
        str(totals["answers"]),
        str(totals["score"]),
        str(totals["recorded_api_calls"]),
        str(totals["recorded_tokens"]),
    ]


def test_use_stored_settings_fills_what_is_left_out_and_applies_what_is_given(
    stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    """Left out: the latest session's endpoints and the model's scoring settings. Given:
    a new endpoint is used, never dropped in favour of the stored one."""
    stub.brain = ScriptedBrain(CHAINS)
    run_dir = tmp_path / "run"
    assert main(args(stub.base_url, run_dir, ("m1",), 1, "--max-answers", "2")) == 0
    bare = ["run", "--model", "m1", "--run-dir", str(run_dir), "--use-stored-settings"]
    before = stub.count()
    assert main([*bare, "--questions", "2"]) == 0
    assert asked(stub.requests[before:]) == {("m1", QUESTIONS[1])}, "stored URLs, one new thread"
    assert scores(run_dir)[("m1", QUESTIONS[1], 1)] == 2, "the stored --max-answers"
    with OpenAIStub(ScriptedBrain(CHAINS), models=SERVED) as moved:
        new_url = moved.base_url
        assert main(args(new_url, run_dir, ("m1",), 3, "--use-stored-settings")) == 0
        assert asked(moved.requests) == {("m1", QUESTIONS[2])}, "the given URL is applied"
    meta = json.loads((run_dir / "metadata.json").read_text())
    urls = [s["operational"]["judge_base_url"] for s in meta["sessions"]]
    assert urls == [stub.base_url, stub.base_url, new_url]
