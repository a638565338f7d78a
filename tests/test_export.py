"""``aidanbench export``: each format read back by its own library or schema.

The demo run (the published 2024 run replayed through ``aidanbench demo``) is exported in
every format; Inspect's ``read_eval_log``, the Hub's ``parse_eval_result_entries`` and
``jsonschema`` with Every Eval Ever's own schemas (bundled in ``tests/data``) read the
files back, and the published totals, the report's figures and each answer's scores
must come through intact.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.nodes.prompts import render_generate
from tests.builders import (
    REFERENCE_SCORES,
    REFERENCE_TOTALS,
    chain,
    question_line,
    two_model_lines,
    write_run_dir,
)
from tests.conftest import REFERENCE_RUN

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("inspect_ai", "huggingface_hub")),
    reason="needs the [export] extra",
)
"""Each library is imported by the tests that read with it (inspect_ai takes seconds to
import), not when the tests are collected."""

COMMAND = Path(sys.executable).with_name("aidanbench")
SCHEMAS = Path(__file__).parent / "data" / "every_eval_ever"
SCHEMA_SHA256 = {
    "eval.schema.json": "215f04c9a0d7a13f83c49ccd85f97018f39ad1e49af7a3a561841418e9ee08c9",
    "instance_level_eval.schema.json": (
        "b16b7fa7f0aa32763444179d94ffb2336ddb12c3fd2903835fe491666c1ff3e6"
    ),
}
PUBLISHED_ANSWERS = 1161
"""Answers of the published run, failing ones included (reference README)."""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The published run replayed by ``aidanbench demo`` into a run directory."""
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    done = subprocess.run(
        [str(COMMAND), "demo", "--run-dir", str(run_dir), "--latency-scale", "0"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def export(capsys: pytest.CaptureFixture[str], *args: str) -> list[Path]:
    """``aidanbench export ARGS``; the paths it printed, after checking the line that says
    what it wrote (on stderr: stdout holds the paths alone, for scripts)."""
    status = main(["export", *args])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    written = [Path(line) for line in captured.out.splitlines()]
    fmt, out = args[args.index("--format") + 1], args[args.index("-o") + 1]
    said = f"aidanbench export: wrote {len(written)} {fmt} file(s) under {out}"
    if fmt == "inspect":
        said += f"; open them with: inspect view --log-dir {out}"
    assert captured.err.splitlines() == [said]
    return written


def report(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    """``report --json``'s run rows by model: the figures every export must repeat."""
    assert main(["report", str(path), "--json"]) == 0
    return {run["model"]: run for run in json.loads(capsys.readouterr().out)["runs"]}


def validator(name: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="needs the [dev] extra")
    schema = json.loads((SCHEMAS / name).read_text("utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_bundled_schemas_are_the_recorded_files() -> None:
    for name, digest in SCHEMA_SHA256.items():
        assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == digest, name
    assert "MIT License" in (SCHEMAS / "LICENSE").read_text()


@pytest.mark.e2e
def test_inspect_logs_read_back_with_the_published_totals(
    demo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import inspect_ai.log as inspect_log

    figures = report(capsys, demo_run)
    metadata = json.loads((demo_run / "metadata.json").read_text())
    written = export(capsys, str(demo_run), "--format", "inspect", "-o", str(tmp_path))
    assert len(written) == len(REFERENCE_TOTALS)
    answers = 0
    for path in written:
        log = inspect_log.read_eval_log(str(path))
        model = log.eval.model
        assert log.status == "success"
        assert log.eval.task == "aidanbench"
        assert log.eval.model_generate_config.temperature == 0.7
        assert log.eval.model_roles["judge"].model == "o1-mini"
        assert log.eval.model_roles["embedding"].model == "text-embedding-3-large"
        provenance = log.eval.metadata["aidanbench"]
        assert provenance["prompts_sha256"] == metadata["prompts_sha256"]
        assert provenance["questions_sha256"] == metadata["questions_sha256"]
        assert provenance["thresholds"]["coherence"] == 15.0
        assert provenance["thresholds"]["novelty"] == 0.15
        assert provenance["repeats"] == 1
        assert log.eval.metadata["cost"]["cost_usd"] == figures[model]["cost_usd"]
        score = {s.name: s for s in log.results.scores}["score"]
        assert score.metrics["total"].value == REFERENCE_TOTALS[model]
        assert log.results.total_samples == len(REFERENCE_SCORES[model])
        by_id = {s.id: s for s in log.samples}
        assert [by_id[n].scores["score"].value for n in sorted(by_id)] == REFERENCE_SCORES[model]
        for sample in log.samples:
            assert sample.epoch == 1
            detail = sample.metadata["answers"]
            assert len(detail) == len(sample.messages) // 2 == sample.scores["score"].value + 1
            assert [m.role for m in sample.messages] == ["user", "assistant"] * len(detail)
            earlier = [a["answer"] for a in detail]
            sent = [
                render_generate(sample.metadata["question"], earlier[:k])
                for k in range(len(detail))
            ]
            assert [m.text for m in sample.messages[::2]] == sent, "each prompt as the model got it"
            assert sample.input == sent[0]
            assert sum(a["valid"] for a in detail) == sample.scores["score"].value
            assert detail[-1]["valid"] is False
            assert detail[-1]["stop_reason"] == sample.metadata["stop_reason"]
            answers += len(detail)
    assert answers == PUBLISHED_ANSWERS


@pytest.mark.e2e
def test_every_eval_ever_records_follow_its_schemas(
    demo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aggregate_schema = validator("eval.schema.json")
    instance_schema = validator("instance_level_eval.schema.json")
    figures = report(capsys, demo_run)
    written = export(capsys, str(demo_run), "--format", "every-eval-ever", "-o", str(tmp_path))
    aggregates = [p for p in written if p.suffix == ".json"]
    assert len(aggregates) == len(REFERENCE_TOTALS)
    answers = 0
    for path in aggregates:
        record = json.loads(path.read_text("utf-8"))
        assert not list(aggregate_schema.iter_errors(record))
        model = record["model_info"]["name"]
        results = {r["evaluation_result_id"]: r for r in record["evaluation_results"]}
        assert results["aidanbench.score"]["score_details"]["score"] == REFERENCE_TOTALS[model]
        assert results["aidanbench.novelty_sum"]["score_details"]["score"] == pytest.approx(
            figures[model]["novelty_sum"]
        )
        config = results["aidanbench.score"]["metric_config"]
        judge = config["llm_scoring"]["judges"][0]["model_info"]["name"]
        assert judge == "o1-mini"
        details = config["additional_details"]
        assert details["embedding_model"] == "text-embedding-3-large"
        assert json.loads(details["thresholds"])["coherence"] == 15.0
        score_details = results["aidanbench.score"]["score_details"]["details"]
        assert json.loads(score_details["cost_usd"]) == figures[model]["cost_usd"]

        detailed = record["detailed_evaluation_results"]
        samples = tmp_path / detailed["file_path"]
        assert samples.parent == path.parent and samples.name == f"{path.stem}_samples.jsonl"
        assert hashlib.sha256(samples.read_bytes()).hexdigest() == detailed["checksum"]
        lines = [json.loads(line) for line in samples.read_text("utf-8").splitlines()]
        assert len(lines) == detailed["total_rows"] == len(REFERENCE_SCORES[model])
        for line in lines:
            assert not list(instance_schema.iter_errors(line))
            assert line["evaluation_id"] == record["evaluation_id"]
            per_answer = json.loads(line["metadata"]["answers"])
            assert len(per_answer) == len(line["answer_attribution"])
            assert sum(a["valid"] for a in per_answer) == line["evaluation"]["score"]
            assert line["answer_attribution"][-1]["is_terminal"]
            answers += len(per_answer)
        by_sample = sorted(lines, key=lambda line: line["sample_id"])
        assert [line["evaluation"]["score"] for line in by_sample] == REFERENCE_SCORES[model]
    assert answers == PUBLISHED_ANSWERS


@pytest.mark.e2e
def test_hub_eval_results_parse_with_the_published_totals(
    demo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import huggingface_hub as hub
    import yaml

    written = export(
        capsys,
        str(demo_run),
        *("--format", "hf", "-o", str(tmp_path)),
        *("--hf-dataset", "someone/aidanbench", "--hf-source-url", "https://example.org/logs"),
    )
    assert len(written) == len(REFERENCE_TOTALS)
    found = {}
    for path in written:
        assert path.parent.name == ".eval_results" and path.name == "aidanbench.yaml"
        (entry,) = hub.parse_eval_result_entries(yaml.safe_load(path.read_text("utf-8")))
        assert entry.dataset_id == "someone/aidanbench"
        assert entry.task_id == "default"
        assert entry.source_url == "https://example.org/logs"
        assert "judge o1-mini" in entry.notes and "embeddings text-embedding-3-large" in entry.notes
        assert "coherence > 15, novelty > 0.15" in entry.notes
        model = entry.notes.split("; ")[1].removeprefix("model ")
        found[model] = entry.value
    assert found == REFERENCE_TOTALS


def test_hf_without_a_dataset_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status = main(["export", str(REFERENCE_RUN), "--format", "hf", "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "--hf-dataset" in err
    assert not out.exists()


def test_a_bad_input_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    out = tmp_path / "out"
    status = main(["export", str(REFERENCE_RUN), str(bad), "--format", "inspect", "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "bad.json" in err
    assert not list(out.glob("*"))


def test_the_published_results_file_exports_with_unknowns_left_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results file records no judge, prompts or cost: the exports say unknown, never 0."""
    import inspect_ai.log as inspect_log

    written = export(capsys, str(REFERENCE_RUN), "--format", "inspect", "-o", str(tmp_path / "i"))
    totals = {}
    for path in written:
        log = inspect_log.read_eval_log(str(path))
        totals[log.eval.model] = (
            {s.name: s for s in log.results.scores}["score"].metrics["total"].value
        )
        assert log.eval.model_roles is None
        assert log.eval.metadata["cost"] is None
        assert log.eval.metadata["aidanbench"]["judge_model"] is None
    assert totals == REFERENCE_TOTALS
    written = export(
        capsys, str(REFERENCE_RUN), "--format", "every-eval-ever", "-o", str(tmp_path / "e")
    )
    schema = validator("eval.schema.json")
    for path in (p for p in written if p.suffix == ".json"):
        record = json.loads(path.read_text("utf-8"))
        assert not list(schema.iter_errors(record))
        result = record["evaluation_results"][0]
        assert "llm_scoring" not in result["metric_config"]
        assert result["metric_config"]["additional_details"]["judge_model"] == "unknown"
        assert result["score_details"]["details"]["cost_usd"] == "unknown"


def test_variants_repeats_and_intervals_come_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A variant label stays in the model's name; with repeats, each format carries the
    report's bootstrap interval."""
    import huggingface_hub as hub
    import inspect_ai.log as inspect_log
    import yaml

    lines = two_model_lines()
    for line in lines:
        if line["model"] == "model-a":
            line["model"] = "acme/model-a@high"
            line["answers"] = [{**a} for a in line["answers"]]
    run_dir = write_run_dir(tmp_path / "run", lines)
    figures = report(capsys, run_dir)
    interval = figures["acme/model-a@high"]["score_interval"]
    assert interval is not None

    written = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    logs = {log.eval.model: log for log in map(inspect_log.read_eval_log, map(str, written))}
    metrics = {s.name: s for s in logs["acme/model-a@high"].results.scores}["score"].metrics
    assert [metrics["ci_lower"].value, metrics["ci_upper"].value] == interval
    assert metrics["total"].value == figures["acme/model-a@high"]["score"]
    assert logs["model-b"].status == "error"
    errored = [s for s in logs["model-b"].samples if s.error is not None]
    assert len(errored) == 1 and "503" in errored[0].error.message

    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    (aggregate,) = [p for p in written if p.suffix == ".json" and "acme" in p.parts]
    assert aggregate.parent.name == "model-a@high"
    record = json.loads(aggregate.read_text("utf-8"))
    assert not list(validator("eval.schema.json").iter_errors(record))
    ci = record["evaluation_results"][0]["score_details"]["uncertainty"]["confidence_interval"]
    assert [ci["lower"], ci["upper"]] == interval

    written = export(
        capsys,
        str(run_dir),
        *("--format", "hf", "-o", str(tmp_path / "h"), "--hf-dataset", "x/aidanbench"),
    )
    (mine,) = [p for p in written if "model-a@high" in str(p)]
    (entry,) = hub.parse_eval_result_entries(yaml.safe_load(mine.read_text("utf-8")))
    assert entry.value == figures["acme/model-a@high"]["score"]
    assert f"95% CI {interval[0]:g}-{interval[1]:g}" in entry.notes
    assert "2 repeats" in entry.notes


def test_a_question_line_with_unknown_cost_exports_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = question_line("m", "Why?", chain(2))
    for answer in line["answers"]:
        answer["calls"] = {role: {**c, "cost_usd": None} for role, c in answer["calls"].items()}
    run_dir = write_run_dir(tmp_path / "run", [line])
    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    record = json.loads(next(p for p in written if p.suffix == ".json").read_text("utf-8"))
    assert record["evaluation_results"][0]["score_details"]["details"]["cost_usd"] == "unknown"
    samples = next(p for p in written if p.suffix == ".jsonl").read_text("utf-8")
    assert json.loads(samples)["metadata"]["cost_usd"] == "unknown"


def export_limited(args: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    """``aidanbench export ARGS`` in a process whose files may hold ``limit`` bytes at most
    (RLIMIT_FSIZE): its writes fail past that, as on a full disk."""
    import resource
    import signal

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [str(COMMAND), "export", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.e2e
def test_an_export_that_fails_half_way_leaves_the_earlier_one_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    out = tmp_path / "exports" / "eee"
    args = [str(run_dir), "--format", "every-eval-ever", "-o", str(out)]
    export(capsys, *args)
    before = tree(out)
    samples = max((p for p in before if p.endswith(".jsonl")), key=lambda p: len(before[p]))
    failed = export_limited(args, len(before[samples]) // 2)
    assert failed.returncode == 2, failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert f"cannot write the export to {out}" in line
    assert tree(out) == before, "the earlier export, byte for byte"
    assert sorted(p.name for p in out.parent.iterdir()) == ["eee"], "no temporary folder left"

    fresh = tmp_path / "exports" / "fresh"
    failed = export_limited([*args[:-1], str(fresh)], len(before[samples]) // 2)
    assert failed.returncode == 2 and not fresh.exists(), "nothing, rather than a part"


def test_two_rows_written_to_one_file_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = two_model_lines()
    names = {"model-a": "MODEL@a/b", "model-b": "MODEL@a__b"}
    for line in lines:
        line["model"] = names[line["model"]]
    run_dir = write_run_dir(tmp_path / "run", lines)
    out = tmp_path / "hf"
    args = ["export", str(run_dir), "--format", "hf", "-o", str(out), "--hf-dataset", "x/y"]
    assert main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "MODEL@a/b and MODEL@a__b would both be written to" in line
    assert not out.exists()


def test_a_lower_bound_is_marked_in_every_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A chain a spending cap stopped makes the row's score a lower bound: ``report``
    says ``≥``, and so do the Hub's notes, the Inspect log's scores and Every Eval Ever's
    details."""
    import huggingface_hub as hub
    import inspect_ai.log as inspect_log
    import yaml

    capped = question_line("acme/m", "Why?", chain(3, fail=None))
    capped["stop_reason"] = "budget"
    run_dir = write_run_dir(tmp_path / "run", [capped, question_line("acme/m", "How?", chain(2))])
    figures = report(capsys, run_dir)["acme/m"]
    assert figures["lower_bound"] and figures["score"] == 5

    (hf,) = export(
        capsys, str(run_dir), "--format", "hf", "-o", str(tmp_path / "h"), "--hf-dataset", "x/a"
    )
    (entry,) = hub.parse_eval_result_entries(yaml.safe_load(hf.read_text("utf-8")))
    assert entry.value == 5 and "score ≥ 5 (a lower bound" in entry.notes

    (log_path,) = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    log = inspect_log.read_eval_log(str(log_path))
    score = {s.name: s for s in log.results.scores}["score"]
    assert score.metadata["lower_bound"] is True
    assert score.metrics["total"].metadata == {"lower_bound": True}
    assert log.results.metadata["headline"] == 5
    assert log.results.metadata["headline_text"] == "≥ 5"
    explained = {s.id: s.scores["score"].explanation for s in log.samples}
    assert explained[1].startswith("≥ 3 valid answers") and explained[2].startswith("2 valid")

    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    record = json.loads(next(p for p in written if p.suffix == ".json").read_text("utf-8"))
    details = record["evaluation_results"][0]["score_details"]["details"]
    assert details["score_is_lower_bound"] == "true"


def test_inspect_usage_totals_are_the_reports_with_look_aheads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line with discarded look-aheads: the log's model usage adds up to ``report
    --json``'s tokens and dollars, and to its own metadata's cost."""
    import inspect_ai.log as inspect_log

    line = question_line("acme/m", "Why?", chain(2))
    for answer in line["answers"]:
        answer["calls"] = {role: {**c, "cost_usd": 0.001} for role, c in answer["calls"].items()}
    look_ahead = {"served_model": "stub", "latency_s": 1.0, "input_tokens": 300}
    line["speculative"] = {**look_ahead, "output_tokens": 70, "calls": 2, "cost_usd": 0.004}
    run_dir = write_run_dir(tmp_path / "run", [line])
    figures = report(capsys, run_dir)["acme/m"]
    assert figures["tokens"] == 3 * 240 + 370

    (path,) = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    log = inspect_log.read_eval_log(str(path))
    usage = log.stats.model_usage.values()
    assert sum(u.total_tokens for u in usage) == figures["tokens"]
    assert sum(u.total_cost or 0 for u in usage) == pytest.approx(figures["cost_usd"])
    assert log.eval.metadata["cost"]["cost_usd"] == pytest.approx(figures["cost_usd"])
    (sample,) = log.samples
    assert sum(u.total_tokens for u in sample.model_usage.values()) == figures["tokens"]


@pytest.mark.parametrize(("cap", "shown"), [(3, "3"), (None, "none")])
def test_the_answer_cap_is_in_every_exports_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cap: int | None, shown: str
) -> None:
    """``--max-answers`` (none: the benchmark's, no cap) in the Hub's notes, the Inspect
    log's metadata and Every Eval Ever's generation config."""
    import huggingface_hub as hub
    import inspect_ai.log as inspect_log
    import yaml

    stop = chain(3, fail=None) if cap else chain(3)
    run_dir = write_run_dir(tmp_path / "run", [question_line("acme/m", "Why?", stop)])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    metadata["scoring_settings"] = {"acme/m": {"max_answers": cap, "cot": False}}
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    (hf,) = export(
        capsys, str(run_dir), "--format", "hf", "-o", str(tmp_path / "h"), "--hf-dataset", "x/a"
    )
    (entry,) = hub.parse_eval_result_entries(yaml.safe_load(hf.read_text("utf-8")))
    assert f"answer cap {shown}" in entry.notes.split("; ")
    (log_path,) = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    assert inspect_log.read_eval_log(str(log_path)).eval.metadata["max_answers"] == (cap or shown)
    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    record = json.loads(next(p for p in written if p.suffix == ".json").read_text("utf-8"))
    config = record["evaluation_results"][0]["generation_config"]["additional_details"]
    assert config["max_answers"] == shown


def test_an_unrecorded_answer_cap_is_unknown_in_every_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import huggingface_hub as hub
    import inspect_ai.log as inspect_log
    import yaml

    run_dir = write_run_dir(tmp_path / "run", [question_line("acme/m", "Why?", chain(2))])
    (hf,) = export(
        capsys, str(run_dir), "--format", "hf", "-o", str(tmp_path / "h"), "--hf-dataset", "x/a"
    )
    (entry,) = hub.parse_eval_result_entries(yaml.safe_load(hf.read_text("utf-8")))
    assert "answer cap unknown" in entry.notes.split("; ")
    (log_path,) = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    assert inspect_log.read_eval_log(str(log_path)).eval.metadata["max_answers"] == "unknown"
    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    record = json.loads(next(p for p in written if p.suffix == ".json").read_text("utf-8"))
    config = record["evaluation_results"][0]["generation_config"]["additional_details"]
    assert config["max_answers"] == "unknown"


def test_the_documented_hf_loader_reads_the_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/publishing.md's loader, run as printed on an export: every model's value."""
    page = (Path(__file__).parents[1] / "docs" / "publishing.md").read_text("utf-8")
    (code,) = re.findall(r"^```py\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    run_dir = write_run_dir(tmp_path / "run", two_model_lines())
    figures = report(capsys, run_dir)
    monkeypatch.chdir(tmp_path)
    export(capsys, str(run_dir), "--format", "hf", "-o", "out/hf", "--hf-dataset", "x/aidanbench")
    exec(compile(code, "publishing.md", "exec"), {})
    printed = dict(line.split(" ", 2)[:2] for line in capsys.readouterr().out.splitlines())
    assert {m: float(v) for m, v in printed.items()} == {m: f["score"] for m, f in figures.items()}


def test_a_judge_panel_and_each_judges_cost_are_in_every_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Answers judged by a panel: the Hub's notes and Every Eval Ever's details carry the
    panel line ``report`` prints (every judge, its threshold and its dollars), and the
    Inspect log's row carries the panel's figures."""
    import huggingface_hub as hub
    import inspect_ai.log as inspect_log
    import yaml

    line = question_line("acme/m", "Why?", chain(2))
    for answer in line["answers"]:
        answer["judges"] = [
            {"judge": "judge-a", "score": 80.0, "threshold": 47.0, "passes": True}
            | {"cost_usd": 0.001},
            {"judge": "judge-b", "score": 80.0, "threshold": 64.0, "passes": True}
            | {"cost_usd": None},
        ]
    run_dir = write_run_dir(tmp_path / "run", [line])
    assert main(["report", str(run_dir)]) == 0
    said = next(
        part.strip()
        for part in " ".join(capsys.readouterr().out.split()).split("; ")
        if "judge panel" in part
    )
    assert "judge-a at > 47 (passed 3 of 3, $0.0030)" in said
    assert "judge-b at > 64 (passed 3 of 3, unknown dollars)" in said

    (hf,) = export(
        capsys, str(run_dir), "--format", "hf", "-o", str(tmp_path / "h"), "--hf-dataset", "x/a"
    )
    (entry,) = hub.parse_eval_result_entries(yaml.safe_load(hf.read_text("utf-8")))
    assert "judge-a at > 47 (passed 3 of 3, $0.0030), judge-b at > 64" in entry.notes
    written = export(capsys, str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "e"))
    record = json.loads(next(p for p in written if p.suffix == ".json").read_text("utf-8"))
    details = record["evaluation_results"][0]["score_details"]["details"]
    assert "judge-b at > 64 (passed 3 of 3, unknown dollars)" in details["judge_panel"]
    (log_path,) = export(capsys, str(run_dir), "--format", "inspect", "-o", str(tmp_path / "i"))
    row = inspect_log.read_eval_log(str(log_path)).eval.metadata["row"]
    assert row["judge_panel"]["judges"] == ["judge-a", "judge-b"]
    assert row["judge_panel"]["dollars"] == [pytest.approx(0.003), None]
