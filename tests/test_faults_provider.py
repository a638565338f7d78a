"""A provider's bad day: reordered or damaged embeddings, malformed 200 replies, slow
bodies, 429 storms and keys echoed in errors, through the real HTTP path.

Where a fault is transient the scores are exact; where it persists only the question
it touches stops with a recorded ``error`` (retried by rerunning), the others finish
with their planned scores, nothing bad reaches ``cache.sqlite``, and no key is written
or printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aidanbench.core.errors import EndpointRefused
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.results import read_aidanbench_file
from aidanbench.services import ServicesFactory
from aidanbench.testing import (
    Fault,
    FaultHook,
    OpenAIStub,
    RequestInfo,
    ScriptedBrain,
    bad_vector,
    combine,
    drip,
    echo_key,
    malformed,
    question_id,
    rate_limited,
    reordered_embeddings,
    unit_vector,
    when,
)
from aidanbench.testing.replay import ReplayBrain

from .conftest import REPO
from .graphs import run_question
from .test_http import stub_settings
from .test_published_replay import PUBLISHED

pytestmark = pytest.mark.usefixtures("quick_backoff")

QUESTIONS = bundled_questions(3)
PLAN = {q: 1 + i for i, q in enumerate(QUESTIONS)}
"""Planned scores: 1, 2, 3 valid answers, then a verbatim repeat (novelty 0)."""

VICTIM = QUESTIONS[1]
VICTIM_TEXT = f"Idea 2 for {question_id(VICTIM)}"
"""The second answer of one question: the text faults are aimed at."""


def once(kind: str, fault: Fault, match: str) -> FaultHook:
    """``fault`` for the first request of ``kind`` containing ``match``, whatever else it
    holds (a retried embedding may share its request with other texts, so counting
    attempts by request content would not bound it)."""
    lock = threading.Lock()
    fired: list[bool] = []

    def hook(info: RequestInfo) -> Fault | None:
        if info.kind != kind or not info.contains(match):
            return None
        with lock:
            if fired:
                return None
            fired.append(True)
        return fault

    return hook


@pytest.fixture
def planned(stub: OpenAIStub, api_key: str) -> OpenAIStub:
    stub.brain = ScriptedBrain(PLAN)
    return stub


async def run_all(
    services: ServicesFactory, settings: Settings, questions: list[str] = QUESTIONS
) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(run_question(services, q, settings) for q in questions)))


def assert_planned(outs: list[dict[str, Any]], except_for: str | None = None) -> None:
    for question, out in zip(QUESTIONS, outs, strict=True):
        if question == except_for:
            continue
        assert out["error"] is None, out["error"]
        assert (out["score"], out["stop_reason"]) == (PLAN[question], "novelty"), question


REPLAYED = "openai/gpt-4o-mini-2024-07-18"
"""A model of the published run whose chains are long enough to share embedding requests."""


async def test_embeddings_out_of_order_are_placed_by_index(
    services: ServicesFactory, api_key: str
) -> None:
    """Five callers' texts, asked in one event-loop step, share one embeddings request whose
    reply is reversed (each item keeping its ``index``): each caller gets its own vector."""
    texts = [f"answer number {i}" for i in range(5)]
    brain = ScriptedBrain({})
    with OpenAIStub(brain, faults=when("embed", reordered_embeddings())) as stub:
        embed = services(stub_settings(stub)).embed
        got = await asyncio.gather(*(embed([text]) for text in texts))
        assert [r.texts for r in stub.of_kind("embed")] == [tuple(texts)], "one request"
    for text, [vector] in zip(texts, got, strict=True):
        assert np.allclose(vector, unit_vector(text, brain.dim), atol=1e-6), text


async def test_published_chains_are_exact_under_reordered_embeddings(
    services: ServicesFactory, reference_run: Path, api_key: str
) -> None:
    """Four published chains replayed at once with every embeddings reply reversed: the
    published scores, exactly (however their texts happened to share requests)."""
    chains = [q for q in read_aidanbench_file(reference_run) if q.model == REPLAYED][:4]
    with OpenAIStub(ReplayBrain(chains), faults=when("embed", reordered_embeddings())) as stub:
        settings = stub_settings(stub, model=REPLAYED, max_concurrency=64)
        outs = await asyncio.gather(*(run_question(services, c.question, settings) for c in chains))
    assert [out["score"] for out in outs] == PUBLISHED[REPLAYED][:4]


@pytest.mark.parametrize("how", ["nan", "inf", "zero", "short", "missing", "null"])
async def test_a_bad_vector_is_retried(
    services: ServicesFactory, planned: OpenAIStub, how: str
) -> None:
    planned.faults = once("embed", bad_vector(how, VICTIM_TEXT), VICTIM_TEXT)  # type: ignore[arg-type]
    outs = await run_all(services, stub_settings(planned, max_retries=2))
    assert_planned(outs)


@pytest.mark.parametrize("how", ["nan", "inf", "zero", "short", "missing", "null"])
async def test_a_persistent_bad_vector_stops_only_its_question_and_is_never_cached(
    services: ServicesFactory, planned: OpenAIStub, how: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache.sqlite"
    settings = stub_settings(planned, max_retries=1, cache_path=str(cache))
    planned.faults = when("embed", bad_vector(how, VICTIM_TEXT))  # type: ignore[arg-type]
    outs = await run_all(services, settings)
    assert_planned(outs, except_for=VICTIM)
    victim = outs[QUESTIONS.index(VICTIM)]
    assert victim["stop_reason"] == "error" and victim["error"]["role"] == "embeddings"
    assert victim["error"]["retryable"] is True
    assert [a["index"] for a in victim["answers"]] == [1], "nothing scored from a bad vector"
    with sqlite3.connect(cache) as db:
        rows = db.execute("SELECT vector FROM embeddings").fetchall()
    sizes = {len(row[0]) for row in rows}
    assert len(sizes) == 1, "one dimension in the cache"
    for (blob,) in rows:
        vector = np.frombuffer(blob, dtype=np.float32)
        assert np.all(np.isfinite(vector)) and np.any(vector != 0)

    planned.faults = None  # the provider recovers: a rerun finishes the question
    again = await run_question(services, VICTIM, settings)
    assert (again["score"], again["error"]) == (PLAN[VICTIM], None)


CHAT_SHAPES = ["empty-choices", "truncated", "html", "error-200"]
EMBED_SHAPES = ["truncated", "html", "error-200", "no-data"]
CASES = [("generate", s) for s in CHAT_SHAPES] + [("coherence", s) for s in CHAT_SHAPES]
CASES += [("embed", s) for s in EMBED_SHAPES]


@pytest.mark.parametrize(("kind", "shape"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
async def test_a_malformed_reply_is_retried(
    services: ServicesFactory, planned: OpenAIStub, kind: str, shape: str
) -> None:
    match = VICTIM if kind == "generate" else VICTIM_TEXT
    planned.faults = once(kind, malformed(shape), match)  # type: ignore[arg-type]
    outs = await run_all(services, stub_settings(planned, max_retries=2))
    assert_planned(outs)


@pytest.mark.parametrize(("kind", "shape"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
async def test_a_persistent_malformed_reply_stops_only_its_question(
    services: ServicesFactory, planned: OpenAIStub, kind: str, shape: str
) -> None:
    match = VICTIM if kind == "generate" else VICTIM_TEXT
    planned.faults = when(kind, malformed(shape), match=match)  # type: ignore[arg-type]
    outs = await run_all(services, stub_settings(planned, max_retries=1))
    assert_planned(outs, except_for=VICTIM)
    victim = outs[QUESTIONS.index(VICTIM)]
    role = {"generate": "model", "coherence": "judge", "embed": "embeddings"}[kind]
    assert victim["stop_reason"] == "error"
    assert victim["error"]["role"] == role and victim["error"]["retryable"] is True
    assert "malformed reply" in victim["error"]["message"]


async def test_a_lone_surrogate_in_a_reply_is_repaired(
    services: ServicesFactory, planned: OpenAIStub, tmp_path: Path
) -> None:
    planned.faults = once("generate", malformed("surrogate"), VICTIM)
    settings = stub_settings(planned, cache_path=str(tmp_path / "cache.sqlite"))
    outs = await run_all(services, settings)
    assert_planned(outs)
    victim = outs[QUESTIONS.index(VICTIM)]
    assert victim["answers"][0]["answer"].endswith("\ufffd"), "repaired, as UTF-8 decoders do"
    assert victim["answers"][-1]["answer"] == victim["answers"][0]["answer"]


async def test_a_dripping_reply_is_bounded_by_the_request_timeout(
    services: ServicesFactory, planned: OpenAIStub
) -> None:
    planned.faults = when("coherence", drip(0.05), match=VICTIM_TEXT)
    outs = await run_all(services, stub_settings(planned, request_timeout=0.5, max_retries=1))
    assert_planned(outs, except_for=VICTIM)
    victim = outs[QUESTIONS.index(VICTIM)]
    assert victim["error"]["message"].endswith("request timed out"), "not the dripped body"


async def test_every_attempt_counts_against_the_request_rate(
    services: ServicesFactory, planned: OpenAIStub
) -> None:
    """Three 429s in a row for every generate request, at 40 requests a minute: each
    attempt takes a slot, so no 60-second window sees more than 40 requests."""
    planned.faults = when("generate", rate_limited(0.01), times=3)
    question = QUESTIONS[0]
    settings = stub_settings(planned, requests_per_minute=4, max_retries=3, pipeline=False)
    task = asyncio.ensure_future(run_question(services, question, settings))
    await asyncio.sleep(2.0)
    assert planned.count("generate") <= 4, "retries inside one rate slot"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_key_echoed_by_the_provider_is_redacted(
    services: ServicesFactory, planned: OpenAIStub, api_key: str
) -> None:
    """In a question's error (a 400 on one request) and in the line of a refused key."""
    planned.faults = when("coherence", echo_key(400), match=VICTIM_TEXT)
    outs = await run_all(services, stub_settings(planned))
    victim = outs[QUESTIONS.index(VICTIM)]
    assert victim["stop_reason"] == "error" and victim["error"]["status"] == 400
    assert "Invalid key: Bearer [redacted]" in victim["error"]["message"]
    assert api_key not in json.dumps(outs)

    planned.faults = when("coherence", echo_key(401))
    with pytest.raises(EndpointRefused) as refused:
        await run_question(services, QUESTIONS[0], stub_settings(planned))
    assert "Invalid key: Bearer [redacted]" in str(refused.value)
    assert api_key not in str(refused.value)


async def test_empty_answer_is_regenerated_not_sent_to_embeddings(
    services: ServicesFactory, stub: OpenAIStub, api_key: str
) -> None:
    """An empty answer is never embedded (every endpoint refuses it): the generation
    counts as failed and a rerun asks the model again."""
    question = QUESTIONS[0]

    class Empty(ScriptedBrain):
        def generate(self, q: str, previous: Any) -> str:
            if len(previous) == 1 and self.empty:
                return "<answer>  </answer>"
            return super().generate(q, previous)

    brain = Empty({question: 3})
    brain.empty = True  # type: ignore[attr-defined]
    stub.brain = brain
    out = await run_question(services, question, stub_settings(stub, pipeline=False))
    assert out["stop_reason"] == "error" and out["error"]["role"] == "model"
    assert "empty answer" in out["error"]["message"]
    assert [a["index"] for a in out["answers"]] == [1]
    assert all(t.strip() for r in stub.of_kind("embed") for t in r.texts)


# --- the real command, several questions at once --------------------------------------

CANARY = "sk-canary-reliab-5e1d-do-not-leak"


def cli_run(
    stub: OpenAIStub, run_dir: Path, model: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    url = stub.base_url
    args = ["run", "--model", model, "--run-dir", str(run_dir)]
    for prefix in ("", "judge-", "embedding-"):
        args += [f"--{prefix}base-url", url, f"--{prefix}api-key-env", "AIDANBENCH_TEST_KEY"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LANGSMITH")},
        "AIDANBENCH_TEST_KEY": CANARY,
    }
    return subprocess.run(
        [sys.executable, "-m", "aidanbench.cli.main", *args, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def question_lines(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "questions.jsonl").read_text("utf-8").splitlines()
    return {line["question"]: line for line in map(json.loads, lines)}


@pytest.mark.e2e
def test_run_command_under_reordered_embeddings_and_malformed_replies(
    tmp_path: Path, reference_run: Path
) -> None:
    """``aidanbench run`` (a subprocess, aiohttp transport) replays ten published
    questions at once with every embeddings reply reversed, one question's judge
    replies always an HTML page, and the provider echoing the key once: the published
    scores for the others, one recorded error each for the two hit, no key anywhere,
    exit 1; a rerun after the provider recovers gives every published score, exit 0."""
    chains = [q for q in read_aidanbench_file(reference_run) if q.model == REPLAYED]
    questions = [c.question for c in chains]
    victim, keyed = questions[1], questions[3]
    questions_file = tmp_path / "questions.json"
    questions_file.write_text(json.dumps(questions), "utf-8")
    run_dir = tmp_path / "run"
    faults = combine(
        when("coherence", malformed("html"), match=chains[1].answers[1].answer),
        when("generate", echo_key(400), match=keyed, times=1),
        when("embed", reordered_embeddings()),
    )
    extra = ["--questions-file", str(questions_file), "--max-retries", "1"]
    with OpenAIStub(ReplayBrain(chains), faults=faults) as stub:
        started = time.monotonic()
        first = cli_run(stub, run_dir, REPLAYED, *extra)
        assert time.monotonic() - started < 100, "the run exits"
        assert first.returncode == 1, first.stderr
        lines = question_lines(run_dir)
        for question, published in zip(questions, PUBLISHED[REPLAYED], strict=True):
            line = lines[question]
            if question in (victim, keyed):
                assert line["stop_reason"] == "error", question
            else:
                assert (line["score"], line["error"]) == (published, None), question
        assert "malformed reply" in lines[victim]["error"]["message"]
        assert "[redacted]" in lines[keyed]["error"]["message"]
        stub.faults = when("embed", reordered_embeddings())
        second = cli_run(stub, run_dir, REPLAYED, *extra)
    assert second.returncode == 0, second.stderr
    lines = question_lines(run_dir)
    assert [lines[q]["score"] for q in questions] == PUBLISHED[REPLAYED]
    for text in (first.stdout, first.stderr, second.stdout, second.stderr):
        assert CANARY not in text
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path.name


async def test_cached_vectors_belong_to_their_endpoint(api_key: str) -> None:
    """Two endpoints in one process (a long-lived server, the in-memory cache): the
    second endpoint's vectors are asked of it, never taken from the first's."""
    from aidanbench.services import default_services

    class Alike(ScriptedBrain):
        """Every text embeds to the same direction: the second answer has novelty 0."""

        def embed(self, model: str, texts: Any) -> list[list[float]]:
            return [[1.0] + [0.0] * 15 for _ in texts]

    question = QUESTIONS[0]
    with OpenAIStub(ScriptedBrain({question: 3})) as first:
        out = await run_question(default_services, question, stub_settings(first))
        assert out["score"] == 3
    with OpenAIStub(Alike({question: 3})) as second:
        out = await run_question(default_services, question, stub_settings(second))
        assert second.count("embed") > 0, "vectors asked of this endpoint"
    assert (out["score"], out["stop_reason"]) == (1, "novelty")


async def test_an_answer_refused_for_its_content_is_generated_again_on_rerun(
    services: ServicesFactory, stub: OpenAIStub, api_key: str
) -> None:
    """The embeddings endpoint refuses one answer's text (a 400, every time): the
    question stops with that error; the rerun does not send the same text again (it
    would fail forever) but asks the model again, and finishes with the new answer."""
    from langgraph.checkpoint.memory import InMemorySaver

    from aidanbench.testing import http_error

    question = QUESTIONS[0]

    class Retelling(ScriptedBrain):
        retell = False

        def answer_text(self, q: str, k: int, previous: Any = ()) -> str:
            text = super().answer_text(q, k, previous)
            return text.replace("Idea 2", "Idea 2 retold") if self.retell and k == 2 else text

    brain = Retelling({question: 3})
    stub.brain = brain
    refused = f"Idea 2 for {question_id(question)}"
    stub.faults = when("embed", http_error(400, "input refused"), match=refused)
    saver = InMemorySaver()
    settings = stub_settings(stub)
    out = await run_question(services, question, settings, checkpointer=saver)
    assert out["stop_reason"] == "error" and out["error"]["status"] == 400
    assert [a["index"] for a in out["answers"]] == [1]
    brain.retell = True  # the model, asked again, answers otherwise
    out = await run_question(services, question, settings, checkpointer=saver)
    assert (out["score"], out["stop_reason"], out["error"]) == (3, "novelty", None)
    assert out["answers"][1]["answer"].startswith("Idea 2 retold")
    assert out["speculative"]["calls"] >= 1, "the refused answer's cost is kept"


def test_the_cache_refuses_bad_vectors_and_ignores_poisoned_rows(tmp_path: Path) -> None:
    """A cache written by an older version may hold a NaN vector: it reads as absent
    (so it is embedded again); a bad vector is never stored."""
    from aidanbench.services.cache import ScoreCache, UnusableVector, digest

    path = tmp_path / "cache.sqlite"
    good = np.ones(4, dtype=np.float32)
    ScoreCache(path).put_vectors("ns", [("kept", good), ("other", good)])
    with sqlite3.connect(path) as db:
        poisoned = np.array([np.nan, 1, 1, 1], dtype=np.float32).tobytes()
        db.execute("INSERT INTO embeddings VALUES ('ns', ?, ?)", (digest("poisoned"), poisoned))
    cache = ScoreCache(path)
    found = cache.vectors("ns", ["kept", "poisoned"])
    assert found[0] is not None and found[1] is None
    for bad in (np.zeros(4), np.array([1.0, np.inf, 1, 1]), np.ones(3)):
        with pytest.raises(UnusableVector):
            cache.put_vectors("ns", [("new", bad)])
    assert cache.vectors("ns", ["new"]) == [None]
