"""The verifiers environment's interface on ``aidanbench run``: flags, ``-a`` keys, metric names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.metadata import question_set_hash
from aidanbench.testing import OpenAIStub, ScriptedBrain

from .commands import stub_endpoints
from .conftest import REPO

KEY_VAR = "AIDANBENCH_TEST_KEY"
ENV_METRICS = (
    "reward",
    "format_reward",
    "avg_coherence",
    "avg_embedding_novelty",
    "sum_embedding_novelty",
    "avg_llm_novelty",
)
ALIASED = {
    "format_reward": "format_adherence",
    "avg_coherence": "mean_coherence",
    "avg_embedding_novelty": "mean_novelty",
    "sum_embedding_novelty": "novelty_sum",
    "avg_llm_novelty": "mean_llm_novelty",
}


@pytest.fixture
def env_stub() -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 2 + i for i, q in enumerate(bundled_questions(10))})
    with OpenAIStub(brain) as stub:
        yield stub


def env_json(stub: OpenAIStub, **keys: Any) -> str:
    """``-a`` with the judge and embeddings pointed at the stub, plus ``keys``."""
    return json.dumps(
        {
            "judge_api_base_url": stub.base_url,
            "embedding_api_base_url": stub.base_url,
            "judge_api_key_var": KEY_VAR,
            "embedding_api_key_var": KEY_VAR,
            **keys,
        }
    )


def model_args(stub: OpenAIStub, run_dir: Path) -> list[str]:
    return [
        "run",
        "-m",
        "m1",
        "-b",
        stub.base_url,
        "-k",
        KEY_VAR,
        "--run-dir",
        str(run_dir),
    ]


def lines_of(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]


@pytest.mark.e2e
def test_quickstart_command_ports_unchanged(
    env_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    """``vf-eval aidanbench -m … -n 3 -r 3 -T 0.7 -a '{…, "num_questions": 10}'``."""
    run_dir = tmp_path / "run"
    args = [
        *model_args(env_stub, run_dir),
        *("-n", "3", "-r", "3", "-T", "0.7"),
        *("-a", env_json(env_stub, use_llm_similarity=False, num_questions=10)),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", *args],
        cwd=REPO,
        env={**os.environ, KEY_VAR: api_key},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads((run_dir / "metadata.json").read_text())
    spec = meta["spec"]
    assert spec["models"] == ["m1"] and spec["temperatures"] == [0.7] and spec["repeats"] == 3
    assert spec["reward_mode"] == "count"
    assert spec["settings"]["llm_novelty"] is False
    assert spec["settings"]["judge_base_url"] == env_stub.base_url
    assert spec["settings"]["embedding_api_key_env"] == KEY_VAR
    assert meta["questions"] == 3, "-n 3 of the 10 num_questions loads, as vf-eval runs"
    assert meta["questions_source"] == {"kind": "bundled", "limit": 3}
    assert meta["questions_sha256"] == question_set_hash(bundled_questions(3))
    assert meta["settings"]["thresholds"] == {
        "coherence": 15.0,
        "novelty": 0.15,
        "llm_novelty": None,
    }

    lines = lines_of(run_dir)
    assert len(lines) == 9, "3 questions x 3 rollouts"
    assert sorted(line["score"] for line in lines) == [2, 2, 2, 3, 3, 3, 4, 4, 4]
    for line in lines:
        assert line["reward"] == line["score"]
        for env_name, ours in ALIASED.items():
            assert line[env_name] == line[ours], env_name
        assert line["avg_llm_novelty"] is None

    report = subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", "report", str(run_dir), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    (run,) = json.loads(report.stdout)["runs"]
    assert run["rollout_means"]["reward"] == pytest.approx(3.0)
    assert run["rollout_means"]["avg_coherence"] == pytest.approx(80.0)
    assert run["rollout_means"]["avg_llm_novelty"] is None
    assert {q["reward"] for q in run["questions"]} == {2, 3, 4}


def test_env_keys_map_onto_our_settings(env_stub: OpenAIStub, api_key: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    keys = env_json(
        env_stub,
        questions=["Name a fruit.", "Name a tree."],
        reward_mode="novelty_sum",
        judge_model="judge-x",
        embedding_model="embed-y",
        thresholds={
            "coherence_score": 20,
            "embedding_dissimilarity_score": 0.2,
            "llm_dissimilarity_score": 0.3,
        },
    )
    assert main([*model_args(env_stub, run_dir), "-a", keys]) == 0
    meta = json.loads((run_dir / "metadata.json").read_text())
    settings = meta["spec"]["settings"]
    assert meta["spec"]["reward_mode"] == "novelty_sum"
    assert (settings["judge_model"], settings["embedding_model"]) == ("judge-x", "embed-y")
    assert (settings["coherence_threshold"], settings["novelty_threshold"]) == (20, 0.2)
    assert settings["llm_novelty_threshold"] == 0.3
    assert meta["questions_source"] == {"kind": "list", "limit": None}
    assert meta["questions_sha256"] == question_set_hash(["Name a fruit.", "Name a tree."])
    assert {r.model for r in env_stub.of_kind("coherence")} == {"judge-x"}
    for line in lines_of(run_dir):
        assert line["reward"] == line["novelty_sum"] == line["sum_embedding_novelty"]
        assert isinstance(line["reward"], float) and line["reward"] != line["score"]


def test_questions_path_and_limits(env_stub: OpenAIStub, api_key: str, tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps(bundled_questions(6)))
    run_dir = tmp_path / "run"
    keys = env_json(env_stub, questions_path=str(path), num_questions=4)
    assert main([*model_args(env_stub, run_dir), "-a", keys, "-n", "5"]) == 0
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["questions"] == 4, "the smaller of -n and num_questions"
    assert meta["questions_source"] == {"kind": "file", "path": str(path), "limit": 4}


def one_line_error(capsys: pytest.CaptureFixture[str], status: int) -> str:
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("extra", "keys", "message"),
    [
        ((), {"max_turns": 20}, "-a: unknown key(s) max_turns; the environment's keys are"),
        ((), {"thresholds": {"coherence": 15}}, "-a thresholds: unknown key(s) coherence"),
        (("-n", "3", "--questions", "5"), {}, "-n 3 conflicts with --questions 5"),
        (("--questions", "5"), {"num_questions": 10}, "-a num_questions=10 conflicts with"),
        (("--judge-model", "y"), {"judge_model": "x"}, '-a judge_model="x" conflicts with'),
        (
            ("--coherence-threshold", "10"),
            {"thresholds": {"coherence_score": 15}},
            "-a thresholds.coherence_score=15 conflicts with --coherence-threshold 10.0",
        ),
        (("--llm-novelty",), {"use_llm_similarity": False}, "conflicts with --llm-novelty"),
        (
            ("--reward-mode", "count"),
            {"reward_mode": "novelty_sum"},
            "conflicts with --reward-mode count",
        ),
        (("--questions-file", "x.json"), {"questions": ["q"]}, "both choose the questions"),
        ((), {"questions": ["q"], "questions_path": "x.json"}, "both choose the questions"),
        ((), {"use_llm_similarity": "yes"}, "-a use_llm_similarity must be true or false"),
        ((), {"reward_mode": "best"}, "-a reward_mode must be count or novelty_sum"),
        ((), {"num_questions": "10"}, "-a num_questions must be an integer"),
        ((), {"questions": "q1"}, "-a questions must be a JSON list of strings"),
        ((), {"questions": ["q1", " "]}, "-a questions: question 2 is empty"),
        (("-n", "0"), {}, "-n must be at least 1, got 0"),
    ],
)
def test_env_arg_errors_are_one_line(
    extra: tuple[str, ...],
    keys: dict[str, Any],
    message: str,
    env_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [*model_args(env_stub, tmp_path / "r"), *extra, "-a", env_json(env_stub, **keys)]
    err = one_line_error(capsys, main(args))
    assert message in err
    assert not (tmp_path / "r").exists()
    assert env_stub.count() == 0


def test_same_value_in_flag_and_env_is_no_conflict(
    env_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    keys = env_json(env_stub, num_questions=2, judge_model="o1-mini")
    args = [*model_args(env_stub, tmp_path / "r"), "--questions", "2", "--judge-model", "o1-mini"]
    assert main([*args, "-a", keys]) == 0
    assert json.loads((tmp_path / "r" / "metadata.json").read_text())["questions"] == 2


async def test_graph_output_carries_the_environment_names(
    env_stub: OpenAIStub, api_key: str
) -> None:
    from aidanbench.graph import Settings, build_question_graph

    common = stub_endpoints(env_stub.base_url)
    question = bundled_questions(1)[0]
    graph = build_question_graph().compile()
    for mode, reward_of in (("count", "score"), ("novelty_sum", "novelty_sum")):
        out = await graph.ainvoke(
            {"question": question}, context=Settings(reward_mode=mode, **common)
        )
        assert out["score"] == 2
        assert out["reward"] == out[reward_of]
        for env_name, ours in ALIASED.items():
            assert out[env_name] == out[ours], env_name


def test_the_verifiers_environments_take_every_default_from_settings() -> None:
    """Both verifiers environments declare their arguments once (``core.seed_args``) and
    restate no default: the judge and the thresholds are ``Settings``' own, so arguments
    left unset choose exactly the default settings."""
    from aidanbench.core.seed_args import SeedArgs

    assert SeedArgs().settings("m") == Settings(model="m", pipeline=False)
    restated = re.compile(r"o1-mini|\b15(\.0)?\b|\b0\.15\b")
    for folder in ("verifiers_env", "verifiers_seed"):
        for path in sorted((REPO / folder).glob("*.py")):
            found = [line for line in path.read_text().splitlines() if restated.search(line)]
            assert not found, f"{path.name} restates a default: {found}"
