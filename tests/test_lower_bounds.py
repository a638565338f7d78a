"""``≥`` and the answer cap wherever a score is printed or exported: rescore's table of
recorded and rescored totals and its note, report's headline and cap line (text, ``--json``,
the page), and the exports' per-chain records of an errored chain."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from aidanbench.analysis.view import load_source, view_data
from aidanbench.cli.main import main
from aidanbench.record.files import METADATA

from .builders import QUESTIONS, chain, question_line, write_run_dir


@pytest.fixture
def errored_run(tmp_path: Path) -> Path:
    """One model: two finished questions (4 and 2 valid) and one that errored after 3."""
    lines = [
        question_line("m", QUESTIONS[0], chain(4)),
        question_line("m", QUESTIONS[1], chain(2)),
        question_line("m", QUESTIONS[2], chain(3, fail=None), error="model: HTTP 500"),
    ]
    run_dir = write_run_dir(tmp_path / "run", lines)
    meta = json.loads((run_dir / METADATA).read_text())
    meta["scoring_settings"] = {"m": {"max_answers": 50}}
    (run_dir / METADATA).write_text(json.dumps(meta))
    return run_dir


def test_rescore_marks_a_recorded_lower_bound_and_says_it(
    errored_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["rescore", str(errored_run), "--coherence-threshold", "15"]
    assert main([*argv, "--novelty-threshold", "0.15"]) == 0
    text = capsys.readouterr().out
    table = text[text.index("Recorded vs rescored totals") :]
    row = next(line for line in table.splitlines() if line.startswith("│ m "))
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[2:5] == ["≥ 9", "≥ 9", "~ +0"], "both totals are lower bounds"
    assert "so these scores are exact" not in text
    assert "1 other line(s) are lower bounds (≥) whatever" in " ".join(text.split())
    assert "headline (count): m @ 0.7: ≥ 9" in text
    assert main(["rescore", "--json", *argv[1:], "--novelty-threshold", "0.15"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["original_lower_bound"] is True and run["lower_bound"] is True


def test_the_answer_cap_is_in_every_report(
    errored_run: Path, capsys: pytest.CaptureFixture[str], reference_run: Path
) -> None:
    assert main(["report", str(errored_run)]) == 0
    text = capsys.readouterr().out
    assert "answer cap (max_answers): 50" in text
    assert "headline (count): m @ 0.7: ≥ 9" in text
    assert main(["report", "--json", str(errored_run)]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["answer_cap"] == 50
    data, _ = view_data([load_source(errored_run)])
    assert data["groups"][0]["answer_cap"] == "50"
    assert main(["report", str(reference_run)]) == 0
    assert "answer cap (max_answers): unknown (not recorded)" in capsys.readouterr().out


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("inspect_ai", "huggingface_hub")),
    reason="needs the [export] extra",
)
def test_an_errored_chain_is_a_lower_bound_in_the_exports(
    errored_run: Path, tmp_path: Path
) -> None:
    from inspect_ai.log import read_eval_log

    out = tmp_path / "out"
    assert (
        main(["export", "--format", "every-eval-ever", "-o", str(out / "eee"), str(errored_run)])
        == 0
    )
    (samples,) = (out / "eee").rglob("*.jsonl")
    records = {r["input"]["raw"]: r for r in map(json.loads, samples.read_text().splitlines())}
    assert records[QUESTIONS[2]]["metadata"]["score_is_lower_bound"] == "true"
    assert records[QUESTIONS[0]]["metadata"]["score_is_lower_bound"] == "false"
    assert (
        main(["export", "--format", "inspect", "-o", str(out / "inspect"), str(errored_run)]) == 0
    )
    (log,) = (out / "inspect").rglob("*.eval")
    samples_read = read_eval_log(str(log)).samples or []
    bounds = {s.metadata["question"]: s.metadata["score_is_lower_bound"] for s in samples_read}
    assert bounds == {QUESTIONS[0]: False, QUESTIONS[1]: False, QUESTIONS[2]: True}
