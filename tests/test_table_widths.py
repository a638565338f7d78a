"""At 80 columns every table still shows whole model names and whole numbers.

Rich squeezes a table that is too wide by folding and cutting its columns (``opena…``,
``0.3…``); these tables are split or relabelled instead. Each test renders at 80 columns
and looks for every name and number in full, and for no line wider than 80.
"""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from aidanbench import reference
from aidanbench.analysis.summary import SummaryRow, summarise
from aidanbench.analysis.summary_table import render_summary
from aidanbench.cli.main import main
from aidanbench.record.results import read_results
from aidanbench.runner.progress import Progress

from .builders import REFERENCE_SCORES

WIDTH = 80
MODELS = list(reference.PUBLISHED_TOTALS)


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=WIDTH, highlight=False, color_system=None), out


def assert_fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert wide == [], wide


def rich_rows() -> list[SummaryRow]:
    """The published run's rows with every optional column filled, large numbers included."""
    rows = summarise(read_results(reference.published_run()))
    return [
        dataclasses.replace(
            row,
            tokens=1_239_778 + i,
            api_calls=1_000 + i,
            format_adherence=0.987,
            means={**row.means, "llm_novelty": 0.4125},
            stop_reasons={"novelty": 8, "coherence": 1, "llm_novelty": 1},
        )
        for i, row in enumerate(rows)
    ]


def test_summary_at_80_columns_keeps_names_and_numbers() -> None:
    rows = rich_rows()
    target, out = console()
    render_summary(rows, target)
    text = out.getvalue()
    assert_fits(text)
    assert "…" not in text
    for i, row in enumerate(rows):
        lines = [line for line in text.splitlines() if f"│ {row.model} " in line]
        assert len(lines) >= 2, f"{row.model} names each part of the summary"
        cells = " ".join(lines)
        for number in (
            str(row.score),
            f"{row.novelty_sum:.2f}",
            f"{row.means['coherence']:.1f}",
            f"{row.means['novelty']:.3f}",
            "0.412",
            "99%",
            f"{1_239_778 + i:,}",
        ):
            assert re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d.,])", cells), (
                row.model,
                number,
            )


def test_summary_is_one_table_when_it_fits() -> None:
    out = io.StringIO()
    render_summary(rich_rows(), Console(file=out, width=220, highlight=False))
    assert out.getvalue().count("┏") == 1


def test_report_at_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert main(["report", str(reference.published_run())]) == 0
    text = capsys.readouterr().out
    assert_fits(text)
    for line in text.splitlines():
        if "…" in line:  # only questions are abbreviated (the full text is in --json)
            assert re.match(r"│ +Q\d+ │", line), line
    for model, total in reference.PUBLISHED_TOTALS.items():
        assert re.search(rf"│ {re.escape(model)} +│ +0\.7 │ +{total} │", text), model
    legend = dict(re.findall(r"^([A-E]) = (\S+) *$", text, re.MULTILINE))
    assert sorted(legend.values()) == sorted(MODELS)
    header = next(line for line in text.splitlines() if "question" in line and "#" in line)
    keys = re.findall(r"│ +([A-E]) ", header.replace("┃", "│"))
    table = [line for line in text.splitlines() if re.match(r"│ +Q\d+ │", line)]
    for column, key in enumerate(keys):
        scores = [line.split("│")[3 + column].strip() for line in table]
        assert [int(s) for s in scores if s != "–"] == REFERENCE_SCORES[legend[key]]


def test_live_table_at_80_columns() -> None:
    progress = Progress(out=io.StringIO(), live=False)
    labels = [f"{model} (T=0.7)" for model in MODELS]
    for number, label in enumerate(labels):
        progress.queued(label, 10)
        progress.answer(label, {"valid": True, "calls": 123_456, "tokens": 98_765_432 + number})
    target, out = console()
    target.print(progress._table(WIDTH))
    text = out.getvalue()
    assert_fits(text)
    assert "…" not in text
    for number, label in enumerate(labels):
        lines = [line for line in text.splitlines() if f"│ {label} " in line]
        assert len(lines) >= 1, label
        assert re.search(rf"(?<![\d,]){98_765_432 + number:,}(?![\d,])", " ".join(lines)), label
    assert "123456" in text and "chat requests" in text and "chat tokens" in text


def test_published_run_path_is_a_file() -> None:
    assert Path(reference.published_run()).is_file()
