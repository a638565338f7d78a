"""Money and warnings said once and right: a model's dollars split into its generations and
the judge's work on its answers (an unpriced judge hides no priced part), the unpriced hint
names --prices, and a run ends with the warnings its report prints."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import Progress, RunSpec, run_sync
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_settings

QUESTIONS = bundled_questions(2)


def run_with(stub: OpenAIStub, run_dir: Path, **settings: Any) -> None:
    chosen = stub_settings(stub.base_url)
    fields = chosen.model_dump(include=set(chosen.model_fields_set) - {"model"})
    spec = RunSpec(
        models=["gpt-4o-mini"],
        questions=list(QUESTIONS),
        run_dir=run_dir,
        settings={**fields, "embedding_model": "text-embedding-3-large", **settings},
        preflight=False,
    )
    run_sync(spec, progress=Progress(out=io.StringIO(), live=False))


def test_an_unpriced_judge_leaves_a_priced_models_generations_known(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain(dict.fromkeys(QUESTIONS, 3))) as stub:
        run_with(stub, run_dir, judge_model="judge-without-a-price")
    capsys.readouterr()
    assert main(["report", "--json", str(run_dir)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["cost_usd"] is None, "the whole is unknown"
    parts = row["cost_parts"]
    assert parts["judging"] is None and parts["generations"] > 0, "its own part stays known"
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "its generations $" in text and "judging its answers unknown" in text
    assert "No price for: judge-without-a-price" in text and "--prices FILE" in text
    assert "by role: the models $" in text and "the judge unknown" in text
    assert "not complete" not in text, "every request replied: unpriced, not incomplete"


def test_the_parts_sum_to_the_total(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain(dict.fromkeys(QUESTIONS, 3))) as stub:
        run_with(stub, run_dir, judge_model="o1-mini")
    capsys.readouterr()
    assert main(["report", "--json", str(run_dir)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["cost_parts"]["judging"] > 0
    assert sum(row["cost_parts"].values()) == pytest.approx(row["cost_usd"])


def test_a_run_ends_with_the_warnings_its_report_prints(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A successor judge at o1-mini's uncalibrated 15 (README's second command is this case)."""
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain(dict.fromkeys(QUESTIONS, 2))) as stub:
        argv = ["run", "-m", "gpt-4o-mini", "--questions", "2", "--run-dir", str(run_dir)]
        argv += ["--judge-model", "gpt-5.4-mini", "--no-preflight"]
        for role in ("", "judge-", "embedding-"):
            argv += [f"--{role}base-url", stub.base_url, f"--{role}api-key-env", "OPENAI_API_KEY"]
        capsys.readouterr()
        assert main(argv) == 0
    ran = capsys.readouterr().out
    assert main(["report", str(run_dir)]) == 0
    reported = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning")]
    assert reported and "uncalibrated" in reported[0]
    assert [line for line in ran.splitlines() if line.startswith("warning")] == reported
