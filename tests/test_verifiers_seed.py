"""The seed's command line: ``vf-install`` and ``vf-eval aidanbench -n -r -T -a -b -k``.

Runs verifiers 0.1's own commands as subprocesses (the ``[verifiers-seed]`` extra;
``scripts/test.sh`` runs this file in ``.venv-vf-seed``) against the local stub server
for the model under test (``-b``, ``-k``), the judge and the embeddings (the seed's
``-a`` base-URL keys), with a guard in the subprocess that refuses any connection beyond
loopback.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "verifiers.envs.multiturn_env",
    reason="needs the [verifiers-seed] extra (verifiers 0.1): pip install -e '.[verifiers-seed]' "
    "(scripts/test.sh runs this test in .venv-vf-seed)",
)

from aidanbench.graph.questions import bundled_questions
from aidanbench.nodes.novelty import cosine_novelty
from aidanbench.nodes.prompts import render_generate
from aidanbench.testing import OpenAIStub, ScriptedBrain, http_error, unit_vector, when
from tests.conftest import REPO
from tests.judging import write_calibration
from tests.offline_subprocess import outside_guard

QUESTIONS = bundled_questions(3)
PLAN = {QUESTIONS[0]: 2, QUESTIONS[1]: 0, QUESTIONS[2]: 4}
"""The first three bundled questions (``-n 3`` of ``num_questions: 10``): planned scores."""

SEED_ARGS = {"use_llm_similarity": False, "num_questions": 10}
"""The seed README's ``-a`` JSON."""

BIN = Path(sys.executable).parent


def run(
    command: list[str], tmp_path: Path, api_key: str, cwd: Path | None = None, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``command`` from this environment's ``bin``, offline, with the test key set."""
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    env.update(
        OPENAI_API_KEY=api_key,
        AIDANBENCH_TEST_KEY=api_key,
        AIDANBENCH_OUTSIDE_LOG=str(tmp_path / "outside.log"),
        HOME=str(tmp_path / "home"),
        PATH=os.pathsep.join([str(BIN), env.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(outside_guard(tmp_path)), env.get("PYTHONPATH")])
        ),
        HF_HUB_OFFLINE="1",
    )
    env.update(extra_env)
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        env=env,
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def seed_line(stub: OpenAIStub, env_args: dict[str, Any] | None = None, n: int = 3) -> list[str]:
    """The seed README's line, with ``-b``/``-k`` and the judge's and embeddings' base
    URLs pointed at ``stub`` (their key variable stays the default, OPENAI_API_KEY)."""
    url = stub.base_url
    args = {
        **SEED_ARGS,
        "judge_api_base_url": url,
        "embedding_api_base_url": url,
        **(env_args or {}),
    }
    return [
        "vf-eval",
        "aidanbench",
        *("-m", "gpt-4.1-mini", "-n", str(n), "-r", "3", "-T", "0.7"),
        *("-a", json.dumps(args)),
        *("-b", url, "-k", "AIDANBENCH_TEST_KEY"),
    ]


def printed_rewards(stdout: str) -> dict[str, tuple[float, list[list[float]]]]:
    """``vf-eval``'s "Rewards:" section: each name's printed average and its rows
    (``r1: [...]`` per rollout, one value per question)."""
    section = stdout.split("Rewards:\n", 1)[1]
    found: dict[str, tuple[float, list[list[float]]]] = {}
    name = ""
    for line in section.splitlines():
        head = re.fullmatch(r"(\w+): avg - (\S+), std - \S+", line)
        row = re.fullmatch(r"r\d+: \[(.*)\]", line)
        if head:
            name = head[1]
            found[name] = (float(head[2]), [])
        elif row:
            found[name][1].append([float(v) for v in row[1].split(", ")])
    return found


def by_question(values: dict[str, float]) -> list[float]:
    """One row as ``vf-eval`` prints it: a value per question, in the questions' order."""
    return [values[q] for q in QUESTIONS]


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, abs=5e-4)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.e2e
def test_the_seed_line_prints_each_rollouts_reward_and_sends_the_published_prompts(
    tmp_path: Path, api_key: str
) -> None:
    brain = ScriptedBrain(PLAN)
    with OpenAIStub(brain) as stub:
        done = run(seed_line(stub), tmp_path, api_key)
        requests = stub.requests
    assert done.returncode == 0, done.stderr[-4000:]
    assert not (tmp_path / "outside.log").exists(), (tmp_path / "outside.log").read_text()

    rewards = printed_rewards(done.stdout)
    scores = by_question({q: float(planned) for q, planned in PLAN.items()})
    assert rewards["reward"] == (pytest.approx(sum(scores) / 3, abs=5e-4), [scores] * 3)
    assert rewards["aidanbench_score"][1] == [scores] * 3
    assert rewards["format_reward"][1] == [[1.0, 1.0, 1.0]] * 3
    coherence = by_question({q: 80.0 if planned else math.nan for q, planned in PLAN.items()})
    assert all(same(row, coherence) for row in rewards["avg_coherence"][1])
    assert math.isnan(rewards["avg_coherence"][0]), "a question without valid answers is NaN"
    assert "avg_llm_novelty" not in rewards, "LLM novelty is off: not reported as 0"
    assert set(rewards) == {
        "reward",
        "aidanbench_score",
        "format_reward",
        "avg_coherence",
        "avg_embedding_novelty",
        "sum_embedding_novelty",
    }

    policy = [r for r in requests if r.kind == "generate"]
    assert all(r.model == "gpt-4.1-mini" and r.body["temperature"] == 0.7 for r in policy)
    assert all(r.headers["authorization"] == f"Bearer {api_key}" for r in requests)
    assert {r.model for r in requests if r.kind == "coherence"} == {"o1-mini"}
    assert {r.model for r in requests if r.kind == "embed"} == {"text-embedding-3-large"}
    sent = sorted(json.dumps(r.body["messages"]) for r in policy)
    wanted = []
    for question, planned in PLAN.items():
        answers = [brain.answer_text(question, k) for k in range(1, planned + 1)]
        for k in range(planned + 1):
            prompt = render_generate(question, answers[:k])
            wanted += [json.dumps([{"role": "user", "content": prompt}])] * 3
    assert sent == sorted(wanted), "one fresh published prompt per answer, never a chat"


@pytest.mark.e2e
def test_novelty_sum_reward_and_llm_similarity(tmp_path: Path, api_key: str) -> None:
    """``reward_mode: novelty_sum`` rewards the summed embedding novelty of the valid
    answers; with the similarity judge on, reworded repeats end chains on LLM novelty and
    ``avg_llm_novelty`` is reported."""
    endings = {q: "coherence" for q, planned in PLAN.items() if planned == 0}
    brain = ScriptedBrain(PLAN, ending=endings, default_ending="llm_novelty")
    extra = {"reward_mode": "novelty_sum", "use_llm_similarity": True}
    with OpenAIStub(brain) as stub:
        done = run(seed_line(stub, extra), tmp_path, api_key)
    assert done.returncode == 0, done.stderr[-4000:]
    rewards = printed_rewards(done.stdout)
    sums = {}
    for question, planned in PLAN.items():
        vectors = [unit_vector(brain.answer_text(question, k)) for k in range(1, planned + 1)]
        sums[question] = sum(cosine_novelty(v, vectors[:i]) for i, v in enumerate(vectors))
    assert all(same(row, by_question(sums)) for row in rewards["reward"][1])
    assert all(same(row, by_question(sums)) for row in rewards["sum_embedding_novelty"][1])
    scores = by_question({q: float(planned) for q, planned in PLAN.items()})
    assert rewards["aidanbench_score"][1] == [scores] * 3
    llm = {  # the first answer has no earlier one (1.0); the others are rated 10
        q: (1.0 + 0.9 * (planned - 1)) / planned if planned else math.nan
        for q, planned in PLAN.items()
    }
    assert all(same(row, by_question(llm)) for row in rewards["avg_llm_novelty"][1])


@pytest.mark.e2e
def test_a_failed_judge_fails_the_evaluation_instead_of_scoring_zero(
    tmp_path: Path, api_key: str
) -> None:
    """verifiers 0.1 has no failed rollout: the judge's refusal (HTTP 400, not retried)
    ends ``vf-eval`` with exit 1 and one line naming the question and the cause (no
    traceback), and no reward is printed."""
    refused = QUESTIONS[2]
    faults = when("coherence", http_error(400, "judge refuses"), match=refused)
    with OpenAIStub(ScriptedBrain(PLAN), faults=faults) as stub:
        done = run(seed_line(stub), tmp_path, api_key)
    assert done.returncode == 1
    assert "Rewards:" not in done.stdout
    (line,) = ours(done.stderr)
    assert line.startswith(f"vf-eval aidanbench: error: {refused!r}: ")
    assert "judge refuses" in line


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env_args", "named"),
    [
        ({"max_turns": 20}, "max_turns"),
        ({"thresholds": {"coherence": 20}}, "coherence"),
        ({"num_questions": "10"}, "num_questions"),
        ({"questions": ["Why?"], "questions_path": "q.json"}, "not both"),
    ],
)
def test_a_bad_env_argument_is_refused_by_name(
    tmp_path: Path, api_key: str, env_args: dict[str, Any], named: str
) -> None:
    with OpenAIStub(ScriptedBrain(PLAN)) as stub:
        done = run(seed_line(stub, env_args), tmp_path, api_key)
        requests = stub.requests
    assert done.returncode != 0
    assert named in done.stderr
    assert not requests


@pytest.mark.e2e
def test_vf_install_from_a_clone_then_the_seed_line(tmp_path: Path, api_key: str) -> None:
    """``vf-install aidanbench -p ./environments`` from the repository root installs the
    thin ``environments/aidanbench`` (``uv pip install -e``), which installs this
    package from the clone with the [verifiers-seed] extra; ``vf-eval`` then runs.

    Offline: every dependency is already in this environment, so uv only builds the two
    local projects (``UV_NO_BUILD_ISOLATION``: with this environment's setuptools).
    """
    if not (BIN / "uv").exists():
        pytest.fail("vf-install runs uv: pip install uv (scripts/test.sh does)")
    run(["pip", "uninstall", "-q", "-y", "aidanbench-environment"], tmp_path, api_key)
    done = run(
        ["vf-install", "aidanbench", "-p", "./environments"],
        tmp_path,
        api_key,
        cwd=REPO,
        VIRTUAL_ENV=sys.prefix,
        UV_OFFLINE="1",
        UV_NO_BUILD_ISOLATION="1",
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert re.search(r"^ \+ aidanbench-environment==", done.stderr, re.M), done.stderr[-4000:]
    shown = run(["pip", "show", "aidanbench-environment"], tmp_path, api_key)
    assert "Requires: aidanbench" in shown.stdout
    assert f"Editable project location: {REPO / 'environments' / 'aidanbench'}" in shown.stdout

    with OpenAIStub(ScriptedBrain(PLAN)) as stub:
        done = run(seed_line(stub, n=1), tmp_path, api_key)
    assert done.returncode == 0, done.stderr[-4000:]
    assert printed_rewards(done.stdout)["reward"][1] == [[float(PLAN[QUESTIONS[0]])]] * 3


SERVED = {"gpt-4.1-mini": None, "text-embedding-3-large": None}
"""What the local server serves, as OpenAI does today: ``o1-mini`` is not among them."""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("judge at -a", "the judge o1-mini is unknown at {host} "),
        ("judge at OPENAI_BASE_URL", "the judge o1-mini is unknown at {host} "),
        ("wrong key", "endpoint {host} refused the key in AIDANBENCH_TEST_KEY "),
        ("unknown model", "the model under test gpt-4.1-mni is unknown at {host} "),
    ],
)
def test_a_refusal_is_one_line_naming_the_servers_host_before_any_question(
    tmp_path: Path, api_key: str, case: str, said: str
) -> None:
    """The seed's line checks every role first, as ``aidanbench run`` does: its default
    judge, which the server no longer serves (reached by ``judge_api_base_url``, or by
    ``OPENAI_BASE_URL`` as the OpenAI SDK reads it), a wrong key, a mistyped model. Each
    is one line naming the server and what to change on this command line, exit 2, and
    no question is asked."""
    fixes = {
        "judge at -a": "choose a successor with -a judge_model",
        "judge at OPENAI_BASE_URL": "choose a successor with -a judge_model",
        "wrong key": "or name another variable with -k",
        "unknown model": "choose another with -m",
    }
    with OpenAIStub(ScriptedBrain(PLAN), catalogue=SERVED, api_key=api_key) as stub:
        host = stub.base_url.split("//")[1].split("/")[0]
        line = seed_line(stub, {"judge_model": "gpt-4.1-mini"} if "judge" not in case else {})
        extra: dict[str, str] = {}
        if case == "judge at OPENAI_BASE_URL":
            line = seed_line(stub, {"judge_api_base_url": None, "embedding_api_base_url": None})
            extra["OPENAI_BASE_URL"] = stub.base_url
        if case == "wrong key":
            extra["AIDANBENCH_TEST_KEY"] = "sk-wrong-0000"
        if case == "unknown model":
            line[line.index("gpt-4.1-mini")] = "gpt-4.1-mni"
        done = run(line, tmp_path, api_key, **extra)
        asked = [r for r in stub.requests if r.kind in ("generate", "coherence")]
    assert done.returncode == 2
    printed = ours(done.stderr)
    assert len(printed) == 1, done.stderr[-4000:]
    assert printed[0].startswith("vf-eval aidanbench: error: "), printed
    assert said.format(host=host) in printed[0] and fixes[case] in printed[0], printed
    assert not asked, "checked before any question"


def ours(stderr: str) -> list[str]:
    """What ``vf-eval`` printed on stderr besides verifiers' log records and progress bar."""
    logged = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d - verifiers\.|Running \d+ rollouts")
    return [line for line in stderr.splitlines() if line.strip() and not logged.match(line)]


@pytest.mark.e2e
def test_a_calibration_file_is_read_as_run_reads_it(tmp_path: Path, api_key: str) -> None:
    """``thresholds.coherence_score`` may name a judge calibration file: its threshold is
    taken (85.5: every answer, judged 80, fails), and an edited one, or one of another judge
    than ``judge_model``, is refused by name before any request, with the line ``run`` gives
    (``core.calibration``)."""
    sound = write_calibration(tmp_path / "sound.json", "o1-mini", 85.5)
    with OpenAIStub(ScriptedBrain(PLAN)) as stub:
        done = run(
            seed_line(stub, {"thresholds": {"coherence_score": str(sound)}}), tmp_path, api_key
        )
    assert done.returncode == 0, done.stderr[-4000:]
    assert printed_rewards(done.stdout)["aidanbench_score"][1] == [[0.0, 0.0, 0.0]] * 3
    edited = write_calibration(tmp_path / "edited.json", "o1-mini", 47.5)
    document = json.loads(edited.read_text("utf-8"))
    document["judge"]["threshold"] = -5
    edited.write_text(json.dumps(document), "utf-8")
    other = write_calibration(tmp_path / "other.json", "gpt-4.1-mini", 47.5)
    for path, said in (
        (edited, "judge.threshold must be a coherence threshold between 0 and 100"),
        (other, "calibrates the judge gpt-4.1-mini, not the judge o1-mini"),
    ):
        with OpenAIStub(ScriptedBrain(PLAN)) as stub:
            env_args = {"thresholds": {"coherence_score": str(path)}}
            done = run(seed_line(stub, env_args), tmp_path, api_key)
            requests = stub.requests
        assert done.returncode != 0
        assert "thresholds.coherence_score" in done.stderr and said in done.stderr
        assert not requests
