"""``aidanbench plot``: four PNGs of the expected size, question selection, bad paths."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from aidanbench import reference
from aidanbench.analysis import plots
from aidanbench.analysis.plots import COST_CHART, plot_cost_vs_score
from aidanbench.cli.main import main
from aidanbench.record.results import read_results
from tests.builders import chain, question_line, write_run_dir

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAMES = ["scores.png", "questions.png", "trajectory.png", "stop_reasons.png"]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which follows the 8-byte signature."""
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE and header[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def pixels(size: tuple[float, float]) -> tuple[int, int]:
    return round(size[0] * plots.DPI), round(size[1] * plots.DPI)


def assert_drawn(path: Path) -> None:
    """Not blank: a chart has many distinct colours, a blank canvas one."""
    from matplotlib.image import imread

    rgb = (imread(path)[..., :3] * 255).round().astype(np.int64)
    colours = rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2]
    assert len(np.unique(colours)) > 20


def plot(capsys: pytest.CaptureFixture[str], *argv: str) -> list[Path]:
    assert main(["plot", *argv]) == 0
    return [Path(line) for line in capsys.readouterr().out.splitlines()]


def test_reference_charts(
    reference_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "charts" / "nested"
    written = plot(capsys, str(reference_run), "-o", str(out))
    assert written == [out / name for name in NAMES]
    sizes = [png_size(path) for path in written]
    assert sizes == [
        pixels(plots.scores_figsize(5)),
        pixels(plots.questions_figsize(5, 10)),
        pixels(plots.trajectory_figsize(2)),
        pixels(plots.stop_reasons_figsize(5)),
    ]
    assert sizes[0] == (1500, 615)
    for path in written:
        assert_drawn(path)


def test_default_trajectory_is_longest_chain(reference_run: Path) -> None:
    data = json.loads(reference_run.read_text("utf-8"))
    longest = max(
        (len(records), question)
        for temps in data["models"].values()
        for question, records in temps["0.7"].items()
    )[1]
    assert plots.longest_chain_question(read_results(reference_run)) == longest


def synthetic_lines(questions: int, repeats: int) -> list[dict[str, object]]:
    lines = []
    for repeat in range(1, repeats + 1):
        for q in range(questions):
            for m, model in enumerate(("provider/alpha", "provider/beta", "gamma-large")):
                valid = (q * 7 + m * 11 + repeat * 3) % 40
                fail = "coherence" if q % 9 == 0 else "novelty"
                lines.append(
                    question_line(
                        model,
                        f"Question number {q + 1} about topic {q}?",
                        chain(valid, fail),
                        repeat=repeat,
                    )
                )
    return lines


def test_run_dir_with_63_questions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = write_run_dir(tmp_path / "run", synthetic_lines(63, repeats=2))
    written = plot(capsys, str(run_dir), "-o", str(tmp_path / "out"), "--question", "Q5")
    assert [png_size(p) for p in written] == [
        pixels(plots.scores_figsize(3)),
        pixels(plots.questions_figsize(3, 63)),
        pixels(plots.trajectory_figsize(2)),
        pixels(plots.stop_reasons_figsize(3)),
    ]
    _, height = png_size(written[1])
    assert height > 2500, "63 questions get room for a readable row each"
    for path in written:
        assert_drawn(path)


def test_llm_novelty_adds_a_trajectory_panel(tmp_path: Path) -> None:
    line = question_line(
        "m", "Why?", chain(3), thresholds={"llm_novelty": 0.15}, llm=[1.0, 0.6, 0.5, 0.4]
    )
    results = read_results(write_run_dir(tmp_path / "run", [line]))
    path = plots.plot_trajectory(results, "Why?", tmp_path / "t.png")
    assert png_size(path) == pixels(plots.trajectory_figsize(3))


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, "What's one way to use oregano?"),
        ("3", "Propose a solution to Los Angeles traffic."),
        ("Q9", "Why did Rome fall?"),
        ("oregano", "What's one way to use oregano?"),
        ("Why did Rome fall?", "Why did Rome fall?"),
    ],
)
def test_select_question(reference_run: Path, choice: str | None, expected: str) -> None:
    assert plots.select_question(read_results(reference_run), choice) == expected


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("11", "out of range 1-10"),
        ("0", "out of range 1-10"),
        ("What", "questions match 'What'"),
        ("quantum", "no question matches 'quantum'"),
    ],
)
def test_bad_question_is_usage_error(
    reference_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    choice: str,
    message: str,
) -> None:
    argv = ["plot", str(reference_run), "-o", str(tmp_path / "out"), "--question", choice]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists(), "nothing is created for a bad request"


def test_output_dir_that_is_a_file(
    reference_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "taken"
    target.write_text("not a directory", "utf-8")
    assert main(["plot", str(reference_run), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("aidanbench plot: error: cannot use") and str(target) in err
    assert target.read_text("utf-8") == "not a directory"


def test_missing_input_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path / "none.json"), "-o", str(tmp_path / "out")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plot", "calibrate"])
def test_without_the_plots_extra_one_line_names_it(
    command: str,
    reference_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """matplotlib is the [plots] extra: a command that draws says how to install it, in
    one line, before it reads or writes anything."""
    real = plots.importlib.util.find_spec
    monkeypatch.setattr(
        plots.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    out = tmp_path / "charts"
    args = [str(reference_run)] if command == "plot" else ["--embedding-model", "local"]
    assert main([command, *args, "-o" if command == "plot" else "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"aidanbench {command}: error: drawing charts needs the [plots] extra: "
        "pip install -e '.[plots]'"
    ]
    assert not out.exists()


def clipped_artists(figure: Figure) -> list[str]:
    """What a chart draws outside its own edges (a title or label cut off), if anything.

    Measured with the figure's renderer after its layout has run: the extent of every
    drawn artist, as matplotlib's ``get_tightbbox`` unions them (titles, axis labels, the
    tick labels actually drawn, annotations, legends, a suptitle), must lie inside the
    figure; each text outside it is named.
    """
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    drawn = figure.get_tightbbox(renderer)
    edges = Bbox.from_bounds(0, 0, *figure.get_size_inches()).padded(1 / figure.dpi)
    if (
        edges.containsx(drawn.x0)
        and edges.containsx(drawn.x1)
        and edges.containsy(drawn.y0)
        and edges.containsy(drawn.y1)
    ):
        return []
    inside = figure.bbox.padded(1.0)
    named = [
        text.get_text()
        for text in figure.findobj(Text)
        if text.get_visible()
        and text.get_text().strip()
        and not inside.contains(*text.get_window_extent(renderer).p1)
    ]
    return [f"drawn {drawn.bounds} in a figure of {edges.bounds} inches", *named]


LONG_NAMES = {
    "acme/alpha": "anthropic/claude-3.5-sonnet-20241022-with-a-long-provider-suffix",
    "acme/beta": "meta-llama/llama-3.1-70b-instruct",
}
"""Model names as long as real ones: labels and titles must make room for them."""


def test_no_chart_clips_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chart of a run with costs and long model names: every drawn artist inside.

    (``cost_vs_score.png`` once centred its title over axes squeezed by long point
    labels, and cut it off at the left edge.)
    """
    from tests.viewdata import make_run_dir

    run_dir = make_run_dir(tmp_path / "run", repeats=2, model_cost_usd=0.125)
    results = [
        dataclasses.replace(r, model=LONG_NAMES[r.model]) for r in read_results(run_dir)
    ] + read_results(reference.published_run())
    drawn: list[Figure] = []
    original = Figure.savefig

    def recording(self: Figure, *args: object, **kwargs: object) -> None:
        drawn.append(self)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Figure, "savefig", recording)
    out = tmp_path / "charts"
    out.mkdir()
    written = plots.plot_all(results, out)
    written.append(plot_cost_vs_score(results, out / COST_CHART))
    names = [path.name for path in written if path is not None]
    assert names == [*NAMES, COST_CHART]
    for name, figure in zip(names, drawn, strict=True):
        assert clipped_artists(figure) == [], name
