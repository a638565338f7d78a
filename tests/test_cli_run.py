"""``aidanbench run`` end to end against the local server: resume, interrupts, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_flags

from .commands import interrupt_after
from .conftest import REPO

QUESTIONS = bundled_questions(4)
SERVED = ("m1", "m2", "o1-mini", "text-embedding-3-large")
"""What the stub lists on ``GET /v1/models``: the preflight then asks nothing more."""


@pytest.fixture
def bench_stub() -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 3 + i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, models=SERVED) as stub:
        yield stub


def run_args(stub: OpenAIStub, run_dir: Path, *extra: str) -> list[str]:
    return [
        *("run", "--model", "m1", "--model", "m2", "--questions", str(len(QUESTIONS))),
        *stub_flags(stub.base_url),
        *("--run-dir", str(run_dir), *extra),
    ]


def without_times(results: dict[str, Any]) -> dict[str, Any]:
    """results.json without processing_time (wall clock)."""
    for temps in results["models"].values():
        for questions in temps.values():
            for records in questions.values():
                for record in records:
                    record.pop("processing_time")
    return results


def read_results(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    return without_times(data)


def test_run_writes_the_run_directory(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main(run_args(bench_stub, run_dir)) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results["models"]) == ["m1", "m2"]
    by_question = results["models"]["m1"]["0.7"]
    assert list(by_question) == QUESTIONS, "first N bundled questions, in order"
    assert [len(by_question[q]) - 1 for q in QUESTIONS] == [3, 4, 5, 6]
    record = by_question[QUESTIONS[0]][0]
    assert set(record) == {
        "answer_num",
        "answer",
        "coherence_score",
        "embedding_dissimilarity_score",
        "processing_time",
    }
    lines = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * (4 + 5 + 6 + 7)
    assert {"model", "temperature", "question", "repeat", "index", "raw_reply", "calls"} <= set(
        lines[0]
    )
    assert lines[0]["calls"]["generate"]["served_model"] == "m1"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["totals"]["score"] == 2 * (3 + 4 + 5 + 6)
    assert meta["endpoints"]["model"] == f"127.0.0.1:{bench_stub.port}"
    assert meta["settings"]["thresholds"] == {
        "coherence": 15.0,
        "novelty": 0.15,
        "llm_novelty": None,
    }
    assert len(meta["prompts_sha256"]) == 64 and meta["questions"] == 4

    calls = bench_stub.asked()
    assert main(run_args(bench_stub, run_dir)) == 0, "rerun of a finished run"
    assert bench_stub.asked() == calls, "finished questions are skipped"


def cli(stub: OpenAIStub, run_dir: Path, api_key: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AIDANBENCH_TEST_KEY": api_key}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aidanbench.cli.main",
            *run_args(stub, run_dir, "--concurrency", "3"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_to_the_end(stub: OpenAIStub, run_dir: Path, api_key: str, timeout: float) -> None:
    """``cli`` until it ends by itself, successfully."""
    proc = cli(stub, run_dir, api_key)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err


def test_ctrl_c_while_the_report_is_written_is_one_line(
    bench_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every question is done and saved when the page is built (80 models' paired
    comparisons take half a minute): Ctrl-C then says so in one line, not a traceback."""
    import aidanbench.analysis.view as view

    def interrupted(*args: Any, **kwargs: Any) -> Path:
        raise KeyboardInterrupt

    run_dir = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(view, "write_page", interrupted)
        assert main(run_args(bench_stub, run_dir)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("Interrupted while writing the report page; every question is")
    assert f"aidanbench view {run_dir}" in err[-1]
    assert main(["view", str(run_dir)]) == 0
    assert (run_dir / "report.html").is_file()


@pytest.mark.e2e
def test_interrupted_runs_resume_to_the_same_results(tmp_path: Path, api_key: str) -> None:
    brain = ScriptedBrain({q: 3 + i for i, q in enumerate(QUESTIONS)})
    with OpenAIStub(brain, latency=Latency(generate=0.03, coherence=0.04, embed=0.01)) as stub:
        clean_dir = tmp_path / "clean"
        run_to_the_end(stub, clean_dir, api_key, timeout=120)

        run_dir = tmp_path / "interrupted"
        stub.clear()
        err = interrupt_after(cli(stub, run_dir, api_key), stub, 8, signal.SIGINT)
        assert "run the same command again to resume" in err
        stub.clear()
        proc = cli(stub, run_dir, api_key)
        interrupt_after(proc, stub, 10, signal.SIGKILL)
        assert proc.returncode == -signal.SIGKILL
        run_to_the_end(stub, run_dir, api_key, timeout=120)
    assert read_results(run_dir) == read_results(clean_dir)
    answers = [json.loads(x) for x in (run_dir / "answers.jsonl").read_text().splitlines()]
    keys = [(a["model"], a["question"], a["index"]) for a in answers]
    assert len(keys) == len(set(keys)) == 2 * (4 + 5 + 6 + 7)


def one_line_error(capsys: pytest.CaptureFixture[str], status: int) -> str:
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1, err
    return err


def test_missing_key_variable(
    bench_stub: OpenAIStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("AIDANBENCH_TEST_KEY", raising=False)
    err = one_line_error(capsys, main(run_args(bench_stub, tmp_path / "r")))
    assert "AIDANBENCH_TEST_KEY" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (None, ".json", "not found"),
        (b"", ".txt", "empty"),
        (b"\xff\xfe\x00bad", ".txt", "not UTF-8"),
        (b'{"a": 1}', ".json", "JSON list of strings"),
        (b'["q1", 2]', ".json", "JSON list of strings"),
        (b'["q1", "q1"]', ".json", "repeats question 1"),
        (b'["q1", "  "]', ".json", "question 2 is empty"),
        (b"[]", ".json", "no questions"),
        (json.dumps(["x" * 5000]).encode(), ".json", "characters"),
        (b"name\nq1\n", ".csv", "'question' column"),
        (b'{"q": "x"}\n', ".jsonl", "string field 'question'"),
    ],
)
def test_bad_questions_file(
    bench_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | None,
    suffix: str,
    message: str,
) -> None:
    path = tmp_path / f"questions{suffix}"
    if content is not None:
        path.write_bytes(content)
    args = run_args(bench_stub, tmp_path / "r")
    args[args.index("--questions") : args.index("--questions") + 2] = [
        "--questions-file",
        str(path),
    ]
    err = one_line_error(capsys, main(args))
    assert message in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("content", "suffix"),
    [
        (b'["q1", "q2"]', ".json"),
        (b'{"question": "q1"}\n{"question": "q2"}\n', ".jsonl"),
        (b"id,question\n1,q1\n2,q2\n", ".csv"),
        (b"q1\n\nq2\n", ".txt"),
    ],
)
def test_questions_file_formats(content: bytes, suffix: str, tmp_path: Path) -> None:
    from aidanbench.graph.questions import load_questions

    path = tmp_path / f"q{suffix}"
    path.write_bytes(content)
    assert load_questions(path) == ["q1", "q2"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--coherence-threshold", "150", "--coherence-threshold"),
        ("--novelty-threshold", "-1", "--novelty-threshold"),
        ("--max-answers", "0", "--max-answers"),
        ("--base-url", "not-a-url", "--base-url"),
        ("--repeats", "0", "--repeats"),
    ],
)
def test_invalid_settings(
    bench_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    message: str,
) -> None:
    args = run_args(bench_stub, tmp_path / "r")
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    err = one_line_error(capsys, main(args))
    assert message in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--coherence-threshold", "high"),
        ("--reward-mode", "best"),
        ("--model-kwargs", "{x"),
        ("--model-kwargs", "[1]"),
        ("--concurrency", "many"),
    ],
)
def test_unparseable_flag_values(
    bench_stub: OpenAIStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*run_args(bench_stub, tmp_path / "r"), flag, value])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err, err
    assert not (tmp_path / "r").exists()


def test_scoring_setting_change_is_refused_naming_the_setting(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "r"
    assert main(run_args(bench_stub, run_dir, "--max-answers", "2")) == 0
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    capsys.readouterr()
    calls = bench_stub.asked()
    for extra, named in (
        (("--max-answers", "3"), "max_answers = 2; this command gives 3 (--max-answers)"),
        (("--max-answers", "2", "--coherence-threshold", "20"), "coherence_threshold = 15.0"),
        (("--max-answers", "2", "--judge-model", "other"), "judge_model = 'o1-mini'"),
        (("--max-answers", "2", "--model-kwargs", '{"top_p": 0.5}'), "model_kwargs = {}"),
        (("--max-answers", "3", "--use-stored-settings"), "max_answers = 2"),
    ):
        err = one_line_error(capsys, main(run_args(bench_stub, run_dir, *extra)))
        assert named in err and "new --run-dir" in err, err
        assert ("rescore" in err) == ("threshold" in named or "max_answers" in named), err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert bench_stub.asked() == calls, "nothing was sent"
    assert main(run_args(bench_stub, run_dir, "--use-stored-settings")) == 0, "stored: max 2"
    assert bench_stub.asked() == calls, "the stored cap keeps every thread finished"


def test_use_stored_settings_without_a_spec_in_metadata(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    """Metadata without ``spec`` (damaged by hand, or written by another tool): the
    threads' own records decide; ``--use-stored-settings`` used to fail on ``spec``."""
    run_dir = tmp_path / "r"
    assert main(run_args(bench_stub, run_dir)) == 0
    meta = json.loads((run_dir / "metadata.json").read_text())
    for key in ("spec", "scoring_settings", "sessions"):
        del meta[key]
    (run_dir / "metadata.json").write_text(json.dumps(meta))
    calls = bench_stub.asked()
    assert main(run_args(bench_stub, run_dir, "--use-stored-settings")) == 0
    assert bench_stub.asked() == calls


@pytest.mark.e2e
def test_locked_run_dir_is_refused(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fcntl

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    with open(run_dir / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        code = subprocess.run(
            [sys.executable, "-m", "aidanbench.cli.main", *run_args(bench_stub, run_dir)],
            env={**os.environ, "AIDANBENCH_TEST_KEY": api_key},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert code.returncode == 2
    assert "in use by another aidanbench run" in code.stderr
    assert bench_stub.asked() == 0


def test_errored_question_is_listed_and_retried_by_a_rerun(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aidanbench.testing import http_error, when

    run_dir = tmp_path / "r"
    bench_stub.faults = when("coherence", http_error(400, "bad request"), match=QUESTIONS[2])
    assert main(run_args(bench_stub, run_dir)) == 1
    err = capsys.readouterr().err
    assert "2 question(s) stopped on an error" in err
    assert "judge at 127.0.0.1" in err and "HTTP 400" in err
    lines = [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]
    stops = {(x["model"], x["question"]): x["stop_reason"] for x in lines}
    assert [stops[("m1", q)] for q in QUESTIONS] == ["novelty", "novelty", "error", "novelty"]

    bench_stub.faults = None
    calls = len(bench_stub.requests)
    assert main(run_args(bench_stub, run_dir)) == 0
    lines = [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]
    assert all(x["stop_reason"] == "novelty" for x in lines)
    assert [x["score"] for x in lines if x["model"] == "m1"] == [3, 4, 5, 6]
    retried = bench_stub.requests[calls:]
    assert {r.prompt.split("</question>")[0] for r in retried if r.kind == "generate"} == {
        f"Answer the following question:.\n<question>{QUESTIONS[2]}"
    }, "only the errored questions run again"


def test_unreachable_endpoint_is_one_line(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    args = run_args(bench_stub, tmp_path / "r")
    args[args.index("--judge-base-url") + 1] = closed
    err = one_line_error(capsys, main(args))
    assert "cannot reach the judge endpoint 127.0.0.1:" in err
    assert "--judge-base-url" in err and "OPENAI_BASE_URL" in err
    assert not (tmp_path / "r").exists()
    assert bench_stub.asked() == 0


def test_reward_mode_headline(
    bench_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(bench_stub, tmp_path / "r", "--reward-mode", "novelty_sum")) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("headline (novelty_sum): m1 @ 0.7: ")]
    assert len(lines) == 1
    novelty_sum = sum(
        json.loads(x)["novelty_sum"]
        for x in (tmp_path / "r" / "questions.jsonl").read_text().splitlines()
        if json.loads(x)["model"] == "m1"
    )
    assert lines[0].endswith(f"{novelty_sum:.2f}")
