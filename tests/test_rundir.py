"""Run-directory files are replaced atomically: a crash mid-write keeps the old file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aidanbench.analysis import rundir


def test_atomic_write_replaces(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    rundir.atomic_write(path, "one")
    rundir.atomic_write(path, "two")
    assert path.read_text() == "two"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_crash_mid_write_keeps_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    rundir.atomic_write(path, '{"models": {}}')

    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        rundir.atomic_write(path, '{"models": {"half written')
    assert path.read_text() == '{"models": {}}'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"], "no temp file left"


def test_write_outputs_orders_and_splits_repeats(tmp_path: Path) -> None:
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
        {"model": "m", "temperature": 0.7, "question": "q", "repeat": r, "answers": [answer]}
        for r in (1, 2)
    ]
    rundir.write_outputs(tmp_path, lines)
    assert (tmp_path / "results.json").exists() and (tmp_path / "results.repeat-2.json").exists()
    results = rundir.read_run_dir(tmp_path)
    assert [(q.repeat, q.score, len(q.answers)) for q in results] == [(1, 0, 1), (2, 0, 1)]
