"""What a run costs: usage per call, dollars in every file, caps, and the ledger after a kill.

The local server reports fixed usage per model (``MeteredBrain``): cached and reasoning
tokens, and for one model the provider's own ``usage.cost``. Prices are chosen so the
dollars are exact binary fractions, so sums and caps compare exactly.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from aidanbench.analysis.summary import summarise
from aidanbench.cli.main import main
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.nodes.caps import cap_reached, continuation
from aidanbench.record.results import read_results
from aidanbench.runner.progress import Progress
from aidanbench.testing import (
    Fault,
    Metered,
    MeteredBrain,
    OpenAIStub,
    RequestInfo,
    ScriptedBrain,
)
from aidanbench.testing.settings import stub_flags

from .conftest import REPO

QUESTIONS = bundled_questions(2)

PRICES = {
    "date": "2026-01-01",
    "models": {
        "m-table": {"input": 250.0, "cached_input": 125.0, "output": 625.0},
        "judge-model": {"input": 1250.0, "cached_input": None, "output": 0.0},
        "embedding-model": {"input": 0.0, "cached_input": None, "output": 0.0},
    },
}
"""Dollars per million tokens, chosen so every call's cost is exact in binary."""

METERS = {
    "m-table": Metered(800, 120, cached_tokens=200, reasoning_tokens=30),
    "m-provider": Metered(500, 100, cost=0.5),
    "judge-model": Metered(100, 7),
}
"""Fixed usage per model; ``m-provider``'s replies carry the provider's cost."""

TABLE_GENERATE = (600 * 250 + 200 * 125 + 120 * 625) / 1e6
"""0.25: 600 fresh and 200 cached input tokens, 120 output tokens at m-table's prices."""
PROVIDER_GENERATE = 0.5
JUDGE = 100 * 1250 / 1e6
"""0.125."""


def args(
    stub: OpenAIStub, run_dir: Path, models: list[str], *extra: str, questions: int = 2
) -> list[str]:
    url = stub.base_url
    out = ["run", "--questions", str(questions), "--run-dir", str(run_dir)]
    for model in models:
        out += ["--model", model]
    out += stub_flags(url)
    return [*out, "--judge-model", "judge-model", "--embedding-model", "embedding-model", *extra]


def prices_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(PRICES))
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SERVED = ("m-table", "m-provider", "judge-model", "embedding-model")
"""What the stubs list on ``GET /v1/models``: the preflight then sends no request of its
own, and the figures below are the questions' alone."""


def metered_stub(chain: int) -> OpenAIStub:
    """A stub listing ``SERVED`` whose every question has ``chain`` valid answers, then an
    incoherent one, each reply's usage metered by ``METERS``. The judge fails the last
    answer after its look-ahead was sent, so the look-ahead is paid for and discarded (a
    repeated answer, its vector cached, would fail before its look-ahead is asked)."""
    brain = ScriptedBrain({q: chain for q in QUESTIONS}, default_ending="coherence")
    return OpenAIStub(MeteredBrain(brain, METERS), models=SERVED)


def sent_usage(stub: OpenAIStub) -> dict[str, int]:
    """Totals of what the server answered to model requests, from its own responses."""
    totals = {"calls": 0, "input": 0, "cached": 0, "output": 0, "reasoning": 0}
    for request in stub.requests:
        if request.method != "POST":  # GET /v1/models is no model's call
            continue
        totals["calls"] += 1
        usage = (request.response or {}).get("usage") if request.status == 200 else None
        if not usage:
            continue
        totals["input"] += usage["prompt_tokens"]
        totals["output"] += usage.get("completion_tokens", 0)
        totals["cached"] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        details = usage.get("completion_tokens_details") or {}
        totals["reasoning"] += details.get("reasoning_tokens", 0)
    return totals


# --- every figure lands in the files and the report ---------------------------------------


def test_usage_and_dollars_land_in_every_file_and_the_report(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with metered_stub(2) as stub:
        code = main(
            args(stub, run_dir, ["m-table", "m-provider"], "--prices", str(prices_file(tmp_path)))
        )
        assert code == 0
        server = sent_usage(stub)

    answers = jsonl(run_dir / "answers.jsonl")
    assert len(answers) == 2 * 2 * 3
    for answer in answers:
        generate, judge = answer["calls"]["generate"], answer["calls"]["judge"]
        assert judge["cost_usd"] == JUDGE and judge["provider_cost_calls"] == 0
        if answer["model"] == "m-table":
            assert generate["input_tokens"] == 800 and generate["cached_input_tokens"] == 200
            assert generate["output_tokens"] == 120 and generate["reasoning_tokens"] == 30
            assert generate["cost_usd"] == TABLE_GENERATE
            assert generate["provider_cost_calls"] == 0
            assert answer["cost_usd"] == TABLE_GENERATE + JUDGE
        else:
            assert generate["cost_usd"] == PROVIDER_GENERATE, "the provider's cost wins"
            assert generate["provider_cost_calls"] == 1
            assert answer["cost_usd"] == PROVIDER_GENERATE + JUDGE

    # each question: 3 answers (2 valid, the failing one) and 1 discarded look-ahead
    per_question = {
        "m-table": 3 * (TABLE_GENERATE + JUDGE) + TABLE_GENERATE,
        "m-provider": 3 * (PROVIDER_GENERATE + JUDGE) + PROVIDER_GENERATE,
    }
    questions = jsonl(run_dir / "questions.jsonl")
    assert [(q["model"], q["cost_usd"], q["censored"]) for q in questions] == [
        (m, per_question[m], False) for m in ("m-table", "m-table", "m-provider", "m-provider")
    ]
    assert questions[0]["speculative"]["cost_usd"] == TABLE_GENERATE

    meta = json.loads((run_dir / "metadata.json").read_text())
    usage, totals = meta["usage"], meta["totals"]
    assert usage["api_calls"] == totals["api_calls"] == server["calls"]
    assert usage["input_tokens"] == server["input"]
    assert usage["output_tokens"] == server["output"]
    table = usage["by_role_model"]["model:m-table"]
    assert table["cached_input_tokens"] == server["cached"] == 2 * 4 * 200, "only m-table's"
    assert table["reasoning_tokens"] == server["reasoning"] == 2 * 4 * 30
    assert usage["cached_input_tokens"] is None and usage["reasoning_tokens"] is None, (
        "m-provider and the judge report neither: the run's sums are unknown, not m-table's"
    )
    assert usage["tokens"] == totals["tokens"] == server["input"] + server["output"]
    run_dollars = 2 * per_question["m-table"] + 2 * per_question["m-provider"]
    assert usage["dollars"] == totals["dollars"] == run_dollars
    assert usage["speculative"]["api_calls"] == 2 * 2 * 3, "every look-ahead, kept apart"
    assert usage["provider_cost_calls"] == 2 * 4
    assert usage["unpriced_models"] == []
    assert meta["prices"]["date"] == "2026-01-01"

    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert f"m-table @ 0.7: ${2 * per_question['m-table']:,.4f} for score 4" in text
    assert f"m-provider @ 0.7: ${2 * per_question['m-provider']:,.4f} for score 4" in text
    assert f"included): ${run_dollars:,.4f}, {server['calls']} requests" in text
    assert main(["report", str(run_dir), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["cost_usd"] for r in payload["runs"]] == [
        2 * per_question["m-table"],
        2 * per_question["m-provider"],
    ]
    assert [q["cost_usd"] for q in payload["runs"][0]["questions"]] == [per_question["m-table"]] * 2
    assert payload["cost"]["dollars"] == run_dollars
    assert payload["cost"]["unpriced_models"] == []

    assert main(["plot", str(run_dir), "-o", str(tmp_path / "charts")]) == 0
    assert (tmp_path / "charts" / "cost_vs_score.png").stat().st_size > 0


def test_every_count_of_requests_and_tokens_is_one_count_and_the_total_says_what_it_adds(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live table's chat requests and the summary's chat tokens are the answers' and
    look-aheads' chat requests; the run total as sent adds the embedding requests (several
    answers' texts each) and the preflight's checks, and says how many of each. In a run
    without retries the parts add up to the total, request for request and token for
    token (the table once counted an embedding per answer, as if each were a request)."""
    run_dir = tmp_path / "run"
    brain = MeteredBrain(ScriptedBrain({q: 2 for q in QUESTIONS}), METERS)
    with OpenAIStub(brain) as stub:  # it lists no model yet: the preflight asks each role
        assert main(args(stub, run_dir, ["m-table", "m-provider"])) == 0
        sent = sum(1 for r in stub.requests if r.method == "POST")
    out, err = capsys.readouterr()
    table = live_cells(err, ["done", "running", "queued", "errors", "answers", "score"])
    chat = sum(int(cells["chat requests"]) for cells in table.values())
    total = re.search(r"as sent \(.*\): \S+, (\d+) requests\n  sent \d+: .*; ([\d,]+) tokens", out)
    parts = re.search(
        r"of these, the questions' embeddings \(several answers' texts a request\): (\d+) "
        r"requests, ([\d,]+) tokens; the preflight's checks: (\d+) requests, ([\d,]+) tokens",
        out,
    )
    assert total and parts, out
    embeddings, embedded_tokens, checks, check_tokens = (
        int(g.replace(",", "")) for g in parts.groups()
    )
    assert int(total[1]) == sent == chat + embeddings + checks
    assert checks == 4 and embeddings < sum(int(c["answers"]) for c in table.values())
    chat_tokens = sum(row.tokens or 0 for row in summarise(read_results(run_dir)))
    assert [int(c["chat tokens"].replace(",", "")) for c in table.values()] == [
        row.tokens for row in summarise(read_results(run_dir))
    ]
    assert int(total[2].replace(",", "")) == chat_tokens + embedded_tokens + check_tokens


def live_cells(err: str, first: list[str]) -> dict[str, dict[str, str]]:
    """The live table's final state (logged, it ends the run's stderr): each model's
    cells by header, the stacked tables of a narrow console put back together."""
    headers = [*first, "chat requests", "chat tokens", "spent"]
    rows: dict[str, list[str]] = {}
    for line in err.splitlines():
        found = re.match(r"│ (.+?) \(T=0\.7\) +│(.*)│$", line)
        if found:
            rows.setdefault(found[1], []).extend(c.strip() for c in found[2].split("│"))
    return {model: dict(zip(headers, cells, strict=True)) for model, cells in rows.items()}


def test_a_model_without_a_price_costs_unknown_everywhere(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with metered_stub(1) as stub:
        prices = str(prices_file(tmp_path))
        assert main(args(stub, run_dir, ["m-unpriced"], "--prices", prices)) == 0
        capsys.readouterr()
        code = main(args(stub, tmp_path / "capped", ["m-unpriced"], "--max-cost", "1"))
        err = capsys.readouterr().err
        assert code == 2 and "m-unpriced" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "capped").exists(), "nothing written before the check"

    for answer in jsonl(run_dir / "answers.jsonl"):
        assert answer["calls"]["generate"]["cost_usd"] is None
        assert answer["calls"]["judge"]["cost_usd"] == JUDGE
        assert answer["cost_usd"] is None
    assert [q["cost_usd"] for q in jsonl(run_dir / "questions.jsonl")] == [None, None]
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["totals"]["dollars"] is None and meta["usage"]["dollars"] is None
    assert meta["usage"]["unpriced_models"] == ["m-unpriced"]
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "m-unpriced @ 0.7: unknown for score 2 (unknown per valid answer)" in text
    assert (
        "No price for: m-unpriced (their cost is unknown; give their prices with --prices FILE"
        in text
    )
    assert "its generations unknown" in text and "the models unknown" in text
    assert "$0.0000 for score" not in text and "generations $0.0000" not in text
    assert main(["report", str(run_dir), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["runs"][0]["cost_usd"] is None
    assert payload["cost"] == {
        **payload["cost"],
        "dollars": None,
        "unpriced_models": ["m-unpriced"],
    }


# --- caps ---------------------------------------------------------------------------------


def test_a_question_cost_cap_stops_exactly_and_a_higher_cap_continues(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    prices = str(prices_file(tmp_path))
    per_answer = TABLE_GENERATE + JUDGE  # 0.325
    # after answer n the question has paid n answers and the look-ahead for n + 1
    cap = 3 * per_answer + TABLE_GENERATE
    with metered_stub(10) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", prices, "--concurrency", "1")
        assert main([*command, "--max-question-cost", repr(cap)]) == 0
        questions = jsonl(run_dir / "questions.jsonl")
        assert [(q["score"], q["stop_reason"], q["censored"]) for q in questions] == [
            (3, "max_question_cost", True)
        ] * 2
        assert [q["cost_usd"] for q in questions] == [cap, cap]
        capsys.readouterr()
        assert main(["report", str(run_dir)]) == 0
        text = capsys.readouterr().out
        assert "≥3" in text and "for score ≥ 6" in text and "2 question(s) censored" in text
        assert re.search(r"m-table\s*│\s*0\.7\s*│\s*≥ 6\s*│", text), "summary: a lower bound"

        first = stub.requests
        higher = 5 * per_answer + 2 * TABLE_GENERATE  # the first look-ahead was discarded
        assert main([*command, "--max-question-cost", repr(higher)]) == 0
        again = stub.requests[len(first) :]
    questions = jsonl(run_dir / "questions.jsonl")
    assert [(q["score"], q["stop_reason"]) for q in questions] == [(5, "max_question_cost")] * 2
    answers = jsonl(run_dir / "answers.jsonl")
    assert [a["index"] for a in answers] == [1, 2, 3, 4, 5] * 2
    judged_before = {r.prompt for r in first if r.kind == "coherence"}
    assert not judged_before & {r.prompt for r in again if r.kind == "coherence"}
    asked_before = {r.prompt for r in first if r.kind == "generate"}
    redone = [r for r in again if r.kind == "generate" and r.prompt in asked_before]
    assert len(redone) == 2, "only the discarded look-ahead (answer 4) is asked again"


def test_the_run_budget_stops_in_flight_questions_and_starts_no_more(
    api_key: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    prices = str(prices_file(tmp_path))
    per_answer = TABLE_GENERATE + JUDGE
    budget = 3 * per_answer + TABLE_GENERATE  # embeddings are priced 0 here
    with metered_stub(10) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", prices, "--concurrency", "1")
        assert main([*command, "--max-cost", repr(budget)]) == 0
        questions = jsonl(run_dir / "questions.jsonl")
        assert [(q["score"] or 0, q["stop_reason"]) for q in questions] == [
            (3, "budget"),
            (0, None),
        ]
        assert stub.count("generate") == 4 and not any(
            QUESTIONS[1] in r.prompt for r in stub.requests
        ), "the second question never started"
        meta = json.loads((run_dir / "metadata.json").read_text())
        assert meta["totals"]["dollars"] == budget

        assert main([*command, "--max-cost", "100"]) == 0
    questions = jsonl(run_dir / "questions.jsonl")
    assert [(q["score"], q["stop_reason"]) for q in questions] == [(10, "coherence")] * 2
    answers = jsonl(run_dir / "answers.jsonl")
    assert [a["index"] for a in answers] == list(range(1, 12)) * 2


# --- the ledger counts what was sent, across a SIGKILL ------------------------------------


def faulty(hang_embedding: int, release: threading.Event) -> Callable[[RequestInfo], Fault | None]:
    """A fault hook: the second judge request gets a 500 (retried), and the
    ``hang_embedding``-th embedding request is held until ``release``, then cut."""
    seen = {"embed": 0, "coherence": 0}
    lock = threading.Lock()

    def hook(info: RequestInfo) -> Fault | None:
        if info.kind not in seen:
            return None
        with lock:
            seen[info.kind] += 1
            number = seen[info.kind]
        if info.kind == "coherence":
            return Fault(status=500) if number == 2 else None
        if number != hang_embedding:
            return None
        release.wait(60)
        return Fault(reset=True)

    return hook


def cli(stub: OpenAIStub, run_dir: Path, api_key: str, prices: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "AIDANBENCH_TEST_KEY": api_key}
    command = args(stub, run_dir, ["m-table"], "--prices", str(prices), questions=1)
    return subprocess.Popen(
        [sys.executable, "-m", "aidanbench.cli.main", *command, "--concurrency", "1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ledger_nodes(run_dir: Path) -> list[str]:
    path = run_dir / "usage.jsonl"
    if not path.exists():
        return []
    return [line["node"] for line in jsonl(path) if line["event"] == "usage" and line["node"]]


def turn_writes_saved(run_dir: Path) -> set[str]:
    """The channels the open turn's finished nodes have saved in the checkpoint (the
    ledger has a reply before its node's writes are committed: a kill between the two
    asks the node again)."""
    path = run_dir / "checkpoints.sqlite"
    if not path.exists():
        return set()
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)) as db:
            rows = db.execute(
                "SELECT channel FROM writes WHERE checkpoint_id = "
                "(SELECT max(checkpoint_id) FROM checkpoints)"
            ).fetchall()
    except sqlite3.Error:
        return set()
    return {channel for (channel,) in rows}


@pytest.mark.e2e
def test_a_killed_and_resumed_run_counts_every_call_it_sent(api_key: str, tmp_path: Path) -> None:
    """A 500 retried, then a kill while turn 5's embedding hangs: the run's totals are
    what the server received, both sessions, beyond a clean run's by exactly those calls.

    (LangGraph keeps the writes of the turn's finished branches, the judge and the
    look-ahead, so the resumed run asks again only the cut embedding request.)
    """
    prices = prices_file(tmp_path)
    release = threading.Event()
    with metered_stub(8) as stub:
        clean_dir = tmp_path / "clean"
        proc = cli(stub, clean_dir, api_key, prices)
        assert proc.communicate(timeout=120) and proc.returncode == 0
        clean_calls, clean = stub.asked(), sent_usage(stub)

        stub.clear()
        stub.faults = faulty(5, release)
        run_dir = tmp_path / "killed"
        proc = cli(stub, run_dir, api_key, prices)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            ledger_nodes(run_dir).count("judge") == 5
            and ledger_nodes(run_dir).count("generate_next") == 5
            and turn_writes_saved(run_dir) >= {"coherence_result", "lookahead"}
        ):
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        release.set()
        assert proc.returncode == -signal.SIGKILL
        stub.faults = None
        proc = cli(stub, run_dir, api_key, prices)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        killed = sent_usage(stub)
        killed_calls = stub.asked()

    assert killed_calls == clean_calls + 2, "the 500 and the cut embedding request"
    clean_meta = json.loads((clean_dir / "metadata.json").read_text())
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert clean_meta["totals"]["api_calls"] == clean_calls
    assert meta["totals"]["api_calls"] == killed_calls, "every call sent, both sessions"
    assert meta["totals"]["recorded_api_calls"] == clean_meta["totals"]["recorded_api_calls"]
    assert meta["usage"]["input_tokens"] == killed["input"] == clean["input"]
    assert meta["usage"]["output_tokens"] == killed["output"] == clean["output"]
    assert meta["totals"]["dollars"] == clean_meta["totals"]["dollars"]


# --- pure pieces: the seconds cap, the resumed clock, the live table ------------------------


def answer(index: int, elapsed: float, dollars: float | None = 0.25) -> dict[str, Any]:
    stats = {"served_model": "m", "latency_s": 0.1, "input_tokens": 1, "output_tokens": 1}
    return {
        "index": index,
        "elapsed_s": elapsed,
        "calls": {"generate": {**stats, "calls": 1, "cost_usd": dollars}},
    }


def test_the_seconds_cap_stops_at_the_answer_that_reaches_it_and_resumes_the_clock() -> None:
    settings = Settings(max_question_seconds=30.0)
    running = [answer(1, 12.0), answer(2, 29.9)]
    assert cap_reached(running, None, settings, budget_spent=False) is None
    reached = [*running, answer(3, 30.0)]
    assert cap_reached(reached, None, settings, budget_spent=False) == "max_question_seconds"
    state = {"answers": reached, "stop_reason": "max_question_seconds", "speculative": None}
    assert continuation(state, settings, budget_spent=False, now=1000.0) == {}, "still capped"
    raised = Settings(max_question_seconds=60.0)
    resumed = continuation(state, raised, budget_spent=False, now=1000.0)
    assert resumed == {"stop_reason": None, "error": None, "started_at": 970.0}
    assert continuation(state, raised, budget_spent=True, now=1000.0) == {}, "budget spent"


def test_a_cost_cap_on_an_unpriced_question_is_an_error_never_a_silent_pass() -> None:
    settings = Settings(max_question_cost=1.0)
    answers = [answer(1, 1.0, dollars=None)]
    assert cap_reached(answers, None, settings, budget_spent=False) == "unpriced"


def test_the_live_table_shows_what_is_spent_and_unknown() -> None:
    progress = Progress(out=io.StringIO(), live=False)
    progress.queued("priced", 1)
    progress.queued("unpriced", 1)
    progress.answer("priced", {"valid": True, "calls": 2, "tokens": 10, "cost_usd": 0.25})
    progress.answer("priced", {"valid": True, "calls": 2, "tokens": 10, "cost_usd": 0.125})
    progress.answer("unpriced", {"valid": True, "calls": 2, "tokens": 10, "cost_usd": None})
    progress.answer("unpriced", {"valid": True, "calls": 2, "tokens": 10, "cost_usd": 0.5})
    console = Console(file=io.StringIO(), width=200)
    console.print(progress._table(width=200))
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "spent" in drawn and "$0.3750" in drawn and "unknown" in drawn


# --- estimate before spending ---------------------------------------------------------------


def test_the_estimate_predicts_what_a_run_then_sends_without_calling_anything(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the server counts characters / 4 + 1; the judge fails the last answer after its
    # look-ahead was sent, which the estimate counts
    brain = ScriptedBrain({q: 4 for q in QUESTIONS}, default_ending="coherence")
    run_dir = tmp_path / "run"
    prices = str(prices_file(tmp_path))
    with OpenAIStub(brain, models=SERVED) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", prices)
        capsys.readouterr()
        assert main([*command, "--dry-run", "--answers-from", str(tmp_path)]) == 2
        assert main([*command, "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert stub.count() == 0 and not run_dir.exists(), "no call, nothing written"
        assert "Estimate for 2 question line(s)" in dry and "m-table" in dry
        assert main(command) == 0
    sent = json.loads((run_dir / "metadata.json").read_text())["usage"]
    capsys.readouterr()
    estimate_args = ["estimate", "-m", "m-table", "--questions", "2", "--prices", prices]
    estimate_args += ["--judge-model", "judge-model", "--embedding-model", "embedding-model"]
    assert main([*estimate_args, "--answers-from", str(run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    chains = result["models"][0]["chains"]
    assert (chains["low"], chains["mean"], chains["high"]) == (5, 5.0, 5)
    expected = result["models"][0]["expected"]
    assert expected == result["models"][0]["low"] == result["models"][0]["high"]
    for tokens in ("input_tokens", "output_tokens"):
        assert abs(expected[tokens] - sent[tokens]) < 0.05 * sent[tokens], tokens
    assert result["unpriced_models"] == []
    assert main([*estimate_args[:2], "m-unpriced", *estimate_args[3:]]) == 0
    text = capsys.readouterr().out
    assert "No price for: m-unpriced (cost unknown)" in text and "Run: unknown" in text


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"models": {"m": {"input": -1, "output": 1}}}),
        json.dumps({"models": {"m": {"input": 1}}}),
        json.dumps([1, 2]),
    ],
)
def test_a_bad_prices_file_is_one_line_and_nothing_is_written(
    content: str, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text(content)
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain()) as stub:
        assert main(args(stub, run_dir, ["m"], "--prices", str(bad))) == 2
        assert stub.count() == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prices" in err
    assert not run_dir.exists()


def test_cost_lines_with_repeats_say_per_repeat_against_the_mean_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two repeats scoring 16 and 14: the line names the cost per repeat against the mean
    score 15, never the summed 30 as a score; the chart plots the same pair."""
    from aidanbench.analysis.plots import cost_score_points
    from aidanbench.record.results import read_results
    from tests.builders import two_model_lines, write_run_dir

    lines = [line for line in two_model_lines() if line["model"] == "model-a"]
    for line in lines:
        for answer in line["answers"]:
            answer["calls"] = {r: {**c, "cost_usd": 0.01} for r, c in answer["calls"].items()}
    run_dir = write_run_dir(tmp_path / "run", lines)
    answers = sum(len(line["answers"]) for line in lines)
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    total = answers * 2 * 0.01  # generation and judge: embeddings are the run's
    assert (
        f"model-a @ 0.7: ${total:.4f} for 2 repeats, ${total / 2:.4f} per repeat "
        f"for mean score 15 (${total / 30:.4f} per valid answer)"
    ) in text
    assert "score 30" not in text
    assert cost_score_points(read_results(run_dir)) == [
        ("model-a @ 0.7", pytest.approx(total / 2), 15, False)
    ]
