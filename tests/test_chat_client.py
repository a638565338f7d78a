"""``OpenAIChat``, the command line's chat client, against ``ChatOpenAI``, the graph's.

The command line swapped ``ChatOpenAI`` for a direct call of the OpenAI client to save
CPU per request (``services.chat``; docs/performance.md). The swap is only safe if the
provider cannot tell the two apart and the run cannot either: the same request body,
and the same message, usage and cost read from the same reply. Both are checked here
over real HTTP, and the command line is pinned to the direct client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from aidanbench.cli.main import main
from aidanbench.core.errors import MalformedReply
from aidanbench.graph.questions import bundled_questions
from aidanbench.nodes.prompts import render_coherence, render_generate
from aidanbench.services import chat as chat_module
from aidanbench.services import clients
from aidanbench.services.chat import OpenAIChat, read_reply
from aidanbench.services.usage import reply_text, reply_usage
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, ScriptedBrain, when
from aidanbench.testing.settings import stub_flags, stub_settings

QUESTION = bundled_questions(1)[0]


def with_details(payload: dict[str, Any], info: RequestInfo) -> Any:
    """A reply whose usage has everything a cost is read from: cached input tokens,
    reasoning tokens and a provider-reported cost (as OpenRouter sends)."""
    if "choices" not in payload:
        return payload
    usage = {
        **payload["usage"],
        "prompt_tokens_details": {"cached_tokens": 7},
        "completion_tokens_details": {"reasoning_tokens": 5},
        "cost": 0.00123,
    }
    return {**payload, "model": "served-model-2026", "usage": usage}


async def both_replies(stub: OpenAIStub, role: str, prompt: str, **settings: Any) -> list[Any]:
    """The reply of each client kind to ``prompt``, on one pool."""
    chosen = stub_settings(stub.base_url, **settings)
    build = clients.model_under_test if role == "model" else clients.judge
    pool = httpx2.AsyncClient(timeout=10)
    try:
        replies = []
        for kind in ("langchain", "openai"):
            client = build(chosen, pool, kind)
            if isinstance(client, OpenAIChat):
                replies.append(await client.reply(prompt))
            else:
                replies.append(await client.ainvoke(prompt))
        return replies
    finally:
        await pool.aclose()


@pytest.mark.parametrize(
    ("role", "settings"),
    [
        ("model", {}),
        ("model", {"temperature": 0.0}),
        ("model", {"model_kwargs": {"top_p": 0.5, "reasoning": {"effort": "low"}}}),
        ("judge", {}),
        ("judge", {"judge_temperature": 0.3}),
    ],
)
async def test_both_clients_send_the_same_request(
    api_key: str, role: str, settings: dict[str, Any]
) -> None:
    prompt = render_generate(QUESTION, []) if role == "model" else render_coherence(QUESTION, "x")
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        await both_replies(stub, role, prompt, **settings)
        chats = [r for r in stub.requests if r.path.endswith("/chat/completions")]
    assert len(chats) == 2
    langchain, direct = (r.body for r in chats)
    assert json.dumps(direct, sort_keys=True) == json.dumps(langchain, sort_keys=True)
    assert all(r.headers.get("authorization") == f"Bearer {api_key}" for r in chats)


async def test_both_clients_read_the_same_reply(api_key: str) -> None:
    prompt = render_generate(QUESTION, [])
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        stub.faults = when("generate", Fault(rewrite=with_details))
        langchain, direct = await both_replies(stub, "model", prompt)
    assert direct.content == langchain.content and "<answer>" in direct.content
    assert direct.usage_metadata == langchain.usage_metadata
    assert reply_usage(direct) == reply_usage(langchain)
    assert reply_usage(direct).provider_cost == 0.00123
    assert reply_usage(direct).cached_input_tokens == 7
    assert reply_usage(direct).reasoning_tokens == 5
    for key in ("model_name", "finish_reason"):
        assert direct.response_metadata[key] == langchain.response_metadata[key], key
    assert direct.response_metadata["id"].startswith("chatcmpl-stub-")
    # ChatOpenAI's usage is the OpenAI client's typed dump, with None for what the
    # provider did not send; the direct client keeps what was sent.
    assert direct.response_metadata["token_usage"] == reported(
        langchain.response_metadata["token_usage"]
    )


def reported(value: Any) -> Any:
    """``value`` without the fields that are None."""
    if isinstance(value, dict):
        return {k: reported(v) for k, v in value.items() if v is not None}
    return value


def as_blocks(payload: dict[str, Any], info: RequestInfo) -> Any:
    """A reply whose content is a list of blocks, reasoning first (as Mistral's
    reasoning models answer)."""
    if "choices" not in payload:
        return payload
    choice = dict(payload["choices"][0])
    text = choice["message"]["content"]
    blocks = [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": text}]
    choice["message"] = {**choice["message"], "content": blocks}
    return {**payload, "choices": [choice]}


async def test_both_clients_pass_content_blocks_on(api_key: str) -> None:
    prompt = render_generate(QUESTION, [])
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        stub.faults = when("generate", Fault(rewrite=as_blocks))
        langchain, direct = await both_replies(stub, "model", prompt)
    assert direct.content == langchain.content and isinstance(direct.content, list)
    assert "<answer>" in reply_text(direct)


BAD_REPLIES = {
    "not JSON": b"<html>502</html>",
    "a list": b"[]",
    "an error object": b'{"error": {"message": "upstream", "code": 502}}',
    "no choices": b'{"choices": []}',
    "a choice without a message": b'{"choices": [{"index": 0}]}',
    "content that is not text": b'{"choices": [{"message": {"content": 12}}]}',
    "blocks that are not blocks": b'{"choices": [{"message": {"content": [1, 2]}}]}',
}


@pytest.mark.parametrize("body", BAD_REPLIES.values(), ids=BAD_REPLIES.keys())
def test_a_reply_that_is_not_a_completion_is_malformed(body: bytes) -> None:
    with pytest.raises(MalformedReply):
        read_reply(body)


def test_an_empty_content_is_an_empty_answer_as_with_chatopenai() -> None:
    message = read_reply(b'{"choices": [{"message": {"role": "assistant", "content": null}}]}')
    assert message.content == "" and message.usage_metadata is None


def test_the_command_line_chats_through_openai_chat(
    api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aidanbench run`` sends every chat request through ``OpenAIChat``, the client
    kept for costing less CPU per request than ``ChatOpenAI`` (docs/performance.md: the
    ``chatopenai`` variant of ``bench.lab``); a change of default fails here."""
    replied: list[str] = []
    real_reply = chat_module.OpenAIChat.reply

    async def recording_reply(self: OpenAIChat, prompt: str) -> Any:
        replied.append(self.model)
        return await real_reply(self, prompt)

    monkeypatch.setattr(chat_module.OpenAIChat, "reply", recording_reply)
    questions = bundled_questions(2)
    with OpenAIStub(ScriptedBrain({q: 2 for q in questions})) as stub:
        args = ["run", "--model", "m1", "--questions", "2", "--run-dir", str(tmp_path / "run")]
        args += stub_flags(stub.base_url)
        assert main(args) == 0
        chats = [
            r for r in stub.requests if r.path.endswith("/chat/completions") and r.kind != "other"
        ]
    assert chats and len(replied) == len(chats), "every question's request (not the preflight's)"
    assert "m1" in replied and len(set(replied)) == 2, "the model and the judge both"
