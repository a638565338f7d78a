"""The HTML report in a real browser: headless Chromium over the DevTools protocol.

Every page is opened from ``file://`` with every other request failed and recorded, and
each test ends by asserting the page attempted none. Screenshots land in a temporary
directory (``--basetemp`` keeps them for a look).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.cost import dollars_text, tokens_text
from aidanbench.analysis.summary import paired_comparison
from aidanbench.analysis.view import write_view
from aidanbench.record.lines import read_lines, write_lines
from aidanbench.record.results import QuestionResult, read_results

from .browser import Browser, Page, chromium, chromium_path
from .viewdata import PUBLISHED_RUN, make_run_dir

CHROMIUM = chromium_path()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (scripts/test.sh installs Debian's chromium; "
        "apt-get install -y chromium)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with chromium(CHROMIUM) as running:
        yield running


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("view") / "run")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    opened = browser.new_page()
    opened.viewport(1280, 800)
    yield opened
    assert opened.blocked == [], f"the page tried the network: {opened.blocked}"
    assert opened.errors == [], f"script errors: {opened.errors}"
    browser.send("Target.closeTarget", {"targetId": opened.target})


def open_report(page: Page, inputs: list[Path], out: Path) -> Path:
    write_view(inputs, out)
    page.open(out.as_uri())
    return out


def report_json(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", "report", "--json", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def fixed(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def expected_cells(run: dict[str, Any]) -> dict[str, str]:
    """The leaderboard cells of one ``report --json`` run, as the page should print them."""
    stops = sorted(run["stop_reasons"].items(), key=lambda item: -item[1])
    cells = {
        "model": run["model"],
        "score": ("≥ " if run["lower_bound"] else "") + str(run["score"]),
        "question_count": str(run["question_count"]),
        "finished": str(run["finished"]),
        "errored": str(run["errored"]),
        "novelty_sum": f"{run['novelty_sum']:.2f}",
        "mean_coherence": fixed(run["mean_coherence"], 1),
        "mean_novelty": fixed(run["mean_novelty"], 3),
        "stop_reasons": ", ".join(f"{reason} {n}" for reason, n in stops),
    }
    if run["repeats"] > 1:
        low, high = run["score_interval"]
        cells["per_repeat"] = f"{run['mean_repeat_score']:.1f} [{low:.1f}, {high:.1f}]"
    if run["mean_llm_novelty"] is not None:
        cells["mean_llm_novelty"] = fixed(run["mean_llm_novelty"], 3)
    if run["api_calls"] is not None:  # a run directory: what report prints of it
        cells["tokens"] = tokens_text(run["tokens"])
        cells["cost_usd"] = dollars_text(run["cost_usd"])
    return cells


LEADERBOARD = """[...document.querySelectorAll('#board tbody tr')].map((tr) => Object.fromEntries(
  [...tr.querySelectorAll('[data-col]')].map((c) => [c.dataset.col, c.textContent])))"""


@pytest.mark.parametrize("which", ["published", "run directory"])
def test_leaderboard_equals_report_json(
    page: Page, which: str, small_run: Path, tmp_path: Path
) -> None:
    source = PUBLISHED_RUN if which == "published" else small_run
    open_report(page, [source], tmp_path / "report.html")
    shown = page.evaluate(LEADERBOARD)
    runs = report_json(source)["runs"]
    assert len(shown) == len(runs)
    by_model = {row["model"]: row for row in shown}
    for run in runs:
        row = by_model[run["model"]]
        expected = expected_cells(run)
        assert {k: row[k] for k in expected} == expected
    assert page.evaluate("document.querySelector('#board tfoot')") is None, (
        "no total across different models"
    )
    ranked = [float(row["score"].removeprefix("≥ ")) for row in shown]
    assert ranked == sorted(ranked, reverse=True), "highest score first"
    head = page.evaluate("document.querySelector('#board thead').textContent")
    assert ("cost" in head) == (which == "run directory"), "a results file records no cost"


CONTRAST = """(() => {
  const rgb = (css) => css.match(/\\d+/g).slice(0, 3).map(Number);
  const lum = (c) => { const [r, g, b] = c.map((v) => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  return [...document.querySelectorAll('#grid button.cell, #board td, #board th, .hint, .caption')]
    .map((el) => { let node = el, bg = 'rgba(0, 0, 0, 0)';
      while (node && /rgba\\(0, 0, 0, 0\\)|transparent/.test(bg)) {
        bg = getComputedStyle(node).backgroundColor; node = node.parentElement; }
      if (/rgba\\(0, 0, 0, 0\\)/.test(bg)) bg = 'rgb(255, 255, 255)';
      const [hi, lo] = [lum(rgb(getComputedStyle(el).color)), lum(rgb(bg))].sort((a, b) => b - a);
      return (hi + 0.05) / (lo + 0.05); });
})()"""


def test_text_contrast_meets_wcag_aa(page: Page, tmp_path: Path) -> None:
    """Every heat-map cell (whatever its colour), leaderboard cell and hint: at least 4.5:1."""
    open_report(page, [PUBLISHED_RUN], tmp_path / "report.html")
    ratios = page.evaluate(CONTRAST)
    assert len(ratios) > 50
    assert min(ratios) >= 4.5


def chain_items(page: Page) -> list[dict[str, Any]]:
    return page.evaluate(
        """[...document.querySelectorAll('#chain ol.answers li')].map((li) => ({
          index: +li.dataset.index, valid: li.dataset.valid === 'true', cls: li.className,
          coherence: li.querySelector('[data-metric=coherence] .num').textContent,
          novelty: li.querySelector('[data-metric=novelty] .num').textContent,
          llm: li.querySelector('[data-metric=llm_novelty] .num').textContent,
          text: li.querySelector('.answer-text').textContent,
          why: li.querySelector('.why') ? li.querySelector('.why').textContent : null,
          raw: li.querySelector('pre.raw') ? li.querySelector('pre.raw').textContent : null}))"""
    )


def line_of(results: list[QuestionResult], model: str, question: int, repeat: int):
    questions = list(dict.fromkeys(r.question for r in results))
    return next(
        r
        for r in results
        if r.model == model and r.question == questions[question] and r.repeat == repeat
    )


def assert_chain_shown(page: Page, line: QuestionResult) -> None:
    items = chain_items(page)
    assert [i["index"] for i in items] == [a.index for a in line.answers]
    for item, answer in zip(items, line.answers, strict=True):
        assert item["coherence"] == f"{answer.coherence:g}"
        assert item["novelty"] == f"{answer.novelty:.3f}"
        assert item["llm"] == f"{answer.llm_novelty:.3f}"
        assert item["valid"] == answer.valid
        assert item["text"] == answer.answer
        assert item["raw"] == answer.raw_reply
    assert page.evaluate("document.getElementById('chain-score').textContent") == str(line.score)


def test_a_clicked_cell_opens_its_chain(page: Page, small_run: Path, tmp_path: Path) -> None:
    open_report(page, [small_run], tmp_path / "report.html")
    results = read_results(small_run)
    assert page.evaluate("document.querySelectorAll('ol.answers li').length") == 0
    assert "alpha idea 1" not in page.evaluate("document.body.innerText"), (
        "answer texts stay out of the DOM until a chain is opened"
    )
    page.click('#grid button.cell[data-g="0"][data-q="0"]')
    page.wait_for("document.getElementById('chain').open")
    line = line_of(results, "acme/alpha", 0, 1)
    assert_chain_shown(page, line)
    failed = chain_items(page)[-1]
    assert "failed" in failed["cls"]
    assert (
        failed["why"]
        == "Answer 7 failed on embedding novelty: 0.125 ≤ 0.15 (0.025 below the threshold)."
    )
    thresholds = "document.querySelectorAll('#chain svg.chart line[stroke-dasharray]').length"
    assert page.evaluate(thresholds) == 2
    chart_text = page.evaluate("document.querySelector('#chain svg.chart').textContent")
    assert "threshold 15" in chart_text and "threshold 0.15" in chart_text

    page.click("#chain .repeats button:nth-child(2)")
    page.wait_for("document.getElementById('chain-title').textContent.includes('repeat 2')")
    assert_chain_shown(page, line_of(results, "acme/alpha", 0, 2))

    page.press("Escape", 27)
    page.wait_for("!document.getElementById('chain').open")
    focused = "document.activeElement.dataset.g + ':' + document.activeElement.dataset.q"
    page.wait_for(f"({focused}) === '0:0'", timeout=10)  # closing returns focus to the cell
    page.press("ArrowDown", 40)
    page.wait_for(f"({focused}) === '0:1'", timeout=10)
    page.press("ArrowRight", 39)
    page.wait_for(f"({focused}) === '1:1'", timeout=10)
    page.press("Enter", 13, "\r")
    page.wait_for("document.getElementById('chain').open")
    beta = line_of(results, "acme/beta", 1, 1)
    assert_chain_shown(page, beta)
    error = page.evaluate("document.querySelector('#chain .error').textContent")
    assert "model host answered HTTP 500" in error


def test_keyboard_reaches_the_heat_map(page: Page, small_run: Path, tmp_path: Path) -> None:
    open_report(page, [small_run], tmp_path / "report.html")
    page.evaluate("document.getElementById('stopfilter').focus()")
    page.press("Tab", 9)
    assert page.evaluate("document.activeElement.className") == "cell"
    label = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert label.startswith("acme/alpha, Q1: score 6.5 (mean of 2 repeats)"), "full model names"


def visible_questions(page: Page) -> list[int]:
    return page.evaluate(
        "[...document.querySelectorAll('#grid tbody tr')].filter((tr) => !tr.hidden)"
        ".map((tr) => +tr.dataset.q)"
    )


def test_filters_by_question_text_and_stop_reason(
    page: Page, small_run: Path, tmp_path: Path
) -> None:
    open_report(page, [small_run], tmp_path / "report.html")
    page.evaluate("document.getElementById('qfilter').focus()")
    page.send("Input.insertText", text="LIBRARY")
    assert visible_questions(page) == [1]
    assert page.evaluate("document.getElementById('shown').textContent") == (
        "showing 1 of 3 questions"
    )
    page.evaluate(
        "(() => { const q = document.getElementById('qfilter'); q.value = '';"
        " q.dispatchEvent(new Event('input')); const s = document.getElementById('stopfilter');"
        " s.value = 'coherence'; s.dispatchEvent(new Event('change')); })()"
    )
    assert visible_questions(page) == [1, 2]
    lit = page.evaluate(
        "[...document.querySelectorAll('#grid tr:not([hidden]) button.cell:not(.dim)')]"
        ".map((b) => b.dataset.g + ':' + b.dataset.q)"
    )
    assert lit == ["0:1", "1:2"]


def test_paired_comparison_of_two_chosen_models(
    page: Page, small_run: Path, tmp_path: Path
) -> None:
    open_report(page, [small_run], tmp_path / "report.html")
    page.evaluate(
        "(() => { const a = document.getElementById('cmp-a'), b = document.getElementById('cmp-b');"
        " a.value = '1'; b.value = '0'; a.dispatchEvent(new Event('change')); })()"
    )
    expected = paired_comparison(read_results(small_run), "acme/beta", "acme/alpha")
    assert expected.interval is not None
    text = page.evaluate("document.getElementById('cmptext').textContent")
    low, high = expected.interval
    sign = lambda v: ("+" if v > 0 else "−" if v < 0 else "") + f"{abs(v):.1f}"  # noqa: E731
    assert text.startswith(f"acme/beta − acme/alpha: −{abs(expected.difference)} over 4 ")
    assert f"95% bootstrap CI [{sign(low)}, {sign(high)}]" in text
    rows = page.evaluate(
        "[...document.querySelectorAll('#cmptable tbody tr')]"
        ".map((tr) => [+tr.dataset.q, tr.children[2].textContent])"
    )
    assert rows == [[0, "−8"], [2, "−6"]]


def test_the_network_watch_catches_a_request(page: Page, tmp_path: Path) -> None:
    """The guard every test relies on: a page that reaches out is caught."""
    leaky = tmp_path / "leaky.html"
    leaky.write_text(
        '<img src="http://192.0.2.1/pixel.png"><script>document.documentElement.dataset.ready'
        " = '1'</script>"
    )
    page.open(leaky.as_uri())
    page.browser.pump(0.5)
    assert page.blocked == ["http://192.0.2.1/pixel.png"]
    page.blocked.clear()


def test_one_model_without_repeats(page: Page, tmp_path: Path) -> None:
    data = json.loads(PUBLISHED_RUN.read_text("utf-8"))
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"models": {"gpt-4-turbo": data["models"]["gpt-4-turbo"]}}))
    open_report(page, [one], tmp_path / "one.html")
    assert [row["score"] for row in page.evaluate(LEADERBOARD)] == ["224"]
    assert page.evaluate("document.getElementById('cmptext').textContent") == (
        "Only one model: nothing to compare."
    )
    assert page.evaluate("document.querySelectorAll('#grid td.none').length") == 0


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_screenshots_of_the_published_run(page: Page, tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    open_report(page, [PUBLISHED_RUN], tmp_path / "published.html")
    board = page.screenshot(shots / "leaderboard-1280x800.png")
    page.click("#grid button.cell")
    page.wait_for("document.getElementById('chain').open")
    chain = page.screenshot(shots / "chain-1280x800.png")
    assert png_size(board) == png_size(chain) == (1280, 800)
    page.press("Escape", 27)
    page.viewport(390, 844, mobile=True)
    page.open((tmp_path / "published.html").as_uri())
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, (
        "wide tables scroll inside their boxes; the page itself fits a phone"
    )
    page.screenshot(shots / "leaderboard-390.png")
    page.click("#grid button.cell")
    page.wait_for("document.getElementById('chain').open")
    assert page.evaluate("document.getElementById('chain').scrollWidth") <= 390
    phone = page.screenshot(shots / "chain-390.png")
    assert png_size(phone) == (390, 844)


def test_an_answer_cut_by_the_token_limit_is_shown_where_it_counts(
    page: Page, tmp_path: Path
) -> None:
    """The leaderboard counts cut answers, a line names the field to raise, the heat map
    marks the cell and the chain flags the answer (issue #25)."""
    run_dir = make_run_dir(tmp_path / "run")
    lines = read_lines(run_dir)
    for line in lines:
        for answer in line.answers:
            answer.finish_reason, answer.truncated = "stop", False
    cut = lines[0].answers[1]
    cut.finish_reason, cut.truncated = "length", True
    write_lines(run_dir, lines)
    open_report(page, [run_dir], tmp_path / "report.html")

    counted = {row["model"]: row.get("truncated_answers") for row in page.evaluate(LEADERBOARD)}
    assert counted == {"acme/alpha": "1", "acme/beta": "0"}
    note = page.evaluate("document.querySelector('#truncation li').textContent")
    assert note.startswith("Answers cut: acme/alpha: 1 of ") and "raise max_tokens" in note
    marked = (
        "[...document.querySelectorAll('#grid button.cell.cutmark')]"
        ".map((b) => b.dataset.g + ':' + b.dataset.q)"
    )
    assert page.evaluate(marked) == ["0:0"]
    page.click('#grid button.cell[data-g="0"][data-q="0"]')
    page.wait_for("document.getElementById('chain').open")
    flagged = page.evaluate(
        "[...document.querySelectorAll('#chain ol.answers li')].map((li) => li.dataset.truncated)"
    )
    assert flagged[:3] == ["false", "true", "false"]
    shown = page.evaluate("document.querySelector('#answer-2 p.cut').textContent")
    assert "cut by the token limit (finish_reason length)" in shown
    assert page.evaluate("document.getElementById('chain-cut').textContent") == (
        "cut by the token limit 1"
    )


def test_a_lower_bound_is_marked_on_the_board_and_the_map(page: Page, tmp_path: Path) -> None:
    """A chain a spending cap stopped: its cell and its row's score say ``≥``, as
    ``report`` does; an errored chain keeps its ``!``."""
    run_dir = make_run_dir(tmp_path / "run", repeats=1)
    lines = read_lines(run_dir)
    lines[0].stop_reason = "budget"
    write_lines(run_dir, lines)
    open_report(page, [run_dir], tmp_path / "report.html")
    scores = {row["model"]: row["score"] for row in page.evaluate(LEADERBOARD)}
    assert scores == {"acme/alpha": "≥ 13", "acme/beta": "≥ 8"}
    cells = page.evaluate(
        "[...document.querySelectorAll('#grid button.cell')].map((b) => b.textContent)"
    )
    assert "≥6" in cells and "5!" in cells and sum(c.startswith("≥") for c in cells) == 1


SETTINGS_ROWS = """[...document.querySelectorAll('#settings tbody tr')].map((tr) =>
  [...tr.querySelectorAll('td')].map((td) => [td.textContent, td.classList.contains('differs')]))"""


def judged_by(run_dir: Path, served: dict[str, str]) -> None:
    """Every answer's judgment served by ``served[model]``, with the demo's metadata (the
    published run replayed): the rows' answer counts differ, their judge does not."""
    lines = read_lines(run_dir)
    for line in lines:
        for answer in line.answers:
            judge = {"calls": 1, "input_tokens": 50, "output_tokens": 5, "cost_usd": 0.001}
            answer.calls = {
                **(answer.calls or {}),
                "judge": {**judge, "served_model": served[line.model]},
            }
    write_lines(run_dir, lines)
    metadata = json.loads((run_dir / "metadata.json").read_text("utf-8"))
    metadata["questions_source"] = {"kind": "published run", "file": "published.json"}
    (run_dir / "metadata.json").write_text(json.dumps(metadata), "utf-8")


@pytest.mark.parametrize("beta_judge", ["o1-mini", "o1-mini-2024-09-12"])
def test_a_column_is_highlighted_only_when_its_meaning_differs_and_a_replay_spent_nothing(
    page: Page, tmp_path: Path, beta_judge: str
) -> None:
    """Both rows judged by o1-mini: "judge served by" reads o1-mini (N) with each row's own
    count, and is not highlighted; a row served by another model is. The demo's replay
    prices the published run's tokens: each dollar figure says (replay), and the caption
    says nothing was spent."""
    run_dir = make_run_dir(tmp_path / "run", model_cost_usd=0.01)
    judged_by(run_dir, {"acme/alpha": "o1-mini", "acme/beta": beta_judge})
    open_report(page, [run_dir], tmp_path / "report.html")
    head = page.evaluate("[...document.querySelectorAll('#settings th')].map((t) => t.textContent)")
    column = head.index("judge served by")
    served = [row[column] for row in page.evaluate(SETTINGS_ROWS)]
    counts = [text.rsplit("(", 1)[1] for text, _ in served]
    assert len(set(counts)) == 2, "the rows' answer counts differ"
    assert [differs for _, differs in served] == [beta_judge != "o1-mini"] * 2
    costs = [row["cost_usd"] for row in page.evaluate(LEADERBOARD)]
    assert costs and all(cost.startswith("$") and cost.endswith(" (replay)") for cost in costs)
    caption = page.evaluate("document.getElementById('counting').textContent")
    assert "A row marked (replay) is aidanbench demo's replay of the published run" in caption
    assert "nothing was spent" in caption


def test_a_judge_panel_is_named_with_each_judges_cost(page: Page, tmp_path: Path) -> None:
    """Answers judged by a panel: the settings table's "judge panel" column names every
    judge, its threshold, the answers it passed and its dollars, as ``report`` does."""
    run_dir = make_run_dir(tmp_path / "run", repeats=1)
    lines = read_lines(run_dir)
    for line in lines:
        for answer in line.answers:
            seats = [("judge-a", 47.0, 0.002), ("judge-b", 64.0, None)]
            answer.__pydantic_extra__ = {
                **(answer.__pydantic_extra__ or {}),
                "judges": [
                    {"judge": j, "score": 80.0, "threshold": t, "passes": True, "cost_usd": c}
                    for j, t, c in seats
                ],
            }
    write_lines(run_dir, lines)
    open_report(page, [run_dir], tmp_path / "report.html")
    head = page.evaluate("[...document.querySelectorAll('#settings th')].map((t) => t.textContent)")
    column = head.index("judge panel")
    models = ("acme/alpha", "acme/beta")
    shown = [row[column][0] for row in page.evaluate(SETTINGS_ROWS)]
    answers = {model: sum(len(x.answers) for x in lines if x.model == model) for model in models}
    assert len(shown) == len(models)
    for text, n in zip(shown, answers.values(), strict=True):
        assert f"judge-a at > 47 (passed {n} of {n}, ${0.002 * n:.4f})" in text
        assert f"judge-b at > 64 (passed {n} of {n}, unknown dollars)" in text, "never $0"
