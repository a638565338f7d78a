"""The driver rewrites the output files as questions finish, but not on every finish."""

from __future__ import annotations

from pathlib import Path

import pytest

from aidanbench.core.settings import Settings
from aidanbench.record import recorder
from aidanbench.record.recorder import RunLines
from aidanbench.runner.tasks import Task


def output(score: int) -> dict[str, object]:
    return {"answers": [], "stop_reason": "coherence", "error": None, "score": score}


def test_files_are_rewritten_at_most_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    writes: list[int] = []
    monkeypatch.setattr(
        recorder, "write_lines", lambda _dir, lines, _texts: writes.append(len(lines))
    )
    lines = RunLines(tmp_path, every=5.0, clock=lambda: clock[0])
    tasks = [Task(Settings(), f"Question {i}?", 1) for i in range(4)]

    lines.finished(tasks[0].line(output(1)))
    assert writes == [1], "the first finished question is written at once"
    clock[0] += 1.0
    lines.finished(tasks[1].line(output(2)))
    assert writes == [1], "a second finish within the interval waits"
    clock[0] += 4.0
    lines.finished(tasks[2].line(output(3)))
    assert writes == [1, 3], "after the interval, the next finish writes every line"
    lines.keep(tasks[3].line(output(4)))
    lines.flush()
    assert writes == [1, 3, 4], "the driver's final write carries the rest"
    lines.flush()
    assert writes == [1, 3, 4], "files that hold every line are not written again"
    lines.keep(tasks[0].line(output(5)))
    lines.flush()
    assert writes == [1, 3, 4, 4], "a line noted from a worker process is written"


def test_files_that_take_long_to_write_are_written_more_seldom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that took 1 s waits 1 / WRITE_SHARE s (20 s) for the next, not 5 s: the
    files of a campaign grow to tens of megabytes, and their rewrites would take the
    run's CPU."""
    clock = [100.0]
    writes: list[float] = []

    def slow_write(_dir: Path, lines: object, _texts: object) -> None:
        writes.append(clock[0])
        clock[0] += 1.0

    monkeypatch.setattr(recorder, "write_lines", slow_write)
    lines = RunLines(tmp_path, every=5.0, clock=lambda: clock[0])
    tasks = [Task(Settings(), f"Question {i}?", 1) for i in range(3)]
    lines.finished(tasks[0].line(output(1)))
    clock[0] += 10.0
    lines.finished(tasks[1].line(output(2)))
    assert writes == [100.0], "10 s after a write of 1 s is too soon"
    clock[0] += 10.0
    lines.finished(tasks[2].line(output(3)))
    assert writes == [100.0, 121.0]
    assert recorder.WRITE_SHARE == 0.05
