"""``estimate --answers-from`` a finished run prices the same settings at what the run cost.

The runs are real: the command line against the local server, which replays the published
2024 run (``testing.ReplayBrain``, as ``aidanbench demo`` serves it) or scripts its answers
and reports, per model, a zero or nothing for the details of a reply's usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.testing import OpenAIStub
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain
from aidanbench.testing.settings import stub_flags

from .test_cost import QUESTIONS, SERVED
from .test_usage_unknown import ReportsZero

REPLAYED = ("gpt-4-turbo", "meta-llama/llama-3.1-70b-instruct")
"""Two models of the published run, one dear and one cheap (issue 49's replay)."""

CLOSE = 0.25
"""How far the estimate may be from the run's recorded dollars, as a share of them."""


def model_flags(models: tuple[str, ...]) -> list[str]:
    return [flag for model in models for flag in ("-m", model)]


def estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["estimate", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def recorded_dollars(run_dir: Path) -> float:
    """What the run spent, every request counted (``metadata.json``, as ``report`` says it)."""
    dollars = json.loads((run_dir / "metadata.json").read_text())["usage"]["dollars"]
    assert isinstance(dollars, float) and dollars > 0
    return dollars


def test_the_estimate_of_a_replayed_run_is_within_a_quarter_of_what_it_cost(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "replay"
    settings = [*model_flags(REPLAYED), "--questions", "10"]
    with OpenAIStub(ReplayBrain(published_chains()), models=REPLAYED) as stub:
        command = ["run", *settings, "--run-dir", str(run_dir), *stub_flags(stub.base_url)]
        # one question has no recording for gpt-4-turbo: the server refuses it (exit 1)
        assert main(command) == 1
        spent = recorded_dollars(run_dir)
        capsys.readouterr()
        assert main([*command, "--dry-run", "--answers-from", str(run_dir)]) == 0
        dry = capsys.readouterr().out
    result = estimate_json(capsys, *settings, "--answers-from", str(run_dir))
    expected = result["dollars"]["expected"]
    assert abs(expected - spent) <= CLOSE * spent, (expected, spent)
    for row in result["models"]:
        judge = row["per_request"]["judge"]
        assert judge["model"] == "o1-mini" and judge["output_basis"].startswith("measured: ")
        assert judge["output_tokens"]["expected"] < 20, "the judge's replies as recorded"
        assert judge["reasoning_tokens"] is None, "the server reports none: unknown"
        assert row["per_request"]["model"]["output_basis"].startswith("measured: ")
        assert row["chains"]["source"].endswith(f" question lines of {row['model']}")
    assert main(["estimate", *settings, "--answers-from", str(run_dir)]) == 0
    assert capsys.readouterr().out == dry, "run --dry-run prints the same estimate"


def zero_or_unreported_run(tmp_path: Path, name: str, zero: tuple[str, ...]) -> Path:
    """A run of m-table judged by o1-mini, whose replies report 0 reasoning and cached tokens
    for the models in ``zero`` and no details for the others."""
    run_dir = tmp_path / name
    brain = ReportsZero({q: 3 for q in QUESTIONS}, zero=zero)
    with OpenAIStub(brain, models=(*SERVED, "o1-mini")) as stub:
        command = ["run", "-m", "m-table", "--questions", "2", "--run-dir", str(run_dir)]
        command += [*stub_flags(stub.base_url), "--judge-model", "o1-mini"]
        assert main([*command, "--embedding-model", "embedding-model"]) == 0
    return run_dir


def test_a_recorded_zero_is_used_as_recorded_and_every_assumption_is_printed(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zero = zero_or_unreported_run(tmp_path, "zero", ("m-table", "o1-mini"))
    unreported = zero_or_unreported_run(tmp_path, "unreported", ())
    settings = ["-m", "m-table", "--questions", "2", "--embedding-model", "embedding-model"]
    judged = [json.loads(x)["calls"]["judge"] for x in (zero / "answers.jsonl").open()]
    per_reply = sum(c["output_tokens"] for c in judged) / sum(c["calls"] for c in judged)

    reported = estimate_json(capsys, *settings, "--answers-from", str(zero))["models"][0]
    judge = reported["per_request"]["judge"]
    assert judge["reasoning_tokens"] == {"low": 0, "expected": 0, "high": 0}, "0 as recorded"
    assert judge["output_tokens"]["expected"] == per_reply
    assert reported["expected"]["reasoning_tokens"] == 0
    silent = estimate_json(capsys, *settings, "--answers-from", str(unreported))["models"][0]
    judge = silent["per_request"]["judge"]
    assert judge["reasoning_tokens"] is None and silent["expected"]["reasoning_tokens"] is None
    assert judge["output_tokens"]["expected"] == per_reply, "in the output, none assumed"
    assert silent["expected"]["dollars"] == reported["expected"]["dollars"]

    assert main(["estimate", *settings, "--answers-from", str(unreported)]) == 0
    text = capsys.readouterr().out
    assert f"from {unreported}; prices: bundled list prices" in text
    assert "m-table: chains of 4 / 4.0 / 4 answers (10th percentile / mean / 90th) of " in text
    assert "from 2 question lines of m-table" in text
    assert (
        f"  judge (o1-mini): {per_reply:,.0f} output tokens a request, of which reasoning "
        "unknown (measured: 8 replies, their reasoning included but not reported apart); "
    ) in text
    assert "  embeddings (embedding-model): 0.2" in text
    assert "Assumed: each question's chain as long as its model's chains" in text

    assert main(["estimate", *settings]) == 0
    text = capsys.readouterr().out
    assert "m-table: chains of " in text and "from 49 question lines of every model" in text
    assert (
        "  judge (o1-mini): 1,034 / 4,618 / 8,202 output tokens a request, of which reasoning "
        "1,024 / 4,608 / 8,192 (assumed: 10 visible tokens; reasoning assumed: effort "
        "medium's published budget band); 0.250 input tokens per prompt byte (assumed: 4 "
        "bytes per token)" in text
    ), "a judge with no record of its own reasoning, which OpenAI's o1-mini does"
