"""One reading of a judge calibration file (``core.calibration.read_calibration``): ``run``,
``rescore`` (with and without ``--judge-model``), ``run -a`` and the verifiers environments'
arguments (``core.seed_args.SeedArgs``) refuse the same edited files with the same line, and
take the same threshold from a sound one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aidanbench.cli.main import main
from aidanbench.core.calibration import CalibrationFileError, read_calibration
from aidanbench.core.seed_args import SeedArgs
from aidanbench.reference import published_run
from tests.judging import write_calibration

JUDGE = "gpt-4.1-mini"


def edited(path: Path, **judge: Any) -> Path:
    """A sound calibration of ``JUDGE`` at 47.228 ([40, 52) deciding alike), with ``judge``'s
    fields replaced (``None``: removed)."""
    write_calibration(path, JUDGE, 47.228, (40, 52))
    document = json.loads(path.read_text("utf-8"))
    for key, value in judge.items():
        if value is None:
            del document["judge"][key]
        else:
            document["judge"][key] = value
    path.write_text(json.dumps(document), "utf-8")
    return path


def exit_code(argv: list[str]) -> int:
    """``main``'s status, an argument parser's refusal (``SystemExit``) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


EDITS = [
    ({"threshold": -5}, "judge.threshold must be a coherence threshold between 0 and 100"),
    ({"threshold": 1e9}, "judge.threshold must be a coherence threshold between 0 and 100"),
    ({"threshold": math.nan}, "judge.threshold must be a coherence threshold between 0 and 100"),
    ({"threshold": "47.228"}, "judge.threshold must be a number"),
    ({"threshold": None}, "judge.threshold is missing"),
    ({"setting_value": -5}, "judge.setting_value must be a coherence threshold"),
    ({"setting_value": 1e9}, "judge.setting_value must be a coherence threshold"),
    ({"threshold": 30}, "judge.threshold 30 disagrees with the file's own calibration"),
    ({"setting_value": 60}, "judge.setting_value 60 disagrees with the file's own calibration"),
    ({"equivalent_interval": None}, "judge.equivalent_interval must be [low, high]"),
]


@pytest.mark.parametrize(("edit", "says"), EDITS)
def test_an_edited_file_is_refused_everywhere_with_one_line(
    edit: dict[str, Any], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = edited(tmp_path / "calibration.json", **edit)
    with pytest.raises(CalibrationFileError, match="^" + str(path)):
        read_calibration(path)
    run = ["run", "-m", "m", "--judge-model", JUDGE, "--run-dir", str(tmp_path / "run")]
    env = json.dumps({"thresholds": {"coherence_score": str(path)}})
    given = ["--coherence-threshold", str(path)]
    rescore = ["rescore", str(published_run()), "--novelty-threshold", "0.15", *given]
    commands = {
        "run": [*run, *given, "--dry-run"],
        "run -a": [*run, "--dry-run", "-a", env],
        "rescore": [*rescore, "--other-judge-calibration"],
        "rescore --judge-model": [*rescore, "--judge-model", JUDGE],
    }
    for name, argv in commands.items():
        assert exit_code(argv) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, (name, err)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValidationError, match=r"thresholds\.coherence_score: .*" + says[:20]):
        SeedArgs.model_validate(
            {"judge_model": JUDGE, "thresholds": {"coherence_score": str(path)}}
        )


def test_a_sound_file_gives_every_reader_its_setting_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = edited(tmp_path / "calibration.json", threshold=47.2281)
    found = read_calibration(path)
    assert (found.judge_model, found.threshold) == (JUDGE, 47.228)
    seeded = SeedArgs.model_validate(
        {"judge_model": JUDGE, "thresholds": {"coherence_score": str(path)}}
    )
    assert seeded.settings("m").coherence_threshold == 47.228
    with pytest.raises(ValidationError, match=f"calibrates the judge {JUDGE}, not the judge o1"):
        SeedArgs.model_validate({"thresholds": {"coherence_score": str(path)}})
    argv = ["rescore", str(published_run()), "--coherence-threshold", str(path), "--json"]
    argv += ["--novelty-threshold", "0.15", "--other-judge-calibration"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["thresholds"]["coherence"] == 47.228


def test_rescore_refuses_another_judges_file_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--judge-model`` the recorded scores are cut as they are: a threshold calibrated
    for another judge is refused, naming the two ways on, until ``--other-judge-calibration``
    asks for it."""
    path = write_calibration(tmp_path / "calibration.json", JUDGE, 47.5)
    argv = ["rescore", str(published_run()), "--coherence-threshold", str(path)]
    argv += ["--novelty-threshold", "0.15"]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"calibrates the judge {JUDGE}, but these answers were judged by an unrecorded" in line
    assert f"--judge-model {JUDGE}" in line and "--other-judge-calibration" in line
    assert main([*argv, "--other-judge-calibration"]) == 0
