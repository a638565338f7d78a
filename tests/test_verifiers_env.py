"""AidanBench as a verifiers environment, run by verifiers' own ``vf-eval`` command.

The command runs as a subprocess of the installed ``vf-eval`` against the local stub
server (model under test, judge and embeddings), with every platform feature off
(``--no-push``, local runtime) and a guard in the subprocess that refuses, and writes
down, any connection beyond loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "verifiers.v1",
    reason="needs the [verifiers] extra: pip install -e '.[verifiers]' "
    "(scripts/test.sh runs this test in .venv-vf)",
)

from aidanbench.nodes.novelty import cosine_novelty
from aidanbench.nodes.prompts import render_generate
from aidanbench.testing import (
    OpenAIStub,
    ScriptedBrain,
    combine,
    http_error,
    unit_vector,
    when,
)
from tests.judging import write_calibration
from tests.offline_subprocess import outside_guard

PLAN = {
    "What is one use for a paperclip?": 3,
    "Name a colour a sunset can have.": 0,
    "Suggest a name for a lighthouse cat.": 5,
}
"""Each question's planned score: that many distinct answers, then a failing one."""

ROLLOUTS = 2


def run_vf_eval(
    stub: OpenAIStub, tmp_path: Path, api_key: str, *extra: str, rollouts: int = ROLLOUTS
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``vf-eval aidanbench`` on the plan's questions; returns the process and run dir."""
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(list(PLAN)))
    guard = outside_guard(tmp_path)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and not key.startswith("PRIME_")
    }
    env.update(
        AIDANBENCH_TEST_KEY=api_key,
        AIDANBENCH_OUTSIDE_LOG=str(tmp_path / "outside.log"),
        HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(guard), env.get("PYTHONPATH")])),
        HF_HUB_OFFLINE="1",
    )
    url = stub.base_url
    command = [
        str(Path(sys.executable).with_name("vf-eval")),
        "aidanbench",
        *("-m", "model-under-test", "-n", str(len(PLAN)), "-r", str(rollouts)),
        *("--client.base-url", url, "--client.api-key-var", "AIDANBENCH_TEST_KEY"),
        *("--env.taskset.questions-path", str(questions)),
        *("--env.taskset.judge-model", "judge-model"),
        *("--env.taskset.judge-api-base-url", url),
        *("--env.taskset.judge-api-key-var", "AIDANBENCH_TEST_KEY"),
        *("--env.taskset.embedding-model", "embedding-model"),
        *("--env.taskset.embedding-api-base-url", url),
        *("--env.taskset.embedding-api-key-var", "AIDANBENCH_TEST_KEY"),
        *("--no-push", "--no-rich", "-o", str(tmp_path / "outputs"), "--run.name", "test"),
        *extra,
    ]
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    return done, tmp_path / "outputs" / "test"


def episodes(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "traces.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def expected_prompts(brain: ScriptedBrain) -> dict[str, list[str]]:
    """Each question's generate prompts, in order: answer k lists answers 1..k-1."""
    prompts: dict[str, list[str]] = {}
    for question, planned in PLAN.items():
        answers = [brain.answer_text(question, k) for k in range(1, planned + 1)]
        prompts[question] = [render_generate(question, answers[:k]) for k in range(planned + 1)]
    return prompts


@pytest.mark.e2e
def test_vf_eval_rewards_are_the_planned_scores_and_prompts_arrive_byte_for_byte(
    tmp_path: Path, api_key: str
) -> None:
    brain = ScriptedBrain(PLAN)
    with OpenAIStub(brain) as stub:
        done, run_dir = run_vf_eval(stub, tmp_path, api_key, "--sampling.temperature", "0.7")
        requests = stub.requests
    assert done.returncode == 0, done.stderr[-4000:]
    assert not (tmp_path / "outside.log").exists(), (tmp_path / "outside.log").read_text()

    found = episodes(run_dir)
    assert len(found) == len(PLAN) * ROLLOUTS
    for episode in found:
        assert episode["ok"], episode.get("errors")
        (trace,) = episode["traces"]
        question = episode["task"]["data"]["question"]
        assert trace["rewards"] == {"aidanbench_score": {"score": PLAN[question], "weight": 1.0}}
        assert trace["metrics"]["aidanbench_score"] == PLAN[question]
        assert trace["metrics"]["format_reward"] == 1.0
        result = trace["info"]["aidanbench"]
        assert result["score"] == PLAN[question]
        assert len(result["answers"]) == PLAN[question] + 1
        assert result["stop_reason"] == ("coherence" if PLAN[question] == 0 else "novelty")
    asked = sorted(e["task"]["data"]["question"] for e in found)
    assert asked == sorted(list(PLAN) * ROLLOUTS)

    policy = [r for r in requests if r.kind == "generate"]
    assert all(r.model == "model-under-test" and r.status == 200 for r in policy)
    assert all(r.body["stream"] is True and r.body["temperature"] == 0.7 for r in policy)
    assert all("temperature" not in r.body for r in requests if r.kind == "coherence")
    sent = sorted(json.dumps(r.body["messages"]) for r in policy)
    wanted = sorted(
        json.dumps([{"role": "user", "content": prompt}])
        for prompts in expected_prompts(brain).values()
        for prompt in prompts
        for _ in range(ROLLOUTS)
    )
    assert sent == wanted


@pytest.mark.e2e
def test_failed_calls_end_the_episode_as_an_error_never_as_a_reward(
    tmp_path: Path, api_key: str
) -> None:
    """A judge that refuses (HTTP 400, not retried) stops its question; so does a policy
    call that fails. Both episodes are verifiers errors without any reward; the third
    question is unaffected."""
    judged_out, policy_out, fine = PLAN
    faults = combine(
        when("coherence", http_error(400), match=judged_out),
        when("generate", http_error(400), match=policy_out),
    )
    with OpenAIStub(ScriptedBrain(PLAN), faults=faults) as stub:
        done, run_dir = run_vf_eval(stub, tmp_path, api_key)
    assert done.returncode == 0, done.stderr[-4000:]
    assert not (tmp_path / "outside.log").exists()

    by_question: dict[str, list[dict[str, Any]]] = {}
    for episode in episodes(run_dir):
        by_question.setdefault(episode["task"]["data"]["question"], []).append(episode)
    for question, message in ((judged_out, "judge at 127.0.0.1"), (policy_out, "400")):
        for episode in by_question[question]:
            assert not episode["ok"]
            assert any(message in error["message"] for error in episode["errors"])
            for trace in episode["traces"]:
                assert not trace["ok"]
                assert not trace.get("rewards")
    for episode in by_question[fine]:
        assert episode["ok"], episode.get("errors")
        (trace,) = episode["traces"]
        assert trace["rewards"]["aidanbench_score"]["score"] == PLAN[fine]


@pytest.mark.e2e
def test_llm_similarity_and_novelty_sum_reward(tmp_path: Path, api_key: str) -> None:
    """With the similarity judge on, reworded repeats end each chain on ``llm_novelty``
    (embedding novelty alone would let them pass), and ``novelty_sum`` rewards the summed
    embedding novelty of the valid answers."""
    first_fails = {q: "coherence" for q, planned in PLAN.items() if planned == 0}
    brain = ScriptedBrain(PLAN, ending=first_fails, default_ending="llm_novelty")
    with OpenAIStub(brain) as stub:
        done, run_dir = run_vf_eval(
            stub,
            tmp_path,
            api_key,
            *("--env.taskset.use-llm-similarity", "true"),
            *("--env.taskset.reward-mode", "novelty_sum"),
            rollouts=1,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    for episode in episodes(run_dir):
        assert episode["ok"], episode.get("errors")
        (trace,) = episode["traces"]
        question = episode["task"]["data"]["question"]
        answers = [brain.answer_text(question, k) for k in range(1, PLAN[question] + 1)]
        vectors = [unit_vector(answer) for answer in answers]
        novelty_sum = sum(cosine_novelty(v, vectors[:i]) for i, v in enumerate(vectors))
        (reward,) = trace["rewards"].items()
        assert reward[0] == "sum_embedding_novelty"
        assert reward[1]["score"] == pytest.approx(novelty_sum, rel=1e-6)
        assert trace["metrics"]["aidanbench_score"] == PLAN[question]
        result = trace["info"]["aidanbench"]
        assert result["stop_reason"] == ("coherence" if PLAN[question] == 0 else "llm_novelty")
        if answers:  # the first has no earlier answer (1.0), the others are rated 10
            expected = (1.0 + 0.9 * (len(answers) - 1)) / len(answers)
            assert trace["metrics"]["avg_llm_novelty"] == pytest.approx(expected)


@pytest.mark.e2e
def test_a_calibration_file_is_read_as_run_reads_it(tmp_path: Path, api_key: str) -> None:
    """``--env.taskset.thresholds.coherence-score FILE``: a judge calibration file's threshold
    is taken (85.5: every answer, judged 80, fails); an edited file is refused by name before
    any request, with the line ``run`` gives (``core.calibration``)."""
    sound = write_calibration(tmp_path / "sound.json", "judge-model", 85.5)
    with OpenAIStub(ScriptedBrain(PLAN)) as stub:
        flag = ("--env.taskset.thresholds.coherence-score", str(sound))
        done, run_dir = run_vf_eval(stub, tmp_path, api_key, *flag, rollouts=1)
    assert done.returncode == 0, done.stderr[-4000:]
    for episode in episodes(run_dir):
        (trace,) = episode["traces"]
        assert trace["rewards"]["aidanbench_score"]["score"] == 0
    edited = tmp_path / "edited.json"
    document = json.loads(sound.read_text("utf-8"))
    document["judge"]["threshold"] = -5
    edited.write_text(json.dumps(document), "utf-8")
    (tmp_path / "edited").mkdir()
    with OpenAIStub(ScriptedBrain(PLAN)) as stub:
        flag = ("--env.taskset.thresholds.coherence-score", str(edited))
        done, _ = run_vf_eval(stub, tmp_path / "edited", api_key, *flag)
        requests = stub.requests
    assert done.returncode != 0
    said = " ".join(done.stderr.replace("│", " ").split())
    assert "thresholds.coherence_score:" in said
    assert "judge.threshold must be a coherence threshold between 0 and 100, got -5" in said
    assert not requests
