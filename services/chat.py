"""Chat completions straight through the OpenAI client, for runs that own their clients.

``ChatOpenAI`` spends CPU per request beyond the request itself (callbacks, run tree,
bookkeeping, a typed parse, a hop to a worker thread), which is what a long run at high
concurrency spends its CPU on (``bench/chat_client.py``, docs/performance.md). ``OpenAIChat``
sends the same request body through the same OpenAI client, so errors, headers and timeouts
are the client's own, reads the JSON itself and returns the ``AIMessage`` ``ChatOpenAI`` would,
with the reasoning text some providers send (``services.langchain_chat`` keeps it too).

It gives up LangChain's callbacks: nothing appears in a LangSmith trace or Studio's run tree,
so the graph's default factory keeps ``ChatOpenAI`` and the command line, which traces nothing,
uses this. The usage ledger, which ``ChatOpenAI`` fills from a callback, is written here
directly, with the thread and node read from
LangGraph's config of the node making the call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
from langchain_core.messages import AIMessage
from langgraph.config import get_config

from aidanbench.core.errors import MalformedReply
from aidanbench.services.direct_post import DirectPost
from aidanbench.services.usage import (
    RoleLedger,
    call_site,
    output_bound,
    prompt_tokens,
    reply_usage,
    usage_metadata,
)


def caller() -> dict[str, Any]:
    """The thread and LangGraph node making the current call (None outside a graph)."""
    try:
        return call_site(get_config().get("metadata"))
    except RuntimeError:  # not inside a runnable
        return call_site(None)


def is_blocks(content: Any) -> bool:
    """Whether ``content`` is a list of content blocks (as some providers send), which
    ``ChatOpenAI`` passes on."""
    return isinstance(content, list) and all(isinstance(b, str | dict) for b in content)


REASONING_FIELDS = ("reasoning", "reasoning_content")
"""Message fields where providers put a reply's reasoning text (OpenRouter's ``reasoning``;
DeepSeek's and vLLM's ``reasoning_content``)."""


def reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The reasoning text a chat message carries beside its content, or None."""
    for name in REASONING_FIELDS:
        text = message.get(name)
        if isinstance(text, str) and text:
            return text
    return None


def message_extras(message: Mapping[str, Any]) -> dict[str, Any]:
    """The ``additional_kwargs`` of a reply: its ``refusal`` and any reasoning text."""
    extras: dict[str, Any] = {"refusal": message.get("refusal")}
    reasoning = reasoning_of(message)
    if reasoning is not None:
        extras["reasoning"] = reasoning
    return extras


def read_reply(body: bytes) -> AIMessage:
    """The message of a chat completion's JSON body; ``MalformedReply`` for anything else."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedReply(f"reply is not JSON: {body[:80]!r}") from exc
    if not isinstance(payload, dict):
        raise MalformedReply(f"reply is a {type(payload).__name__}, not an object")
    if payload.get("error") is not None:
        raise MalformedReply(f"error object in a 200 reply: {str(payload['error'])[:200]}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedReply("reply has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise MalformedReply("reply's choice has no message")
    content = message.get("content")
    if not (content is None or isinstance(content, str) or is_blocks(content)):
        raise MalformedReply(f"reply's content is a {type(content).__name__}, not text")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else None
    metadata: dict[str, Any] = {
        "token_usage": usage,
        "model_name": payload.get("model"),
        "id": payload.get("id"),
        "finish_reason": choices[0].get("finish_reason"),
        "model_provider": "openai",
    }
    return AIMessage(
        content=content or "",
        additional_kwargs=message_extras(message),
        response_metadata=metadata,
        usage_metadata=usage_metadata(usage) if usage is not None else None,
    )


def chat_body(
    model: str,
    prompt: str,
    temperature: float | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body ``ChatOpenAI`` sends for one user message (``OpenAIChat`` sends it, and
    a batch line carries it: ``services.batch``)."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "model": model,
        "stream": False,
    }
    if temperature is not None:
        body["temperature"] = temperature
    if extra_body:
        body.update(extra_body)
    return body


@dataclass(frozen=True)
class OpenAIChat:
    """One model behind an OpenAI-compatible endpoint, asked one user message at a time
    (one attempt per call: ``services.retry`` retries)."""

    client: openai.AsyncOpenAI
    model: str
    temperature: float | None = None
    extra_body: Mapping[str, Any] | None = None
    ledger: RoleLedger | None = None
    direct: DirectPost | None = None
    """Sends requests straight through the aiohttp pool; None: through the client."""

    def body(self, prompt: str) -> dict[str, Any]:
        """The request body ``ChatOpenAI`` sends for one user message."""
        return chat_body(self.model, prompt, self.temperature, self.extra_body)

    async def send(self, body: Mapping[str, Any]) -> AIMessage:
        """The reply to ``body``: its message, or the OpenAI client's errors."""
        if self.direct is not None:
            return read_reply(await self.direct.post("chat/completions", body))
        response = await self.client.post("/chat/completions", body=body, cast_to=httpx2.Response)
        return read_reply(response.content)

    async def reply(self, prompt: str) -> AIMessage:
        """The model's reply to ``prompt``; ``MalformedReply`` for a 200 that is not one."""
        body = self.body(prompt)
        record = self.ledger
        if record is None:
            return await self.send(body)
        where = caller()
        request = record.sent(where, prompt_tokens(prompt), output_bound(body))
        try:
            message = await self.send(body)
        except BaseException as exc:
            record.failed(request, exc)
            raise
        record.replied_chat(message, reply_usage(message), where, request, prompt)
        return message
