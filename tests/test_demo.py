"""``aidanbench demo``: the installed command replays the published run and checks it.

Each test runs the real console script in a subprocess (which starts its own local
server process), with no key in its environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aidanbench import reference
from aidanbench.cli.demo import differences, published_scores
from aidanbench.cli.main import main
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain, answer_seconds

from .conftest import KEY_VARIABLES

COMMAND = Path(sys.executable).with_name("aidanbench")
PUBLISHED_LINE = "totals 421 / 45 / 224 / 147 / 275"


def environment() -> dict[str, str]:
    """The test's environment without any API key variable."""
    return {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}


def demo(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), "demo", "--run-dir", str(run_dir), *extra],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def start_demo(run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(COMMAND), "demo", "--run-dir", str(run_dir), *extra],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished_lines(stderr: str) -> list[str]:
    """The progress lines of questions finished in that invocation (not skipped ones)."""
    return [line for line in stderr.splitlines() if " valid — " in line]


def finished_questions(stderr: str) -> set[tuple[str, str]]:
    """(model label, question start) of each question finished in that invocation."""
    out = set()
    for line in finished_lines(stderr):
        label, rest = line.split("] ", 1)[1].split(": ", 1)
        out.add((label, rest.split(" — ", 1)[1]))
    return out


def question_scores(run_dir: Path) -> dict[str, dict[str, int]]:
    scores: dict[str, dict[str, int]] = {}
    for raw in (run_dir / "questions.jsonl").read_text("utf-8").splitlines():
        line = json.loads(raw)
        scores.setdefault(line["model"], {})[line["question"]] = line["score"]
    return scores


@pytest.fixture(scope="module")
def finished(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    return run_dir, demo(run_dir, "--latency-scale", "0")


@pytest.mark.e2e
def test_demo_reproduces_the_published_run(
    finished: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, done = finished
    assert done.returncode == 0, done.stderr
    assert PUBLISHED_LINE in done.stdout
    for model, total in reference.PUBLISHED_TOTALS.items():
        assert f"headline (count): {model} @ 0.7: {total}" in done.stdout
    assert question_scores(run_dir) == published_scores(published_chains())
    assert len(finished_lines(done.stderr)) == 49
    for name in ("metadata.json", "results.json", "answers.jsonl", "checkpoints.sqlite"):
        assert (run_dir / name).is_file(), name
    assert f"report: {run_dir / 'report.html'}" in done.stdout
    assert "anthropic/claude-3.5-sonnet" in (run_dir / "report.html").read_text("utf-8")
    metadata = json.loads((run_dir / "metadata.json").read_text("utf-8"))
    assert metadata["totals"]["score"] == sum(reference.PUBLISHED_TOTALS.values())


@pytest.mark.e2e
def test_the_estimate_of_the_demo_is_within_a_quarter_of_what_it_cost(
    finished: tuple[Path, subprocess.CompletedProcess[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``estimate`` of the demo's settings (its models and questions, the judge, embeddings
    and prices by default) fed the demo's run, against the dollars the run recorded."""
    run_dir, done = finished
    assert done.returncode == 0, done.stderr
    chains = published_chains()
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(list(dict.fromkeys(c.question for c in chains))))
    models = [flag for m in dict.fromkeys(c.model for c in chains) for flag in ("-m", m)]
    capsys.readouterr()
    command = ["estimate", *models, "--questions-file", str(questions), "--json"]
    assert main([*command, "--answers-from", str(run_dir)]) == 0
    expected = json.loads(capsys.readouterr().out)["dollars"]["expected"]
    spent = json.loads((run_dir / "metadata.json").read_text("utf-8"))["usage"]["dollars"]
    assert abs(expected - spent) <= 0.25 * spent, (expected, spent)


@pytest.mark.e2e
def test_a_differing_score_fails_the_demo(
    finished: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    run_dir, _ = finished
    expected = published_scores(published_chains())
    question = next(iter(expected["gpt-4-turbo"]))
    expected["gpt-4-turbo"][question] += 1
    tampered = tmp_path / "expected.json"
    tampered.write_text(json.dumps(expected), "utf-8")
    done = demo(run_dir, "--latency-scale", "0", "--expect", str(tampered))
    assert done.returncode == 1, done.stdout
    assert "Demo check FAILED: 2 score(s) differ" in done.stderr
    assert "gpt-4-turbo: total 224, expected 225" in done.stderr
    assert "Demo check passed" not in done.stdout


@pytest.mark.e2e
def test_interrupted_demo_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start_demo(run_dir, "--latency-scale", "0.02")
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while len(finished_lines("\n".join(seen))) < 10 and time.monotonic() < deadline:
        seen.append(proc.stderr.readline())
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    assert "run the same command again to resume" in rest
    before = finished_questions("".join(seen) + rest)
    assert 10 <= len(before) < 49

    done = demo(run_dir, "--latency-scale", "0")
    assert done.returncode == 0, done.stderr
    assert PUBLISHED_LINE in done.stdout
    after = finished_questions(done.stderr)
    assert not before & after, "questions finished before the interrupt are not run again"
    assert len(before | after) <= 49 and len(after) < 49 - 9
    assert question_scores(run_dir) == published_scores(published_chains())


@pytest.mark.e2e
def test_bad_scale_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    done = demo(tmp_path / "run", "--latency-scale", "-1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "aidanbench demo: error: --latency-scale must be at least 0, got -1.0"
    ]
    assert not (tmp_path / "run").exists()


def test_answer_times_follow_the_recording() -> None:
    chain = max(published_chains(), key=lambda c: len(c.answers))
    seconds = answer_seconds(chain)
    assert len(seconds) == len(chain.answers)
    assert sum(seconds) == pytest.approx(chain.answers[-1].elapsed_s)
    assert all(s >= 0 for s in seconds)


def test_bad_latency_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="latency scale"):
        ReplayBrain(published_chains(), -1)


def test_differences_name_each_question_and_total() -> None:
    expected = {"m": {"q1": 2, "q2": 3}}
    got = {"m": {"q1": 2, "q2": 4}}
    assert differences(got, expected) == ["m: q2: got 4, expected 3", "m: total 6, expected 5"]
    assert differences({"m": {"q1": 2}}, {"m": {"q1": 2}}) == []
