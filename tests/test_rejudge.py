"""``rescore --judge-model``: the published run judged again by a successor, the chains
walked under its judgments, and ``--into`` a run directory that ``aidanbench run``
continues, asking the models only for answers past each recorded chain. The tests that
judge the whole published run again are end-to-end."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench import reference
from aidanbench.cli.main import main
from aidanbench.record.metadata import read_metadata
from aidanbench.record.results import QuestionResult
from aidanbench.record.results import read_results as read_run_dir
from aidanbench.testing import (
    Fault,
    OpenAIStub,
    RequestInfo,
    http_error,
    parse_coherence_prompt,
    parse_generate_prompt,
)
from aidanbench.testing.published import published_chains
from tests.judging import Unreadable, affine_judge, one_question_reference, write_calibration

PUBLISHED = reference.published_run()
KEY = "AIDANBENCH_TEST_KEY"


@pytest.fixture
def server(chains: list[QuestionResult]) -> Iterator[OpenAIStub]:
    with OpenAIStub(affine_judge(chains)) as stub:
        yield stub


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-not-a-key")


def rescore(
    server: OpenAIStub, capsys: pytest.CaptureFixture[str], *extra: str, path: Path = PUBLISHED
) -> dict[str, Any]:
    argv = ["rescore", str(path), "--judge-model", "stub-judge"]
    argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", KEY, "--json", *extra]
    assert main(argv) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    return payload


def totals(payload: dict[str, Any]) -> dict[str, int]:
    return {run["model"]: run["score"] for run in payload["runs"]}


@pytest.mark.e2e
def test_calibrated_stub_judge_keeps_the_published_scores(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Calibrated, then used by file: 421 / 45 / 224 / 147 / 275 exactly, nothing
    truncated; at 15 unchanged the one answer o1-mini failed passes and its chain is a
    lower bound."""
    args = ["calibrate", "--judge-model", "stub-judge", "--judge-base-url", server.base_url]
    assert main([*args, "--judge-api-key-env", KEY, "--out", str(tmp_path), "--json"]) == 0
    calibration = json.loads(capsys.readouterr().out)["calibration_file"]
    cache = str(tmp_path / "judge-cache.sqlite")
    asked = server.count("coherence")
    payload = rescore(
        server,
        capsys,
        "--coherence-threshold",
        calibration,
        "--novelty-threshold",
        "0.15",
        "--cache",
        cache,
    )
    assert server.count("coherence") == asked, "judged from the calibration's cache"
    assert totals(payload) == reference.PUBLISHED_TOTALS
    assert payload["truncated"] == 0
    assert payload["judge"]["coherence_threshold_source"]["kind"] == "calibration"
    assert payload["judge"]["served_models"] == {"stub-judge": 1158}
    at_15 = rescore(
        server,
        capsys,
        "--coherence-threshold",
        "15",
        "--novelty-threshold",
        "0.15",
        "--cache",
        cache,
    )
    assert at_15["truncated"] == 1
    assert totals(at_15)["gpt-4-turbo"] == 225
    lines = [q for run in at_15["runs"] for q in run["questions"] if q["truncated"]]
    assert [q["stop_reason"] for q in lines] == ["truncated"]


@pytest.mark.e2e
def test_stricter_judge_ends_chains_earlier_exactly(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 60 on the stub's scale (o1-mini's 40) answers o1-mini passed now fail: those
    chains end there, exact scores, no lower bounds."""
    payload = rescore(
        server,
        capsys,
        "--coherence-threshold",
        "60",
        "--novelty-threshold",
        "0.15",
        "--cache",
        str(tmp_path / "c.sqlite"),
    )
    recount: dict[str, int] = {}
    for chain in published_chains():
        score = 0
        for answer in chain.answers:
            assert answer.coherence is not None and answer.novelty is not None
            if not (answer.coherence * 0.5 + 40 >= 61 and answer.novelty > 0.15):
                break
            score += 1
        recount[chain.model] = recount.get(chain.model, 0) + score
    assert totals(payload) == recount
    assert payload["truncated"] == 0
    assert sum(recount.values()) < sum(reference.PUBLISHED_TOTALS.values())


@pytest.mark.e2e
def test_into_then_run_asks_only_for_answers_past_each_chain(
    server: OpenAIStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    chains: list[QuestionResult],
) -> None:
    """15 unchanged and novelty > 0.1: 34 of the 49 chains pass their recorded end. The
    new run directory holds every re-judged chain; ``aidanbench run`` (the printed
    commands, endpoints added) generates only answers past a recorded chain, judges only
    new answers, and leaves the finished chains exactly as re-judged."""
    into = tmp_path / "rejudged"
    payload = rescore(
        server,
        capsys,
        "--coherence-threshold",
        "15",
        "--novelty-threshold",
        "0.1",
        "--into",
        str(into),
    )
    assert (
        payload["into"]["threads"] == 49 and payload["into"]["open"] == payload["truncated"] == 34
    )
    meta = read_metadata(into)
    assert meta is not None and meta.rejudged_from is not None
    assert meta.rejudged_from["kind"] == "results file"
    assert meta.judging is not None and meta.judging["gpt-4-turbo"].judge_model == "stub-judge"
    rescored = {(q["model"], q["question"]): q for q in _lines(payload)}
    assert main(["report", "--json", str(into)]) == 0
    shown = json.loads(capsys.readouterr().out)
    open_lines = {k for k, q in rescored.items() if q["truncated"]}
    assert {(q["model"], q["question"]) for q in _lines(shown) if q["lower_bound"]} == open_lines
    assert all(run["lower_bound"] for run in shown["runs"])
    assert main(["report", str(into)]) == 0
    text = capsys.readouterr().out
    cells = re.findall(r"│\s*(≥?\d+)\s*(?=│)", text.split("Valid answers per question")[1])
    assert sum(cell.startswith("≥") for cell in cells) == len(open_lines)
    length = {(c.model, c.question): len(c.answers) for c in chains}
    recorded = {(c.question, a.answer) for c in chains for a in c.answers}
    server.clear()
    for command in payload["into"]["continue"]:
        argv = shlex.split(command)[1:]
        for role in ("", "judge-", "embedding-"):
            argv += [f"--{role}base-url", server.base_url, f"--{role}api-key-env", KEY]
        assert main([*argv, "--concurrency", "64"]) == 0
        capsys.readouterr()
    generated = server.of_kind("generate")
    assert generated, "the open chains were continued"
    for request in generated:
        question, previous = parse_generate_prompt(request.prompt)
        assert len(previous) >= length[(request.model, question)], "asked for a recorded answer"
    for request in server.of_kind("coherence"):
        assert parse_coherence_prompt(request.prompt) not in recorded, "judged a recorded answer"
    for line in read_run_dir(into):
        before = rescored[(line.model, line.question)]
        if before["truncated"]:
            assert line.score >= before["score"] and line.stop_reason in ("novelty", "coherence")
        else:
            assert line.score == before["score"] and line.stop_reason == before["stop_reason"]
    assert (
        main(
            [
                "rescore",
                str(into),
                "--judge-model",
                "x",
                "--coherence-threshold",
                "1",
                "--novelty-threshold",
                "0.1",
                "--into",
                str(into),
            ]
        )
        == 2
    )
    assert "exists already; name a new one" in capsys.readouterr().err


def _lines(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**q, "model": run["model"]} for run in payload["runs"] for q in run["questions"]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--into", "x"], "--into needs --judge-model"),
        (["--batch"], "--batch needs --judge-model"),
        (["--judge-samples", "3"], "--judge-samples needs --judge-model"),
    ],
)
def test_judge_flags_need_a_judge(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["rescore", str(PUBLISHED), "--coherence-threshold", "15", "--novelty-threshold", "0.15"]
    assert main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_calibration_of_another_judge_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = write_calibration(tmp_path / "calibration-judge-a.json", "a", 47.5)
    argv = ["rescore", str(PUBLISHED), "--judge-model", "b", "--judge-api-key-env", KEY]
    assert (
        main([*argv, "--coherence-threshold", str(calibration), "--novelty-threshold", "0.15"]) == 2
    )
    err = capsys.readouterr().err
    assert "calibrates the judge a, but the judge here is b" in err
    run = ["run", "-m", "m", "--judge-model", "b", "--coherence-threshold", str(calibration)]
    assert main([*run, "--run-dir", str(tmp_path / "run"), "--dry-run"]) == 2
    assert "calibrates the judge a" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_run_directory_continues_with_its_own_settings_and_vectors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a run directory: the model's recorded scoring settings carry over, its cache
    comes along (no recorded answer is embedded again), and a chain the new threshold
    opens is continued past its end."""
    from aidanbench.testing import ScriptedBrain
    from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags

    monkeypatch.setenv(TEST_KEY_VARIABLE, "sk-test-not-a-key")
    source, into = tmp_path / "source", tmp_path / "into"
    brain = ScriptedBrain(default_length=2, default_ending="coherence", coherent_score=80)
    with OpenAIStub(brain) as stub:
        flags = stub_flags(stub.base_url)
        argv = [
            "run",
            "-m",
            "m",
            "--questions",
            "2",
            "--max-answers",
            "9",
            "--run-dir",
            str(source),
        ]
        assert main([*argv, *flags]) == 0
        capsys.readouterr()
        recorded = {a.answer for line in read_run_dir(source) for a in line.answers}
        rescore_argv = ["rescore", str(source), "--judge-model", "judge-model", *flags[4:8]]
        rescore_argv += ["--coherence-threshold", "4"]
        rescore_argv += ["--novelty-threshold", "0.15", "--into", str(into), "--json"]
        assert main(rescore_argv) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["truncated"] == 2 and payload["into"]["open"] == 2
        meta = read_metadata(into)
        assert meta is not None and meta.scoring_settings is not None
        scoring = meta.scoring_settings["m"]
        assert scoring["max_answers"] == 9 and scoring["coherence_threshold"] == 4
        stub.clear()
        (command,) = payload["into"]["continue"]
        assert main([*shlex.split(command)[1:], *flags]) == 0
        capsys.readouterr()
        embedded = {text for request in stub.of_kind("embed") for text in request.texts}
        assert embedded and not embedded & recorded, "recorded answers' vectors came along"
    for line in read_run_dir(into):
        # past its plan each answer is new gibberish, judged 5 > 4: on to the cap kept
        assert line.score == 9 and line.stop_reason == "max_answers"


def test_a_threshold_fitted_on_passes_only_says_so_wherever_it_is_shown(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reference with fewer than 20 failures (here one question, ending on novelty: none):
    calibrate's report and file say the threshold is fitted on passes only, and a run
    that takes the file carries the note into report's judging line."""
    small = tmp_path / "small.json"
    one_question_reference(small)
    judge = ["--judge-model", "stub-judge", "--judge-base-url", server.base_url]
    judge += ["--judge-api-key-env", KEY, "--cache", str(tmp_path / "cache.sqlite")]
    assert main(["calibrate", "--reference", str(small), *judge, "--out", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    (file,) = tmp_path.glob("calibration-judge-*.json")
    note = json.loads(file.read_text())["judge"]["note"]
    assert note.startswith("fitted on passes only (0 failures of o1-mini's rule in 53 answers")
    assert f"calibrated threshold fitted on passes only ({note.split('(', 1)[1]}" in " ".join(
        shown.split()
    )
    into = tmp_path / "into"
    argv = ["rescore", str(small), *judge, "--coherence-threshold", str(file)]
    assert main([*argv, "--novelty-threshold", "0.15", "--into", str(into)]) == 0
    capsys.readouterr()
    assert main(["report", str(into)]) == 0
    assert f"{file.name} (sha256 " in (text := " ".join(capsys.readouterr().out.split()))
    assert f"), {note}" in text


@pytest.mark.parametrize("command", ["calibrate", "rescore"])
def test_answers_left_unjudged_are_one_line_and_a_rerun_asks_only_for_them(
    command: str, chains: list[QuestionResult], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer whose judge request fails past every retry (503): exit 1 and one line
    counting it among the distinct answers, no calibration file and no ``--into`` run
    written; the others are cached, so the same command then asks for that one alone."""
    small = tmp_path / "small.json"
    answers = one_question_reference(small)
    failing = [True]

    def fault(info: RequestInfo) -> Fault | None:
        return http_error(503) if failing[0] and answers[1][:60] in info.prompt else None

    into = tmp_path / "into"
    if command == "calibrate":
        argv = [command, "--reference", str(small), "--out", str(tmp_path)]
    else:
        argv = [command, str(small), "--coherence-threshold", "15", "--novelty-threshold", "0.15"]
        argv += ["--into", str(into)]
    with OpenAIStub(affine_judge(chains), faults=fault) as server:
        argv += ["--judge-model", "stub-judge", "--judge-base-url", server.base_url]
        argv += ["--judge-api-key-env", KEY, "--max-retries", "0"]
        argv += ["--cache", str(tmp_path / "cache.sqlite")]
        assert main(argv) == 1
        last = capsys.readouterr().err.splitlines()[-1]
        assert not [*tmp_path.glob("calibration-judge-*"), *tmp_path.glob("into")]
        failing[0] = False
        before = server.count("coherence")
        assert main(argv) == 0
        assert server.count("coherence") - before == 1
    distinct = len(set(answers))
    assert last.startswith(f"aidanbench {command}: 1 of {distinct} answers could not be judged")
    assert "503" in last
    assert last.endswith("the others are cached: run the same command again to ask only for these")


def test_into_after_a_refusal_names_the_missing_coherence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chains: list[QuestionResult]
) -> None:
    """An answer the judge refused in every try has no coherence, so its chain cannot be
    continued: ``--into`` stops with one line saying so (not novelty), before writing."""
    results = tmp_path / "small.json"
    answers = one_question_reference(results)
    into = tmp_path / "into"
    with OpenAIStub(Unreadable(affine_judge(chains), answers[1])) as stub:
        argv = ["rescore", str(results), "--judge-model", "j", "--judge-base-url", stub.base_url]
        argv += ["--judge-api-key-env", KEY, "--coherence-threshold", "47"]
        argv += ["--novelty-threshold", "0.15", "--judge-attempts", "1", "--into", str(into)]
        assert main(argv) == 2
    *progress, line = capsys.readouterr().err.strip().splitlines()
    assert all(shown.startswith("judged ") for shown in progress)
    assert "answer 2 to" in line and "has no coherence (the judge gave no readable score" in line
    assert "novelty" not in line
    assert not into.exists()
