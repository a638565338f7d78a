"""The wire path: real langchain-openai clients against a local OpenAI-compatible server."""

from __future__ import annotations

import ssl

import pytest

from aidanbench.core.errors import EndpointRefused
from aidanbench.core.settings import Settings
from aidanbench.services import clients, default_services
from aidanbench.testing import OpenAIStub, ScriptedBrain, hang, when
from aidanbench.testing.settings import stub_settings as settings_for

from .graphs import run_question

Q = "What is a good name for a cat?"


def stub_settings(stub: OpenAIStub, **overrides: object) -> Settings:
    """Every role pointed at the stub, with the test key variable."""
    return settings_for(stub.base_url, **overrides)


async def test_question_over_http(stub: OpenAIStub, api_key: str) -> None:
    stub.brain = ScriptedBrain({Q: 3})
    settings = stub_settings(stub, model_kwargs={"max_tokens": 300, "seed": 7})
    out = await run_question(default_services, Q, settings)
    assert out["score"] == 3 and out["stop_reason"] == "novelty"

    generates = stub.of_kind("generate")
    assert len(generates) == 4, "the failing answer repeats the first: known to fail at once"
    body = generates[0].body
    assert body["model"] == "model-under-test"
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 300 and body["seed"] == 7
    assert body["messages"] == [{"role": "user", "content": body["messages"][0]["content"]}]
    assert generates[0].headers["authorization"] == f"Bearer {api_key}"

    judges = stub.of_kind("coherence")
    assert len(judges) == 4
    assert judges[0].body["model"] == "judge-model"
    assert "temperature" not in judges[0].body, "o1-mini accepts no temperature: send none"

    embeds = stub.of_kind("embed")
    assert embeds and all(r.body["model"] == "embedding-model" for r in embeds)
    sent = [r.body["input"] for r in embeds]
    assert all(isinstance(t, str) for batch in sent for t in batch), "texts, not token ids"

    first = out["answers"][0]
    assert first["calls"]["generate"]["served_model"] == "model-under-test"
    assert first["calls"]["generate"]["input_tokens"] > 0
    assert first["calls"]["judge"]["calls"] == 1


async def test_a_lookahead_waiting_for_a_slot_is_withdrawn_when_its_answer_fails(
    stub: OpenAIStub, api_key: str
) -> None:
    """One request in flight at a time: the judge's goes first and the look-ahead waits
    for the slot; the judge fails the third answer (incoherent), so its look-ahead is
    never sent. The valid answers' look-aheads are sent, as ever."""
    stub.brain = ScriptedBrain({Q: 2}, default_ending="coherence")
    out = await run_question(default_services, Q, stub_settings(stub, max_concurrency=1))
    assert (out["score"], out["stop_reason"]) == (2, "coherence")
    assert len(stub.of_kind("generate")) == 3 and len(stub.of_kind("coherence")) == 3
    assert out["speculative"] is None, "nothing was sent for nothing"


async def test_requests_have_a_timeout(stub: OpenAIStub, api_key: str) -> None:
    stub.brain = ScriptedBrain({Q: 3})
    stub.faults = when("coherence", hang(5.0))
    settings = stub_settings(stub, request_timeout=0.5, max_retries=0)
    out = await run_question(default_services, Q, settings)
    assert out["stop_reason"] == "error"
    assert out["error"]["role"] == "judge"
    assert out["error"]["message"] == f"judge at 127.0.0.1:{stub.port}: request timed out"
    assert out["answers"] == []


async def test_missing_key_names_the_variable(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIDANBENCH_TEST_KEY", raising=False)
    out = await run_question(default_services, Q, stub_settings(stub))
    assert out["stop_reason"] == "error"
    assert "AIDANBENCH_TEST_KEY" in out["error"]["message"]
    assert out["error"]["role"] == "model"
    assert stub.count() == 0


async def test_bad_model_name_is_not_retried(stub: OpenAIStub, api_key: str) -> None:
    """OpenAI's 404 for a model it does not serve stops the question at once (raised,
    never recorded as its error), naming the model and what to fix."""
    stub.catalogue = {"judge-model": None, "embedding-model": None}
    with pytest.raises(EndpointRefused) as refused:
        await run_question(default_services, Q, stub_settings(stub, max_retries=3))
    line = str(refused.value)
    assert "HTTP 404 model_not_found" in line and "model-under-test" in line
    assert "--model" in line and "does not exist" in line
    assert stub.count("generate") == 1


def test_two_event_loops_reach_the_same_endpoint(stub: OpenAIStub, api_key: str) -> None:
    """A pool made on one loop must not be reused by the next (notebooks, servers)."""
    import asyncio

    stub.brain = ScriptedBrain({Q: 2})
    settings = stub_settings(stub)
    first = asyncio.run(run_question(default_services, Q, settings))
    second = asyncio.run(run_question(default_services, Q, settings))
    assert first["score"] == second["score"] == 2


def test_every_client_verifies_with_the_one_certificate_store() -> None:
    """Loading the certificate store is most of what making a client costs, so the
    process loads it once (``clients.tls_context``) and every pool shares it: shared, it
    still verifies every certificate and host name."""
    context = clients.tls_context()
    assert context is clients.tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
