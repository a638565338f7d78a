"""The local OpenAI-compatible stub, driven by the real langchain-openai clients.

Everything here is a real HTTP round trip on 127.0.0.1: the point of the stub is that
request bodies, retries, timeouts and connection handling are the client's own code paths,
so these tests pin down that the stub answers the way the real API would.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import re
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import SecretStr

from aidanbench import reference
from aidanbench.testing import (
    GENERATE_MARKER,
    Kind,
    Latency,
    OpenAIStub,
    ReasoningBrain,
    Reply,
    ScriptedBrain,
    classify,
    connection_reset,
    fail_times,
    hang,
    parse_coherence_prompt,
    parse_generate_prompt,
    parse_similarity_prompt,
    question_id,
    rate_limited,
    unit_vector,
    when,
)

PROMPTS: dict[str, str] = json.loads(reference.read_text(reference.PROMPTS))
KEY = SecretStr("test-key")
QUESTION = "What could a lighthouse keeper do on a quiet night?"


def _fill(template: str, **values: str) -> str:
    """Single-pass placeholder filling, so inserted answers are never re-expanded."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def generate_prompt(question: str, previous: Sequence[str] = ()) -> str:
    """The reference generate prompt listing any number of previous answers."""
    if not previous:
        return _fill(PROMPTS["generate_first"], question=question)
    full = PROMPTS["generate_with_previous"]
    start, end = full.index("<previous_answer id='1'>"), full.rindex("</previous_answers>")
    items = "\n\n".join(
        f"<previous_answer id='{i}'>\n{answer}\n</previous_answer>"
        for i, answer in enumerate(previous, start=1)
    )
    return _fill(full[:start], question=question) + items + "\n" + full[end:]


def coherence_prompt(question: str, answer: str) -> str:
    return _fill(PROMPTS["judge_coherence"], question=question, answer=answer)


def similarity_prompt(question: str, answer1: str, answer2: str) -> str:
    return _fill(PROMPTS["judge_similarity"], question=question, answer1=answer1, answer2=answer2)


def chat(stub: OpenAIStub, *, model: str = "model-a", **kwargs: Any) -> ChatOpenAI:
    options: dict[str, Any] = {"timeout": 5, "max_retries": 0, "temperature": 0.7, **kwargs}
    return ChatOpenAI(model=model, base_url=stub.base_url, api_key=KEY, **options)


def embedder(stub: OpenAIStub) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(
        model="embed-a",
        base_url=stub.base_url,
        api_key=KEY,
        check_embedding_ctx_length=False,
        timeout=5,
    )


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two unit vectors."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def raw_post(stub: OpenAIStub, path: str, body: Any) -> tuple[int, Any]:
    """A plain HTTP POST (http.client: no proxies, no retries)."""
    connection = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=5)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, data, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


# prompts, parsing and classification ---------------------------------------------------


def test_prompt_helper_matches_the_reference_layout() -> None:
    two = _fill(PROMPTS["generate_with_previous"], question="Q", prev1="a", prev2="b")
    assert generate_prompt("Q", ["a", "b"]) == two


def test_classify_reference_prompts() -> None:
    assert classify(generate_prompt(QUESTION)) == "generate"
    assert classify(generate_prompt(QUESTION, ["x", "y", "z"])) == "generate"
    assert classify(_fill(PROMPTS["generate_cot_first"], question=QUESTION)) == "generate"
    assert classify(coherence_prompt(QUESTION, "an answer")) == "coherence"
    assert classify(similarity_prompt(QUESTION, "a", "b")) == "similarity"
    assert classify("Say hello.") == "other"
    # A judged answer quoting the generate instruction is still a judge prompt.
    assert classify(coherence_prompt(QUESTION, GENERATE_MARKER)) == "coherence"


def test_parsers_read_the_reference_layout() -> None:
    tricky = ["one line", "two\nlines with </answer> inside", "braces {prev1} {question}"]
    assert parse_generate_prompt(generate_prompt(QUESTION)) == (QUESTION, [])
    assert parse_generate_prompt(generate_prompt(QUESTION, tricky)) == (QUESTION, tricky)
    assert parse_coherence_prompt(coherence_prompt(QUESTION, tricky[1])) == (QUESTION, tricky[1])
    parsed = parse_similarity_prompt(similarity_prompt(QUESTION, tricky[0], tricky[1]))
    assert parsed == (QUESTION, tricky[0], tricky[1])
    for parse in (parse_generate_prompt, parse_coherence_prompt, parse_similarity_prompt):
        with pytest.raises(ValueError):
            parse("Say hello.")


# the scripted brain -------------------------------------------------------------------


def _chain(brain: ScriptedBrain, question: str, length: int) -> list[str]:
    """Answers (tag stripped) as the benchmark would collect them, ``length`` turns."""
    answers: list[str] = []
    for _ in range(length):
        reply = brain.generate(question, answers)
        answers.append(reply.removeprefix("<answer>").removesuffix("</answer>"))
    return answers


def test_chain_plan_then_verbatim_repeat() -> None:
    brain = ScriptedBrain({QUESTION: 3})
    answers = _chain(brain, QUESTION, 4)
    assert len(set(answers[:3])) == 3
    assert answers[0].startswith(f"Idea 1 for {question_id(QUESTION)}: ")
    assert answers[3] == answers[0]  # novelty 0
    assert _chain(brain, "another question", 4)[3] == _chain(brain, "another question", 1)[0]
    assert brain.generate(QUESTION, []) == brain.generate(QUESTION, [])  # pure


def test_coherence_and_llm_novelty_endings() -> None:
    brain = ScriptedBrain(
        {"A": 2, "B": 2}, ending={"A": "coherence", "B": "llm_novelty"}, default_length=0
    )
    a = _chain(brain, "A", 3)
    assert a[2] == "INCOHERENT gibberish 3"
    assert brain.judge_coherence("A", a[0]) == "<coherence_score>80</coherence_score>"
    assert brain.judge_coherence("A", a[2]) == "<coherence_score>5</coherence_score>"
    b = _chain(brain, "B", 3)
    assert b[2] not in b[:2]
    assert abs(_dot(unit_vector(b[0]), unit_vector(b[2]))) < 0.3
    assert brain.judge_similarity("B", b[0], b[2]) == "<similarity_score>100</similarity_score>"
    assert brain.judge_similarity("B", b[2], b[0]) == "<similarity_score>100</similarity_score>"
    assert brain.judge_similarity("B", b[1], b[2]) == "<similarity_score>10</similarity_score>"
    assert brain.judge_similarity("B", b[0], b[1]) == "<similarity_score>10</similarity_score>"
    assert brain.judge_similarity("B", b[1], b[1]) == "<similarity_score>100</similarity_score>"
    # Length 0 with a novelty ending has nothing to repeat: the first answer is gibberish.
    assert _chain(brain, "C", 1) == ["INCOHERENT gibberish 1"]


def test_answer_size_tags_and_judge_overrides() -> None:
    brain = ScriptedBrain(
        answer_size=400,
        no_tag_questions={"bare"},
        coherence_scores={"Idea 2": 15},
        judge_replies={"Idea 3": "I would rate this highly."},
    )
    padded = _chain(brain, QUESTION, 3)
    assert all(400 <= len(answer) <= 440 for answer in padded)
    assert brain.generate("bare", []).startswith("Idea 1 for ")
    assert brain.judge_coherence(QUESTION, padded[1]) == "<coherence_score>15</coherence_score>"
    assert brain.judge_coherence(QUESTION, padded[2]) == "I would rate this highly."
    assert brain.judge_similarity(QUESTION, padded[0], padded[2]) == "I would rate this highly."
    with pytest.raises(ValueError, match="unknown chain ending"):
        ScriptedBrain(default_ending="speed")  # type: ignore[arg-type]


def test_unit_vectors_are_deterministic_and_nearly_orthogonal() -> None:
    a, b = unit_vector("alpha"), unit_vector("beta")
    assert a == unit_vector("alpha") and len(a) == 256
    assert math.isclose(sum(x * x for x in a), 1.0)
    assert abs(_dot(a, b)) < 0.3


# HTTP round trips ---------------------------------------------------------------------


async def test_chat_replies_follow_the_script(stub: OpenAIStub) -> None:
    brain = ScriptedBrain()
    client = chat(stub)
    first = (await client.ainvoke(generate_prompt(QUESTION))).content
    assert first == brain.generate(QUESTION, [])
    prompts = [
        (generate_prompt(QUESTION, ["x", "y"]), brain.generate(QUESTION, ["x", "y"])),
        (coherence_prompt(QUESTION, "x"), "<coherence_score>80</coherence_score>"),
        (similarity_prompt(QUESTION, "x", "x"), "<similarity_score>100</similarity_score>"),
    ]
    for prompt, expected in prompts:
        message = await client.ainvoke(prompt)
        assert message.content == expected
        assert message.response_metadata["model_name"] == "model-a"
        assert message.response_metadata["finish_reason"] == "stop"
        assert message.usage_metadata is not None
        assert message.usage_metadata["output_tokens"] == len(expected) // 4 + 1

    records = stub.requests
    assert [r.kind for r in records] == ["generate", "generate", "coherence", "similarity"]
    assert stub.count("generate") == 2 and stub.count("embed") == 0
    for record, (prompt, _) in zip(records[1:], prompts, strict=True):
        assert record.path == "/v1/chat/completions" and record.status == 200
        assert record.model == "model-a" and record.prompt == prompt
        assert record.body["temperature"] == 0.7
        assert record.body["messages"][-1]["content"] == prompt
        assert record.headers["authorization"] == f"Bearer {KEY.get_secret_value()}"
        assert record.started <= record.ended


async def test_served_model_and_token_counts_come_from_the_brain() -> None:
    class Named(ScriptedBrain):
        def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
            return Reply("hi", served_model="served-x", prompt_tokens=7, completion_tokens=3)

    with OpenAIStub(Named()) as stub:
        message = await chat(stub).ainvoke("Say hello.")
        streamed = [chunk.content async for chunk in chat(stub).astream("Say hello.")]
    assert message.content == "hi" and "".join(map(str, streamed)) == "hi"
    assert message.response_metadata["model_name"] == "served-x"
    assert message.usage_metadata is not None
    assert message.usage_metadata["input_tokens"] == 7
    assert message.usage_metadata["total_tokens"] == 10


async def test_embeddings_are_deterministic_unit_vectors(stub: OpenAIStub) -> None:
    client = embedder(stub)
    vectors = await client.aembed_documents(["alpha", "beta", "alpha"])
    query = await client.aembed_query("alpha")
    assert vectors[0] == vectors[2] == query
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)
    assert abs(_dot(vectors[0], vectors[1])) < 0.3
    assert max(abs(x - y) for x, y in zip(vectors[0], unit_vector("alpha"), strict=True)) < 1e-6
    record = stub.of_kind("embed")[0]
    assert record.texts == ("alpha", "beta", "alpha") and record.model == "embed-a"
    assert record.body["input"] == ["alpha", "beta", "alpha"]


def test_embeddings_wire_format(stub: OpenAIStub) -> None:
    status, body = raw_post(stub, "/v1/embeddings", {"model": "e", "input": "alpha"})
    assert status == 200 and body["object"] == "list" and body["usage"]["total_tokens"] > 0
    assert body["data"][0]["embedding"] == unit_vector("alpha")
    assert body["data"][0]["index"] == 0
    status, body = raw_post(stub, "/v1/embeddings", {"model": "e", "input": "a", "dimensions": 8})
    assert status == 200 and len(body["data"][0]["embedding"]) == 8
    for bad in ([[1, 2, 3]], [1, 2, 3], [""], []):
        status, body = raw_post(stub, "/v1/embeddings", {"model": "e", "input": bad})
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert stub.count("embed") == 2  # rejected requests are recorded, not counted as embeds


def test_unknown_path_bad_json_and_model_list() -> None:
    with OpenAIStub(models=["listed-model"]) as stub:
        status, body = raw_post(stub, "/v1/nothing", {"model": "m"})
        assert status == 404 and "error" in body
        status, body = raw_post(stub, "/v1/chat/completions", b"{not json")
        assert status == 400 and "error" in body
        connection = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=5)
        connection.request("GET", "/v1/models")
        listed = json.loads(connection.getresponse().read())
        connection.close()
    assert [model["id"] for model in listed["data"]] == ["listed-model"]
    assert [r.status for r in stub.requests] == [404, 400, 200]


def raw_get(stub: OpenAIStub, path: str, key: str | None = None) -> tuple[int, Any]:
    """A plain HTTP GET, with a bearer key when given."""
    connection = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=5)
    try:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_catalogue_answers_as_openai_does_today() -> None:
    """The model list with each ``shutdown_date`` where one is set; for any other model
    OpenAI's 404 body, word for word; the list even of a model never asked for."""
    catalogue = {"gpt-4o-mini": "2027-01-14", "judge": None}
    with OpenAIStub(catalogue=catalogue) as stub:
        status, listed = raw_get(stub, "/v1/models")
        assert status == 200
        assert [(m["id"], m.get("shutdown_date")) for m in listed["data"]] == [
            ("gpt-4o-mini", "2027-01-14"),
            ("judge", None),
        ]
        assert "shutdown_date" not in listed["data"][1]
        message = {"role": "user", "content": "Say hello."}
        status, body = raw_post(
            stub, "/v1/chat/completions", {"model": "o1-mini", "messages": [message]}
        )
        assert (status, body) == (
            404,
            {
                "error": {
                    "message": "The model `o1-mini` does not exist or you do not have "
                    "access to it.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "model_not_found",
                }
            },
        )
        status, _ = raw_post(stub, "/v1/embeddings", {"model": "nope", "input": ["x"]})
        assert status == 404
        status, body = raw_post(
            stub, "/v1/chat/completions", {"model": "judge", "messages": [message]}
        )
        assert status == 200 and body["choices"][0]["message"]["content"] == "OK"


def test_a_server_without_a_model_list() -> None:
    with OpenAIStub(list_models=False) as stub:
        status, body = raw_get(stub, "/v1/models")
    assert status == 404 and body["error"]["message"] == "Invalid URL (GET /v1/models)"


def test_a_wrong_key_gets_openais_401_body() -> None:
    with OpenAIStub(api_key="sk-right-0000-0000") as stub:
        status, wrong = raw_get(stub, "/v1/models", key="sk-wrong-1234-5678-abcd")
        _, none = raw_get(stub, "/v1/models")
        assert raw_get(stub, "/v1/models", key="sk-right-0000-0000")[0] == 200
    assert status == 401
    assert wrong == {
        "error": {
            "message": "Incorrect API key provided: sk-wrong***********abcd. You can find your "
            "API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    assert none["error"]["message"].startswith("You didn't provide an API key.")
    assert none["error"]["code"] is None


async def test_latency_overlaps_and_can_change_while_running() -> None:
    with OpenAIStub(latency=Latency(generate=0.2)) as stub:
        client = chat(stub)
        began = time.monotonic()
        await asyncio.gather(*(client.ainvoke(generate_prompt(f"Q{i}")) for i in range(5)))
        elapsed = time.monotonic() - began
        assert elapsed >= 0.2
        assert stub.max_concurrency("generate") == 5, "in parallel, not one after another"
        stub.latency = Latency(generate=30)
        with pytest.raises(openai.APITimeoutError):
            await chat(stub, timeout=0.3).ainvoke(generate_prompt("slow now"))
        judged = await client.ainvoke(coherence_prompt("Q", "x"))  # other kinds not delayed
        assert judged.content == "<coherence_score>80</coherence_score>"


async def test_rate_limit_with_retry_after_then_success() -> None:
    with OpenAIStub(faults=when("generate", rate_limited(0.1), times=1)) as stub:
        message = await chat(stub, max_retries=2).ainvoke(generate_prompt(QUESTION))
    assert message.content == ScriptedBrain().generate(QUESTION, [])
    first, second = stub.requests
    assert (first.status, second.status) == (429, 200)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.response["error"]["code"] == "rate_limit_exceeded"
    assert second.started - first.ended >= 0.08  # the client waited for Retry-After
    assert second.headers.get("x-stainless-retry-count") == "1"


async def test_bad_request_is_not_retried_by_the_client() -> None:
    stub = OpenAIStub(faults=fail_times("generate", 5, 400))
    with stub, pytest.raises(openai.BadRequestError):
        await chat(stub, max_retries=2).ainvoke(generate_prompt(QUESTION))
    assert stub.count("generate") == 1


async def test_connection_reset_is_a_connection_error() -> None:
    with OpenAIStub(faults=when("generate", connection_reset(), times=1)) as stub:
        client = chat(stub)
        with pytest.raises(openai.APIConnectionError) as caught:
            await client.ainvoke(generate_prompt(QUESTION))
        assert not isinstance(caught.value, openai.APITimeoutError)
        assert (await client.ainvoke(generate_prompt(QUESTION))).content
    assert [(r.status, r.attempt) for r in stub.requests] == [(None, 1), (200, 2)]


async def test_attempts_are_counted_per_prompt_under_concurrency() -> None:
    with OpenAIStub(faults=fail_times("generate", 2, 503, match="flaky")) as stub:
        client = chat(stub)
        outcomes = []
        for _ in range(3):
            batch = [client.ainvoke(generate_prompt(q)) for q in ("flaky?", "steady?")]
            outcomes.append(await asyncio.gather(*batch, return_exceptions=True))
    flaky = [isinstance(pair[0], openai.InternalServerError) for pair in outcomes]
    steady = [isinstance(pair[1], openai.InternalServerError) for pair in outcomes]
    assert flaky == [True, True, False] and steady == [False, False, False]
    assert sorted(r.attempt for r in stub.requests if "flaky" in r.prompt) == [1, 2, 3]


async def test_hang_times_the_client_out_and_stop_cuts_it_short() -> None:
    stub = OpenAIStub(faults=when("generate", hang(30))).start()
    try:
        with pytest.raises(openai.APITimeoutError):
            await chat(stub, timeout=0.3).ainvoke(generate_prompt(QUESTION))
    finally:
        began = time.monotonic()
        stub.stop()
    assert time.monotonic() - began < 25, "stop does not wait out the 30 s hang"


def test_api_key_is_checked_when_set() -> None:
    with OpenAIStub(api_key="right-key") as stub:
        with pytest.raises(openai.AuthenticationError):
            chat(stub).invoke("Say hello.")
        good = ChatOpenAI(
            model="m", base_url=stub.base_url, api_key=SecretStr("right-key"), timeout=5
        )
        assert good.invoke("Say hello.").content == "OK"


def test_brain_failure_is_a_500() -> None:
    class Broken(ScriptedBrain):
        def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
            raise RuntimeError("brain bug")

    with OpenAIStub(Broken()) as stub, pytest.raises(openai.InternalServerError, match="bug"):
        chat(stub).invoke("Say hello.")


def test_stop_releases_the_port_and_restarts() -> None:
    stub = OpenAIStub()
    for round_number in range(5):
        stub.start()
        assert stub.running
        port = stub.port
        assert stub.base_url == f"http://127.0.0.1:{port}/v1"
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        kept.request("GET", "/v1/models")
        assert kept.getresponse().read()  # a keep-alive connection, left open
        stub.stop()
        assert not stub.running
        assert not [t for t in threading.enumerate() if t.name.startswith(f"openai-stub-{port}")]
        with pytest.raises(OSError):  # the open connection is not served any more
            kept.request("GET", "/v1/models")
            kept.getresponse()
        kept.close()
        with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", port))
        with socket.socket() as rebind:
            rebind.bind(("127.0.0.1", port))
        assert stub.count() == round_number + 1  # records survive a restart
    with pytest.raises(RuntimeError):
        _ = stub.base_url


def post_chat(stub: OpenAIStub, prompt: str, **fields: Any) -> dict[str, Any]:
    """One raw chat completion, as the wire carries it."""
    body = {"model": "r", "messages": [{"role": "user", "content": prompt}], **fields}
    conn = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=10)
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        reply: dict[str, Any] = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return reply


def test_the_reasoning_brain_answers_as_reasoning_models_do() -> None:
    """Reasoning by effort counted against the token limit (length: cut or empty), the
    content filter, text only in ``message.reasoning`` or in thinking blocks, and
    ``completion_tokens_details.reasoning_tokens`` (or no details at all)."""
    prompt = generate_prompt(QUESTION)
    first = f"Idea 1 for {question_id(QUESTION)}"
    scripted = ScriptedBrain({QUESTION: 3})
    with OpenAIStub(ReasoningBrain(scripted, style="field")) as stub:
        plain = post_chat(stub, prompt, reasoning_effort="high")
        choice, usage = plain["choices"][0], plain["usage"]
        assert choice["finish_reason"] == "stop" and first in choice["message"]["content"]
        assert choice["message"]["reasoning"] == "Thinking (high) before answering."
        assert usage["completion_tokens_details"] == {"reasoning_tokens": 128}
        text_tokens = len(choice["message"]["content"]) // 4 + 1
        assert usage["completion_tokens"] == 128 + text_tokens

        cut = post_chat(stub, prompt, reasoning={"effort": "low"}, max_completion_tokens=12)
        assert cut["choices"][0]["finish_reason"] == "length"
        assert cut["choices"][0]["message"]["content"] == choice["message"]["content"][:16]
        assert cut["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}

        empty = post_chat(stub, prompt, max_tokens=20)  # medium effort: 32 > 20
        assert empty["choices"][0]["finish_reason"] == "length"
        assert empty["choices"][0]["message"]["content"] == ""
        assert empty["usage"]["completion_tokens_details"] == {"reasoning_tokens": 20}

    brain = ReasoningBrain(
        scripted, style="blocks", filtered=[first], report_reasoning=False, models={"r"}
    )
    with OpenAIStub(brain) as stub:
        filtered = post_chat(stub, prompt)
        assert filtered["choices"][0]["finish_reason"] == "content_filter"
        assert filtered["choices"][0]["message"]["content"] == [
            {
                "type": "thinking",
                "thinking": [{"type": "text", "text": "Thinking (medium) before answering."}],
            }
        ]
        assert "completion_tokens_details" not in filtered["usage"]
        untouched = post_chat(stub, prompt, model="other")
        assert untouched["choices"][0]["message"]["content"].startswith("<answer>")

    with OpenAIStub(ReasoningBrain(scripted, style="field", reasoning_only=[first])) as stub:
        hidden = post_chat(stub, prompt)["choices"][0]
        assert hidden["message"]["content"] == "" and first in hidden["message"]["reasoning"]
        assert hidden["finish_reason"] == "stop"
