"""The run directory's records: files replaced atomically (a crash mid-write keeps the old
file), and every run directory an earlier version wrote reads, and is written again, as
it was (``tests/data/old_run_dirs``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from aidanbench.record import files
from aidanbench.record.lines import (
    LineTexts,
    QuestionLine,
    original_records,
    read_lines,
    temperature_key,
    write_lines,
)
from aidanbench.record.metadata import read_metadata, write_metadata
from aidanbench.record.results import read_results
from aidanbench.record.usage import summarise_ledger

OLD_RUN_DIRS = Path(__file__).parent / "data" / "old_run_dirs"
GENERATIONS = sorted(p.name for p in OLD_RUN_DIRS.iterdir() if p.is_dir())


def test_atomic_write_replaces(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    files.atomic_write(path, "one")
    files.atomic_write(path, "two")
    assert path.read_text() == "two"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_crash_mid_write_keeps_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    files.atomic_write(path, '{"models": {}}')

    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_write(path, '{"models": {"half written')
    assert path.read_text() == '{"models": {}}'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"], "no temp file left"


def test_a_chart_that_fails_half_way_keeps_the_previous_one(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from aidanbench.analysis.plots import new_figure, save_figure

    path = tmp_path / "chart.png"
    figure = new_figure((2, 2))
    save_figure(figure, path)
    before = path.read_bytes()

    def half_then_full(handle: Any, **_: Any) -> None:
        handle.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    figure.savefig = half_then_full  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        save_figure(figure, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"], "no temp file left"


def test_write_lines_orders_and_splits_repeats(tmp_path: Path) -> None:
    answer = {
        "index": 1,
        "answer": "a",
        "raw_reply": "<answer>a</answer>",
        "used_answer_tag": True,
        "coherence": 80.0,
        "novelty": 1.0,
        "llm_novelty": None,
        "valid": False,
        "stop_reason": "novelty",
        "elapsed_s": 1.5,
        "calls": {},
        "flags": [],
    }
    lines = [
        QuestionLine(model="m", temperature=0.7, question="q", repeat=r, answers=[answer])
        for r in (1, 2)
    ]
    write_lines(tmp_path, lines)
    assert (tmp_path / "results.json").exists() and (tmp_path / "results.repeat-2.json").exists()
    results = read_results(tmp_path)
    assert [(q.repeat, q.score, len(q.answers)) for q in results] == [(1, 0, 1), (2, 0, 1)]


def original_schema(lines: list[QuestionLine]) -> dict[str, Any]:
    """The published results file of ``lines`` as a JSON object: what the writer's text
    must equal once dumped."""
    models: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for line in lines:
        by_question = models.setdefault(line.model, {}).setdefault(
            temperature_key(line.temperature), {}
        )
        by_question[line.question] = original_records(line)
    return {"models": models}


def test_results_file_is_what_json_dumps_writes(tmp_path: Path) -> None:
    """The results files are composed from each line's part, made once per line
    (``LineTexts``): byte for byte what ``json.dumps(original_schema(...), indent=2)``
    writes, for models, temperatures and questions in any order, lines without answers,
    text json escapes, and a line replaced by a longer one."""

    def answer(index: int, text: str, llm: float | None = None) -> dict[str, Any]:
        return {
            "index": index,
            "answer": text,
            "coherence": 80.5,
            "novelty": 0.123456789,
            "llm_novelty": llm,
            "valid": True,
            "elapsed_s": 1.5,
        }

    lines = [
        QuestionLine(model="m1", temperature=0.7, question="q1", answers=[answer(1, "a")]),
        QuestionLine(
            model="m2",
            temperature=1.0,
            question='Qu\u00e9 "dire"?\n',
            answers=[answer(1, "caf\u00e9\tb"), answer(2, "\u2603", 0.4)],
        ),
        QuestionLine(model="m1", temperature=0.7, question="q2", answers=[]),
        QuestionLine(model="m1", temperature=0.0, question="q1", answers=[answer(1, "x")]),
        QuestionLine(model="m1", temperature=0.7, question="q3", repeat=2, answers=[]),
    ]
    texts = LineTexts()

    def expected(chosen: list[QuestionLine]) -> dict[str, str]:
        return {
            files.results_name(r): json.dumps(
                original_schema([line for line in chosen if line.repeat == r]), indent=2
            )
            for r in sorted({line.repeat for line in chosen})
        }

    for chosen in (lines[:1], lines, [*lines[:2], lines[1].model_copy(update={"answers": []})]):
        write_lines(tmp_path, chosen, texts)
        for name, text in expected(chosen).items():
            assert (tmp_path / name).read_text() == text
    write_lines(tmp_path, [])
    assert (tmp_path / "results.json").read_text() == json.dumps({"models": {}}, indent=2)


def view(result: Any) -> dict[str, Any]:
    """What ``tests/data/old_run_dirs/*/expected.json`` records of a line (the reader of
    the version before the typed record, 931bcc5)."""
    return {
        "model": result.model,
        "temperature": result.temperature,
        "question": result.question,
        "repeat": result.repeat,
        "score": result.score,
        "stop_reason": result.stop_reason,
        "error": result.error,
        "answers": len(result.answers),
        "tokens": result.tokens,
        "api_calls": result.api_calls,
        "cost_usd": result.cost_usd,
        "usage_missing": result.usage_missing,
        "embedding_model": result.embedding_model,
        "thresholds": result.thresholds.record() if result.thresholds else None,
        "judge_model": result.judge_model,
        "prompts_sha256": result.prompts_sha256,
        "threshold_source": result.threshold_source,
        "truncated_answers": result.truncated_answers,
        "novelty_sum": result.novelty_sum,
    }


@pytest.mark.parametrize("generation", GENERATIONS)
def test_a_run_directory_of_an_earlier_version_reads_as_it_did(generation: str) -> None:
    """Each fixture was written by ``aidanbench run`` at that commit (round 1's lines
    without ``measured`` and its metadata without sessions, the manifest and sessions of
    the next rounds, the ledger and judging records of the last); the expected view is
    what the reader of the version before this record package made of it."""
    run_dir = OLD_RUN_DIRS / generation
    expected = json.loads((run_dir / "expected.json").read_text("utf-8"))
    results = read_results(run_dir)
    for line, result in zip(expected["results"], results, strict=True):
        if line["api_calls"] is not None:  # that reader counted each embedded answer as a request
            line["api_calls"] -= sum(
                (a.calls or {}).get("embed", {}).get("calls", 0) for a in result.answers
            )
    assert [view(r) for r in results] == expected["results"]
    if expected["ledger"] is not None:
        summed = summarise_ledger(run_dir / files.LEDGER)
        parts = {"preflight", "embeddings"}  # kept apart since, besides what it summed
        assert summed.model_dump(exclude=parts) == unreported_unknown(
            expected["ledger"], run_dir / files.LEDGER
        )


def unreported_unknown(ledger: dict[str, Any], path: Path) -> dict[str, Any]:
    """The sums that reader made, with those of cached and reasoning tokens unknown where a
    reply it summed did not report them: it counted them as 0."""
    replies = [json.loads(x) for x in path.read_text("utf-8").splitlines()]
    replies = [r for r in replies if r["event"] == "usage"]
    groups = {
        (): replies,
        ("speculative",): [r for r in replies if r.get("node") == "generate_next"],
        **{
            ("by_role_model", key): [r for r in replies if f"{r['role']}:{r['model']}" == key]
            for key in ledger["by_role_model"]
        },
    }
    for where, lines in groups.items():
        figures = ledger
        for step in where:
            figures = figures[step]
        for name in ("cached_input_tokens", "reasoning_tokens"):
            if any(line[name] is None for line in lines):
                figures[name] = None
    return ledger


@pytest.mark.parametrize("generation", GENERATIONS)
def test_a_run_directory_of_an_earlier_version_is_written_again_unchanged(
    generation: str, tmp_path: Path
) -> None:
    """What a later session does with an earlier one's records: read them and write them
    again. Every field is kept as it was (none this version does not know is lost, none
    absent appears); the lines gain only their derived figures (dollars, censored, cut
    answers), the results files and the metadata come out the same."""
    source = OLD_RUN_DIRS / generation
    copy = tmp_path / "run"
    write_lines(copy, read_lines(source))
    metadata = read_metadata(source)
    assert metadata is not None
    write_metadata(copy, metadata)
    for name in (files.QUESTIONS, files.ANSWERS):
        old = [json.loads(x) for x in (source / name).read_text("utf-8").splitlines()]
        new = [json.loads(x) for x in (copy / name).read_text("utf-8").splitlines()]
        assert len(old) == len(new), name
        for before, after in zip(old, new, strict=True):
            assert after == {**after, **before}, f"{name}: a field changed or went"
            derived = {"cost_usd", "censored", "truncated_answers"}
            assert set(after) - set(before) <= derived, name
    for name in ("results.json", "results.repeat-2.json", files.METADATA):
        if (source / name).exists():
            assert json.loads((copy / name).read_text()) == json.loads((source / name).read_text())
    assert read_results(copy) == read_results(source)


def test_damaged_values_in_metadata_are_one_line(tmp_path: Path) -> None:
    shutil.copytree(OLD_RUN_DIRS / GENERATIONS[-1], tmp_path / "run")
    path = tmp_path / "run" / files.METADATA
    meta = json.loads(path.read_text())
    meta["sessions"] = "not a list"
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"metadata.json is damaged \('sessions'"):
        read_metadata(tmp_path / "run")
