"""``aidanbench plot``: four PNGs of the expected size, question selection, bad paths."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from aidanbench.analysis import plots
from aidanbench.analysis.rundir import read_results
from aidanbench.cli.main import main
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
