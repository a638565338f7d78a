"""``aidanbench view`` and the page's data, without a browser (see test_view_browser.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aidanbench.analysis.summary import paired_comparison, summarise
from aidanbench.analysis.view import (
    RAW_TAGGED,
    build_html,
    failure,
    load_source,
    view_data,
    write_view,
)
from aidanbench.cli.main import main
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import read_results
from aidanbench.testing import OpenAIStub

from .test_cli_run import QUESTIONS, bench_stub, run_args  # noqa: F401 - fixture
from .viewdata import PUBLISHED_RUN, make_run_dir


def page_data(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert found, "the page carries its data inline"
    return json.loads(found.group(1))


@pytest.mark.e2e
def test_view_of_the_published_run_is_self_contained(tmp_path: Path) -> None:
    out = tmp_path / "published.html"
    done = subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", "view", str(PUBLISHED_RUN), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    html = out.read_text("utf-8")
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", html), "nothing external"
    assert "default-src 'none'" in html, "the page forbids itself any fetch"
    data = page_data(html)
    rows = summarise(read_results(PUBLISHED_RUN))
    assert [g["row"]["score"] for g in data["groups"]] == [r.score for r in rows]
    assert len(data["lines"]) == 49
    assert sum(line["n"] for line in data["lines"]) == 1161
    blocks = re.findall(r'id="chains-\d+">(.*?)</script>', html, re.S)
    chains = [chain for block in blocks for chain in json.loads(block)]
    assert len(blocks) == 5 and len(chains) == 49, "one chain per line, one script per model"
    assert sum(len(chain) for chain in chains) == 1161


def test_markup_in_texts_cannot_break_out_of_the_data(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    html = write_view([run_dir], tmp_path / "r.html").read_text("utf-8")
    data_and_chains = re.findall(r'type="application/json"[^>]*>(.*?)</script>', html, re.S)
    assert data_and_chains and all("<" not in block for block in data_and_chains)
    assert "How might a library <stay>" in page_data(html)["questions"][1]


def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    good = make_run_dir(tmp_path / "run")
    assert main(["view", str(good), str(tmp_path / "missing"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err
    assert not out.exists(), "nothing written before every input was read"
    (tmp_path / "junk.json").write_text('{"not": "results"}')
    assert main(["view", str(tmp_path / "junk.json"), "-o", str(out)]) == 2
    assert "no 'models' object" in capsys.readouterr().err
    assert main(["view", str(good), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_failing_answer_and_its_margin() -> None:
    t = Thresholds(coherence=15, novelty=0.15)

    def row(i: int, c: float, n: float, valid: bool) -> AnswerLine:
        return AnswerLine(index=i, answer=f"a{i}", coherence=c, novelty=n, valid=valid)

    chain = [row(1, 80, 1.0, True), row(2, 80, 0.15, False)]
    assert failure(chain, "novelty", t) == {
        "index": 2,
        "criterion": "novelty",
        "value": 0.15,
        "threshold": 0.15,
    }
    assert failure([row(1, 12, 0.9, False)], "coherence", t)["value"] == 12  # type: ignore[index]
    assert failure(chain[:1], "max_answers", t) is None
    assert failure(chain, "error", t) is None, "an error is not a failed criterion"


def test_page_data_matches_the_report(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    data, chains = view_data([load_source(run_dir)])
    results = read_results(run_dir)
    assert [g["row"] for g in data["groups"]] == [
        json.loads(json.dumps(r.to_dict())) for r in summarise(results)
    ]
    assert data["groups"][0]["judge_model"] == "o1-mini"
    assert data["groups"][0]["row"]["cost_usd"] is None, "no cost recorded: unknown"
    assert data["groups"][0]["cost_text"] == "unknown"
    expected = paired_comparison(results, "acme/alpha", "acme/beta").to_dict()
    got = data["comparisons"]["0|1"]
    assert {k: got[k] for k in expected} == expected
    assert got["per_question"] == [[0, 8], [2, 6]], "Q2 left out: beta errored there"
    first = chains[0][0]
    assert first[1][3] != RAW_TAGGED and first[1][3].startswith("Thinking first.")
    assert first[0][3] == RAW_TAGGED, "the tagged reply is stored as a code"
    assert [s["name"] for s in data["scores"]] == ["coherence", "novelty", "llm_novelty"]
    answer = results[0].answers[0]
    assert first[0][5:] == [answer.coherence, answer.novelty, answer.llm_novelty]


def test_cost_is_shown_when_calls_record_it(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run", repeats=1, model_cost_usd=0.25)
    lines = [json.loads(line) for line in (run_dir / "answers.jsonl").read_text().splitlines()]
    data, _ = view_data([load_source(run_dir)])
    alpha = sum(1 for line in lines if line["model"] == "acme/alpha")
    assert data["groups"][0]["row"]["cost_usd"] == pytest.approx(0.25 * alpha)
    assert data["groups"][0]["cost_text"] == f"${0.25 * alpha:,.4f}", "as report prints it"


def test_same_model_from_two_sources_stays_two_rows(tmp_path: Path) -> None:
    a = make_run_dir(tmp_path / "a", repeats=1)
    b = make_run_dir(tmp_path / "b", repeats=1)
    data, _ = view_data([load_source(a), load_source(b), load_source(PUBLISHED_RUN)])
    models = [g["row"]["model"] for g in data["groups"]]
    assert "acme/alpha [a]" in models and "acme/alpha [b]" in models
    assert "gpt-4-turbo" in models, "models only one source has keep their name"
    assert any("different judge models" in w for w in data["warnings"])


def test_run_writes_and_prints_its_report(
    bench_stub: OpenAIStub,  # noqa: F811 - fixture
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    assert main(run_args(bench_stub, run_dir)) == 0
    report = run_dir / "report.html"
    assert f"report: {report}" in capsys.readouterr().out
    data = page_data(report.read_text("utf-8"))
    assert {g["row"]["model"] for g in data["groups"]} == {"m1", "m2"}
    assert len(data["questions"]) == len(QUESTIONS)


def test_the_leaderboard_reads_without_javascript(tmp_path: Path) -> None:
    """Without its script the page still shows the leaderboard and the counting text: each
    model, its score (``≥`` a lower bound) and its questions, escaped."""
    run_dir = make_run_dir(tmp_path / "run", repeats=1)
    page = build_html([load_source(run_dir)])
    static = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    board = static[static.index('<table id="board">') : static.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", board)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows[1:]]
    summaries = {row.model: row for row in summarise(read_results(run_dir))}
    assert [c[1] for c in cells] == sorted(summaries, key=lambda m: -summaries[m].score)
    for c in cells:
        row = summaries[c[1]]
        assert c[2] == ("≥ " if row.lower_bound else "") + f"{row.score:g}"
    assert "score = valid answers" in static[static.index('id="counting"') :]
