"""Chat completions straight through the OpenAI client, for runs that own their clients.

``ChatOpenAI`` costs about 1.1 ms of CPU per request more than the request itself
(``bench/chat_client.py``): a callback manager and run tree per call, its parameter and
LangSmith bookkeeping, the OpenAI client's typed parse of the reply, and a hop to a
worker thread to turn the reply into a message. A long run at high concurrency spends
its CPU on exactly that (README, Performance). ``OpenAIChat`` sends the same request
body (``model``, ``messages``, ``stream: false``, ``temperature`` when set, the extra
fields) through the same OpenAI client, so errors, headers and timeouts are the
client's own, reads the JSON itself and returns the ``AIMessage`` ``ChatOpenAI`` would:
its text, ``usage_metadata`` and ``response_metadata`` (``model_name``, the raw
``token_usage``).

What it gives up is LangChain's callbacks: nothing appears in a LangSmith trace or in
Studio's run tree. So the graph's own default factory (Studio, notebooks, a parent
agent) keeps ``ChatOpenAI``, and the command line, which traces nothing, uses this
(``OpenAIServices(chat=...)``). The usage ledger, which ``ChatOpenAI`` fills from a
callback, is written here directly, with the thread and node read from LangGraph's
config of the node making the call.
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
from aidanbench.services.pricing import PriceTable
from aidanbench.services.usage import (
    UsageLedger,
    call_site,
    reply_usage,
    served_model,
    usage_metadata,
)


@dataclass(frozen=True)
class ChatLedger:
    """Where one chat client's requests are recorded (``services.usage``), and the prices
    they are charged at (the served model's: ``PriceTable.served_price``)."""

    ledger: UsageLedger
    role: str
    model: str
    prices: PriceTable


def caller() -> dict[str, Any]:
    """The thread and LangGraph node making the current call (None outside a graph)."""
    try:
        return call_site(get_config().get("metadata"))
    except RuntimeError:  # not inside a runnable
        return call_site(None)


def is_blocks(content: Any) -> bool:
    """Whether ``content`` is a list of content blocks (text and reasoning parts, as some
    providers send), which ``ChatOpenAI`` passes on and ``nodes.context.reply_text``
    reads."""
    return isinstance(content, list) and all(isinstance(b, str | dict) for b in content)


def read_reply(body: bytes) -> AIMessage:
    """The message of a chat completion's JSON body; ``MalformedReply`` for anything
    that is not one (not JSON, an ``error`` object, no choices, no message)."""
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
        response_metadata=metadata,
        usage_metadata=usage_metadata(usage) if usage is not None else None,
    )


def chat_body(
    model: str,
    prompt: str,
    temperature: float | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body ``ChatOpenAI`` sends for one user message (``OpenAIChat`` sends
    it, and a batch line carries it: ``services.batch``)."""
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
    """One model behind an OpenAI-compatible endpoint, asked one user message at a time.

    ``client`` makes exactly one attempt per call (``max_retries=0``): ``services.retry``
    is the one retry layer, as for ``ChatOpenAI``.
    """

    client: openai.AsyncOpenAI
    model: str
    temperature: float | None = None
    extra_body: Mapping[str, Any] | None = None
    ledger: ChatLedger | None = None

    def body(self, prompt: str) -> dict[str, Any]:
        """The request body ``ChatOpenAI`` sends for one user message."""
        return chat_body(self.model, prompt, self.temperature, self.extra_body)

    async def reply(self, prompt: str) -> AIMessage:
        """The model's reply to ``prompt``; the OpenAI client's errors for an HTTP error,
        ``MalformedReply`` for a 200 that is not a completion."""
        where = caller() if self.ledger is not None else {}
        if self.ledger is not None:
            self.ledger.ledger.sent(self.ledger.role, self.ledger.model, where)
        response = await self.client.post(
            "/chat/completions", body=self.body(prompt), cast_to=httpx2.Response
        )
        message = read_reply(response.content)
        if self.ledger is not None:
            record = self.ledger
            served = served_model(message)
            price = record.prices.served_price(record.model, served)
            usage = reply_usage(message)
            record.ledger.replied(record.role, record.model, usage, price, where, served=served)
        return message
