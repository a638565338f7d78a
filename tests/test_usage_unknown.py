"""A provider that reports no usage: unknown stays unknown, and a dollar cap still works.

Several OpenAI-compatible servers send no ``usage`` object, or one with nulls. The local
server here answers as such a server does (its replies rewritten by a fault hook), so the
real clients, ledger, records and reports see exactly that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.testing import Fault, Kind, OpenAIStub, Reply, RequestInfo, ScriptedBrain

from .test_cost import QUESTIONS, SERVED, args, jsonl, prices_file

WITHOUT = {
    "absent": lambda payload: {k: v for k, v in payload.items() if k != "usage"},
    "nulls": lambda payload: {
        **payload,
        "usage": {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
    },
}
"""The two ways servers leave usage out."""


def no_usage(how: str) -> Callable[[RequestInfo], Fault]:
    """A fault hook answering every request normally, with its usage left out."""
    strip = WITHOUT[how]
    return lambda info: Fault(rewrite=lambda payload, _: strip(payload))


def zero_dollars(text: str) -> list[str]:
    """Lines that show a zero where a cost belongs."""
    return [line for line in text.splitlines() if "$0.0000" in line or "$0.00 " in line]


@pytest.mark.parametrize("how", sorted(WITHOUT))
def test_no_usage_is_unknown_in_every_output(
    how: str, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    with OpenAIStub(brain, faults=no_usage(how), models=SERVED) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", str(prices_file(tmp_path)))
        assert main(command) == 0
    run_out = capsys.readouterr()
    assert not zero_dollars(run_out.out + run_out.err), "no zero cost in the run's own output"
    assert "unknown" in run_out.err, "the live table's final state says so"
    assert "no usage" in run_out.err, "and counts the requests without usage"

    for answer in jsonl(run_dir / "answers.jsonl"):
        for role in ("generate", "judge"):
            stats = answer["calls"][role]
            assert stats["input_tokens"] is None and stats["output_tokens"] is None
            assert stats["cost_usd"] is None and stats["usage_missing"] == 1
            assert stats["estimated_cost_usd"] > 0
        embed = answer["calls"]["embed"]
        assert embed["input_tokens"] is None or embed["calls"] == 0, "a cached vector cost nothing"
        assert answer["cost_usd"] is None
    assert [q["cost_usd"] for q in jsonl(run_dir / "questions.jsonl")] == [None, None]

    ledger = jsonl(run_dir / "usage.jsonl")
    replies = [line for line in ledger if line["event"] == "usage"]
    assert replies and all(r["input_tokens"] is None and r["cost_usd"] is None for r in replies)
    assert all(r["estimated_input_tokens"] > 0 for r in replies)
    meta = json.loads((run_dir / "metadata.json").read_text())
    usage, totals = meta["usage"], meta["totals"]
    assert totals["dollars"] is None and totals["tokens"] is None
    assert usage["dollars"] is None and usage["tokens"] is None
    assert usage["without_usage"] == len(replies) == usage["replies"]
    assert usage["without_usage_models"]["m-table"] == 2 * 3, (
        "3 answers each; the third repeats the first (its vector cached), so no look-ahead"
    )
    assert usage["dollars_bound"] > 0
    assert totals["usage_missing"] > 0

    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert not zero_dollars(text)
    assert "m-table @ 0.7: unknown for score 4" in text
    assert f"{len(replies)} replies reported no usage" in text
    assert "requests without usage" in text
    assert main(["report", str(run_dir), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    run = payload["runs"][0]
    assert run["cost_usd"] is None and run["tokens"] is None and run["usage_missing"] > 0
    assert all(q["cost_usd"] is None for q in run["questions"])
    assert payload["cost"]["dollars"] is None and payload["cost"]["dollars_bound"] > 0

    html = (run_dir / "report.html").read_text()
    data = json.loads(html.split('id="data">', 1)[1].split("</script>", 1)[0])
    assert [g["row"]["cost_usd"] for g in data["groups"]] == [None]
    assert [g["row"]["tokens"] for g in data["groups"]] == [None]
    assert [g["cost_text"] for g in data["groups"]] == ["unknown"]
    assert data["groups"][0]["row"]["usage_missing"] == run["usage_missing"] > 0


def metered_dollars(tmp_path: Path, prices: str) -> float:
    """What the same run costs when the server does report its usage."""
    run_dir = tmp_path / "metered"
    with OpenAIStub(ScriptedBrain({q: 10 for q in QUESTIONS}), models=SERVED) as stub:
        assert main(args(stub, run_dir, ["m-table"], "--prices", prices, "--questions", "1")) == 0
    meta: dict[str, Any] = json.loads((run_dir / "metadata.json").read_text())
    return float(meta["usage"]["dollars"])


def test_the_run_budget_counts_replies_without_usage_at_their_estimate(
    api_key: str, tmp_path: Path
) -> None:
    prices = str(prices_file(tmp_path))
    run_dir = tmp_path / "run"
    brain = ScriptedBrain({q: 10 for q in QUESTIONS})
    with OpenAIStub(brain, faults=no_usage("absent"), models=SERVED) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", prices, "--concurrency", "1")
        assert main([*command, "--max-cost", "1.0"]) == 0
        questions = jsonl(run_dir / "questions.jsonl")
        assert [q["stop_reason"] for q in questions] == ["budget", None]
        assert not any(QUESTIONS[1] in r.prompt for r in stub.requests), "never started"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["usage"]["dollars"] is None
    assert meta["usage"]["dollars_bound"] >= 1.0
    # the estimate is an upper one: the whole first question, metered, costs more than
    # the budget that the estimate stopped well before its end
    assert metered_dollars(tmp_path, prices) > 1.0


def test_a_question_cap_counts_replies_without_usage_at_their_estimate(
    api_key: str, tmp_path: Path
) -> None:
    prices = str(prices_file(tmp_path))
    run_dir = tmp_path / "run"
    with OpenAIStub(
        ScriptedBrain({q: 10 for q in QUESTIONS}), faults=no_usage("nulls"), models=SERVED
    ) as stub:
        command = args(stub, run_dir, ["m-table"], "--prices", prices, "--questions", "1")
        assert main([*command, "--max-question-cost", "1.0"]) == 0
    (line,) = jsonl(run_dir / "questions.jsonl")
    assert line["stop_reason"] == "max_question_cost" and line["error"] is None
    assert 0 < line["score"] < 10


class ReportsZero(ScriptedBrain):
    """Replies to the models named ``zero`` as OpenAI's do: 0 cached and 0 reasoning tokens
    reported (``prompt_tokens_details``, ``completion_tokens_details``); to the others, no
    details."""

    def __init__(self, *args: Any, zero: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zero = zero

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        reply = super().chat(kind, model, prompt, body)
        return replace(reply, cached_tokens=0, reasoning_tokens=0) if model in self.zero else reply


ZERO = ("m-table", "judge-model")
"""The models whose replies report zero cached and reasoning tokens (``ReportsZero``)."""


def summed(values: list[Any]) -> Any:
    """A sum that is unknown (None) once one part is."""
    return None if any(v is None for v in values) else sum(values)


def test_a_reported_zero_is_zero_and_an_unreported_count_unknown_in_every_file(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ReportsZero({q: 2 for q in QUESTIONS}, zero=ZERO), models=SERVED) as stub:
        assert main(args(stub, run_dir, ["m-table", "m-provider"])) == 0
    ledger = jsonl(run_dir / "usage.jsonl")
    replies = [line for line in ledger if line["event"] == "usage"]
    answers = jsonl(run_dir / "answers.jsonl")
    questions = jsonl(run_dir / "questions.jsonl")
    meta = json.loads((run_dir / "metadata.json").read_text())
    by_role_model = meta["usage"]["by_role_model"]
    roles = {"generate": "model", "judge": "judge"}
    for field in ("reasoning_tokens", "cached_input_tokens"):
        for reply in replies:
            reported = 0 if reply["model"] in ZERO or reply["role"] == "embeddings" else None
            assert reply[field] == reported, (field, reply)
        for answer in answers:
            for role, stats in answer["calls"].items():
                if role in roles:
                    model = answer["model"] if role == "generate" else "judge-model"
                    assert stats[field] == (0 if model in ZERO else None), (field, role, answer)
            if field == "reasoning_tokens":
                assert answer[field] == (0 if answer["model"] in ZERO else None)
        for line in questions:
            if line["speculative"]:
                assert line["speculative"][field] == (0 if line["model"] in ZERO else None)
        for key, figures in by_role_model.items():
            role, model = key.split(":", 1)
            lines = [r[field] for r in replies if (r["role"], r["model"]) == (role, model)]
            assert (
                figures[field]
                == summed(lines)
                == (0 if model in ZERO or role == "embeddings" else None)
            )
            recorded = [
                a["calls"][r][field]
                for a in answers
                for r in roles
                if roles[r] == role and (a["model"] if r == "generate" else "judge-model") == model
            ]
            if role == "model":
                recorded += [
                    q["speculative"][field]
                    for q in questions
                    if q["model"] == model and q["speculative"]
                ]
            if recorded:
                assert summed(recorded) == figures[field], (field, key)
        assert meta["usage"][field] is None, "m-provider reported none: the run's sum is unknown"
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    assert "(unknown cached input, unknown reasoning)" in capsys.readouterr().out
    assert main(["report", str(run_dir), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["cost"]["sent"]["reasoning_tokens"] is None
