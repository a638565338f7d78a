"""One number everywhere: every view of one run shows the same score, answers, calls,
tokens and dollars for each model.

The run is ``aidanbench demo`` (the published run replayed through the real pipeline).
Each figure is computed once, by ``record.results.totals`` over a model's question lines
(``SummaryRow``); the live table's final state, ``report`` (text and JSON), the metadata,
the HTML report and the charts must all show exactly that. A view that computed a figure
of its own (the HTML once summed dollars without the discarded look-aheads; the live
table once counted calls its own way) fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from aidanbench.analysis.cost import dollars_text, tokens_text
from aidanbench.analysis.summary import SummaryRow, summarise
from aidanbench.cli.main import main
from aidanbench.record.results import read_results as read_run_dir

pytestmark = pytest.mark.e2e

PUBLISHED = {
    "anthropic/claude-3.5-sonnet": 421,
    "google/gemini-flash-1.5-8b": 45,
    "gpt-4-turbo": 224,
    "meta-llama/llama-3.1-70b-instruct": 147,
    "openai/gpt-4o-mini-2024-07-18": 275,
}
LIVE_COLUMNS = (
    "done",
    "running",
    "queued",
    "errors",
    "answers",
    "score",
    "calls",
    "tokens",
    "spent",
)


def live_rows(err: str) -> dict[str, list[str]]:
    """The live table's final state (logged, it ends the run's stderr): cells by model.

    On a narrow console the table is split into stacked tables, each naming the model:
    a model's cells are its rows' cells, in order.
    """
    rows: dict[str, list[str]] = {}
    for line in err.splitlines():
        found = re.match(r"│ (.+?) \(T=0\.7\) +│(.*)│$", line)
        if found:
            cells = [c.strip() for c in found.group(2).split("│")]
            rows.setdefault(found.group(1), []).extend(cells)
    return rows


def figures_of(row: SummaryRow) -> dict[str, str]:
    """A row's figures as every text view prints them."""
    assert row.api_calls is not None and row.cost_usd is not None, "the demo records both"
    return {
        "answers": str(row.answers),
        "score": f"{row.score:g}",
        "calls": f"{row.api_calls}",
        "tokens": tokens_text(row.tokens),
        "spent": dollars_text(row.cost_usd),
    }


def charted(monkeypatch: pytest.MonkeyPatch, run_dir: Path, out: Path) -> list[Figure]:
    """The figures ``aidanbench plot`` draws of the run."""
    drawn: list[Figure] = []
    original = Figure.savefig

    def recording(self: Figure, *args: Any, **kwargs: Any) -> None:
        drawn.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    assert main(["plot", str(run_dir), "-o", str(out)]) == 0
    return drawn


def test_every_view_of_the_demo_run_shows_one_number_per_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "demo"
    assert main(["demo", "--latency-scale", "0", "--run-dir", str(run_dir)]) == 0
    live = live_rows(capsys.readouterr().err)
    rows = {row.model: row for row in summarise(read_run_dir(run_dir))}
    assert {model: row.score for model, row in rows.items()} == PUBLISHED
    expected = {model: figures_of(row) for model, row in rows.items()}

    # the live table's final state
    assert set(live) == set(rows)
    for model, cells in live.items():
        shown = dict(zip(LIVE_COLUMNS, cells, strict=True))
        assert {
            k: shown[k].replace(",", "") if k == "calls" else shown[k] for k in expected[model]
        } == expected[model], model

    # report: text and JSON
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    for model, row in rows.items():
        assert f"headline (count): {model} @ 0.7: {row.score:g}" in text
        figures = expected[model]
        assert f"  {model} @ 0.7: {figures['spent']} for score {figures['score']} " in text, model
        summary = [line for line in text.splitlines() if line.startswith(f"│ {model} ")]
        assert any(figures["tokens"] in line for line in summary), model
    assert main(["report", str(run_dir), "--json"]) == 0
    runs = {run["model"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    for model, row in rows.items():
        run = runs[model]
        assert (run["score"], run["answers"], run["api_calls"]) == (
            row.score,
            row.answers,
            row.api_calls,
        )
        assert (run["tokens"], run["cost_usd"]) == (row.tokens, row.cost_usd), model

    # metadata: the recorded answers' totals are the same function over every line (the
    # demo is a run: api_calls, tokens and dollars are what its usage ledger saw sent)
    totals = json.loads((run_dir / "metadata.json").read_text())["totals"]
    assert totals["score"] == sum(row.score for row in rows.values())
    assert totals["answers"] == sum(row.answers for row in rows.values())
    assert totals["recorded_api_calls"] == sum(row.api_calls or 0 for row in rows.values())
    assert totals["recorded_tokens"] == sum(row.tokens or 0 for row in rows.values())
    recorded_dollars = sum(row.cost_usd or 0 for row in rows.values())
    assert totals["recorded_dollars"] == pytest.approx(recorded_dollars)

    # the HTML report
    html = (run_dir / "report.html").read_text()
    data = json.loads(html.split('id="data">', 1)[1].split("</script>", 1)[0])
    for group in data["groups"]:
        model = group["row"]["model"]
        row = rows[model]
        assert group["label"] == model, "full model names"
        assert (group["row"]["score"], group["row"]["api_calls"]) == (row.score, row.api_calls)
        assert (group["row"]["tokens"], group["row"]["cost_usd"]) == (row.tokens, row.cost_usd)
        assert (group["tokens_text"], group["cost_text"]) == (
            expected[model]["tokens"],
            expected[model]["spent"] + " (replay)",
        ), "the demo's dollars are a replay's: nothing was spent"
    assert "<tfoot" not in html and 'class: "total"' not in html, "no total across models"

    # the charts: scores.png's bars and labels, cost_vs_score.png's points
    drawn = charted(monkeypatch, run_dir, tmp_path / "charts")
    scores, cost = drawn[0], drawn[-1]
    (axes,) = scores.axes
    widths = sorted(patch.get_width() for patch in axes.patches)
    assert widths == sorted(float(row.score) for row in rows.values())
    labels = [t.get_text() for t in axes.texts]
    for row in rows.values():
        assert any(label.startswith(f"  {row.score:g}  (") for label in labels)
    (axes,) = cost.axes
    points = sorted(tuple(float(v) for v in c.get_offsets()[0]) for c in axes.collections)
    assert [x for point in points for x in point] == pytest.approx(
        [
            x
            for row in sorted(rows.values(), key=lambda r: r.cost_usd or 0.0)
            for x in (row.cost_usd or 0.0, float(row.score))
        ]
    )
