"""Per-endpoint limits are shared by every question of a run."""

from __future__ import annotations

import asyncio

import pytest

from aidanbench.graph.questions import bundled_questions
from aidanbench.services import default_services
from aidanbench.services import limits as limits_module
from aidanbench.services.limits import EndpointLimiter
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain

from .graphs import run_question
from .test_http import stub_settings


async def test_in_flight_cap_holds_across_questions(api_key: str) -> None:
    questions = bundled_questions(6)
    brain = ScriptedBrain({q: 2 for q in questions})
    latency = Latency(generate=0.03, coherence=0.03, embed=0.03)
    with OpenAIStub(brain, latency=latency) as stub:
        settings = stub_settings(stub, max_concurrency=2)
        outs = await asyncio.gather(
            *(run_question(default_services, q, settings) for q in questions)
        )
        assert all(out["score"] == 2 for out in outs)
        # model, judge and embeddings share one host here, so one limiter holds them all
        assert stub.max_concurrency() <= 2
        assert stub.max_concurrency() == 2, "the cap is used, not undershot"


async def test_requests_per_minute_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(limits_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(limits_module.asyncio, "sleep", fake_sleep)
    limiter = EndpointLimiter(max_in_flight=10, per_minute=3)
    starts = []
    for _ in range(7):
        async with limiter.slot():
            starts.append(clock[0])
    assert starts[:3] == [1000.0] * 3
    assert starts[3:6] == [1060.0] * 3
    assert starts[6] == 1120.0
    assert slept == [60.0, 60.0]


async def test_two_models_on_one_endpoint_share_its_limit(api_key: str) -> None:
    questions = [f"What is use number {i} of a brick?" for i in range(3)]
    brain = ScriptedBrain({q: 2 for q in questions})
    latency = Latency(generate=0.03, coherence=0.03, embed=0.03)
    with OpenAIStub(brain, latency=latency) as stub:
        runs = [
            run_question(default_services, q, stub_settings(stub, model=m, max_concurrency=2))
            for m in ("model-a", "model-b")
            for q in questions
        ]
        outs = await asyncio.gather(*runs)
        assert all(out["score"] == 2 for out in outs)
        assert {r.model for r in stub.of_kind("generate")} == {"model-a", "model-b"}
        assert stub.max_concurrency() <= 2, "one limit for the endpoint, whatever the model"
        assert stub.max_concurrency() == 2
