"""A judge panel: several judges of coherence, each on its own endpoint and its own
calibrated threshold, the majority of their decisions deciding each answer.

Two stub judges score the published run's answers on two scales (``floor(0.5 · o1-mini +
40)`` and ``floor(0.3 · o1-mini + 60)``), each at its own server; each is calibrated
against o1-mini's recorded judgments, and the published run replayed through the run
engine with the two as a panel keeps every published total.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.demo import published_cells
from aidanbench.cli.main import main
from aidanbench.record.lines import read_lines
from aidanbench.record.results import QuestionResult
from aidanbench.record.usage import read_ledger
from aidanbench.runner.engine import execute, prepare
from aidanbench.runner.spec import RunSpec
from aidanbench.testing import OpenAIStub
from aidanbench.testing.judges import RecordedJudge, affine
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain
from tests.builders import REFERENCE_TOTALS
from tests.judging import Unreadable, one_question_reference

KEY = "AIDANBENCH_TEST_KEY"
SCALES = {"judge-a": affine(0.5, 40), "judge-b": affine(0.3, 60)}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, OpenAIStub]]:
    """One server per judge, each also playing the published run's models and embedder."""
    chains = published_chains()
    inner = ReplayBrain(chains)
    stubs = {name: OpenAIStub(RecordedJudge(chains, rule, inner)) for name, rule in SCALES.items()}
    for stub in stubs.values():
        stub.start()
    yield stubs
    for stub in stubs.values():
        stub.stop()


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-not-a-key")


def calibrated(
    name: str, stub: OpenAIStub, out: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    argv = ["calibrate", "--judge-model", name, "--judge-base-url", stub.base_url]
    assert main([*argv, "--judge-api-key-env", KEY, "--out", str(out), "--json"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


@pytest.mark.e2e
def test_a_calibrated_panel_keeps_the_published_totals(
    servers: dict[str, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        name: calibrated(name, stub, tmp_path / name, capsys) for name, stub in servers.items()
    }
    thresholds = {name: found["judge"]["threshold"] for name, found in files.items()}
    first, second = servers["judge-a"], servers["judge-b"]
    chains = published_chains()
    settings: dict[str, Any] = {
        "judge_model": "judge-a",
        "judge_base_url": first.base_url,
        "judge_api_key_env": KEY,
        "coherence_threshold": thresholds["judge-a"],
        "judge_panel": [
            {
                "model": "judge-b",
                "base_url": second.base_url,
                "api_key_env": KEY,
                "coherence_threshold": thresholds["judge-b"],
            }
        ],
        "embedding_model": "text-embedding-3-large",
    }
    for role in ("", "embedding_"):
        settings |= {f"{role}base_url": first.base_url, f"{role}api_key_env": KEY}
    run_dir = tmp_path / "run"
    spec = RunSpec(
        models=list(dict.fromkeys(c.model for c in chains)),
        temperatures=sorted({c.temperature for c in chains}),
        questions=list(dict.fromkeys(c.question for c in chains)),
        settings=settings,
        run_dir=run_dir,
    )
    asked_b = second.count("coherence")
    result = asyncio.run(execute(asyncio.run(prepare(spec, cells=published_cells(chains)))))
    totals = {row.model: row.score for row in result.summary}
    assert totals == REFERENCE_TOTALS
    answers = [a for line in read_lines(run_dir) for a in line.answers]
    assert second.count("coherence") - asked_b >= len(answers) - 3, "judge-b judged each"
    for answer in answers:
        judges = answer.judges
        assert judges is not None and [j["judge"] for j in judges] == ["judge-a", "judge-b"]
        assert [j["threshold"] for j in judges] == [thresholds["judge-a"], thresholds["judge-b"]]
        assert answer.valid == (2 * sum(j["passes"] for j in judges) > 2 and answer.valid)
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    for run in runs:
        panel = run["judge_panel"]
        assert panel["judges"] == ["judge-a", "judge-b"] and panel["disagreed"] == 0
        assert panel["answers"] == run["answers"]
    assert main(["report", str(run_dir)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "judge panel, an answer coherent when more than half its judges pass it" in text
    assert "they disagreed on 0 of" in text


GEMINI = "google/gemini-flash-1.5-8b"
THRESHOLDS = {"judge-a": "47", "judge-b": "64"}
"""Each scale's image of o1-mini's 15 (``floor(0.5 · 15 + 40)``, ``floor(0.3 · 15 + 60)``)."""


def panel_flags(servers: dict[str, OpenAIStub]) -> list[str]:
    """``--judge-model`` given once per judge, each with its endpoint and threshold."""
    flags = ["--judge-api-key-env", KEY]
    for name, stub in servers.items():
        flags += ["--judge-model", name, "--judge-base-url", stub.base_url]
        flags += ["--coherence-threshold", THRESHOLDS[name]]
    return flags


def test_run_takes_a_panel_from_the_command_line(
    servers: dict[str, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``aidanbench run`` with ``--judge-model`` twice: both judges are asked for every
    answer, each one's decision is in ``answers.jsonl``, the published scores are kept,
    and ``metadata.json`` names both judges and their thresholds."""
    chains = [c for c in published_chains() if c.model == GEMINI and len(c.answers) <= 3]
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([c.question for c in chains]), "utf-8")
    base = servers["judge-a"].base_url
    argv = ["run", "-m", GEMINI, "-T", "0.7", "--questions-file", str(questions)]
    for role in ("", "embedding-"):
        argv += [f"--{role}base-url", base, f"--{role}api-key-env", KEY]
    prices = tmp_path / "prices.json"
    price = {"input": 1.0, "cached_input": None, "output": 2.0}
    prices.write_text(json.dumps({"date": "2026-11-01", "models": dict.fromkeys(SCALES, price)}))
    run_dir = tmp_path / "run"
    argv += ["--prices", str(prices), "--run-dir", str(run_dir)]
    assert main([*argv, *panel_flags(servers)]) == 0
    capsys.readouterr()
    lines = read_lines(run_dir)
    assert {line.question: line.score for line in lines} == {
        c.question: published_score(c) for c in chains
    }
    for line in lines:
        for answer in line.answers:
            judges = answer.judges or []
            assert [(j["judge"], j["threshold"]) for j in judges] == [
                ("judge-a", 47.0),
                ("judge-b", 64.0),
            ]
    metadata = json.loads((run_dir / "metadata.json").read_text("utf-8"))
    assert "judge-b" in json.dumps(metadata["judging"])
    sent = dict.fromkeys(SCALES, 0.0)
    for line in read_ledger(run_dir / "usage.jsonl"):
        if line.role == "judge" and line.node != "preflight" and line.cost_usd is not None:
            sent[str(line.model)] += line.cost_usd
    assert main(["report", "--json", str(run_dir)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    dollars = row["judge_panel"]["dollars"]
    assert dollars == pytest.approx(list(sent.values()), rel=1e-9), "as the ledger has it"
    assert all(d > 0 for d in dollars)
    assert main(["report", str(run_dir)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"judge-a at > 47 (passed {row['judge_panel']['passed'][0]} of" in text
    assert f"${dollars[1]:.4f})" in text

    rescore = ["rescore", str(run_dir), "--novelty-threshold", "0.15", "--json"]
    into = tmp_path / "into"
    assert main([*rescore, *panel_flags(servers), "--into", str(into)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [j["model"] for j in payload["panel"]] == ["judge-a", "judge-b"]
    assert [j["coherence_threshold"] for j in payload["panel"]] == [47.0, 64.0]
    (row,) = payload["runs"]
    assert row["score"] == sum(line.score for line in lines), "the panel rescores as it ran"
    scoring = json.loads((into / "metadata.json").read_text("utf-8"))["scoring_settings"]
    continued = scoring[GEMINI]
    assert continued["coherence_threshold"] == 47.0, "the first judge's, not the default 15"
    assert [j["coherence_threshold"] for j in continued["judge_panel"]] == [64.0]


def published_score(chain: QuestionResult) -> int:
    """The published run's score of a chain: its answers before the first failing one."""
    passing = itertools.takewhile(
        lambda a: (a.coherence or 0) > 15 and (a.novelty or 0) > 0.15, chain.answers
    )
    return sum(1 for _ in passing)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--coherence-threshold", "47"], "a panel needs each judge's own threshold"),
        (
            ["--coherence-threshold", "47", "--coherence-threshold", "64"]
            + ["--judge-base-url", "http://127.0.0.1:9/v1"] * 3,
            "--judge-base-url is given 3 times for 2 judges",
        ),
    ],
)
def test_a_panel_without_a_value_per_judge_is_one_line(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["run", "-m", "m", "--judge-model", "a", "--judge-model", "b", *extra]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert says in line


def test_rescore_leaves_an_answer_refused_in_every_try_undecided(
    servers: dict[str, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refused answer is never a score: its chain ends there (``unscored``, a lower
    bound), the refusal is kept beside it, and the command counts the refused replies."""
    results = tmp_path / "results.json"
    answers = one_question_reference(results)
    stub = servers["judge-a"]
    inner = stub.brain
    stub.brain = Unreadable(inner, answers[1])
    try:
        argv = ["rescore", str(results), "--coherence-threshold", "47", "--json"]
        argv += ["--novelty-threshold", "0.15", "--judge-attempts", "2"]
        argv += ["--judge-model", "judge-a", "--judge-base-url", stub.base_url]
        argv += ["--judge-api-key-env", KEY, "--cache", str(tmp_path / "c.sqlite")]
        assert main(argv) == 0
    finally:
        stub.brain = inner
    payload = json.loads(capsys.readouterr().out)
    assert payload["judge"]["refused"] == 1
    assert payload["judge"]["unreadable"] == {"missing": 2}
    (run,) = payload["runs"]
    assert run["score"] == 1 and run["stop_reasons"] == {"unscored": 1}


def test_calibrate_takes_a_panel(
    servers: dict[str, OpenAIStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``calibrate`` with ``--judge-model`` twice calibrates each judge against o1-mini
    (a file each) and says how often the panel's majority agrees with o1-mini."""
    reference_file = tmp_path / "small.json"
    answers = one_question_reference(reference_file)
    argv = ["calibrate", "--reference", str(reference_file), "--out", str(tmp_path), "--json"]
    argv += ["--judge-api-key-env", KEY]
    for name, stub in servers.items():
        argv += ["--judge-model", name, "--judge-base-url", stub.base_url]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [d["judge"]["model"] for d in payload["judges"]] == list(SCALES)
    assert all(Path(d["calibration_file"]).exists() for d in payload["judges"])
    panel = payload["panel"]
    assert panel["judges"] == list(SCALES) and panel["answers"] == len(answers)
    assert panel["agreement"] == 1.0 and panel["disagreed"] == 0
