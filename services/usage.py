"""What goes in the usage ledger's lines (``record.usage`` keeps and sums them): what a request
can cost at most, and what its reply cost (``usage_line``, the one place a reply is priced).

A reply without usage (as several OpenAI-compatible servers send) has *unknown* tokens and
dollars (``null``), never 0; its line also carries an upper estimate (``estimated_*``) for the
budget. A request's ``sent`` line bounds its cost (``bound_usd``: ``prompt_tokens`` as input,
``output_bound`` as output), which counts if it is never answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import LLMResult

from aidanbench.record.usage import TOKEN_FIELDS, UsageBook
from aidanbench.services.errors import status_of
from aidanbench.services.pricing import Price, PriceTable

MESSAGE_TOKENS = 8
"""Tokens a chat template adds around one message, added to a prompt's estimated tokens."""

OUTPUT_TOKENS_BOUND = 4096
"""Output tokens an unanswered request is counted at when it sets no ``max_tokens``: far above
any reply of the benchmark, below what a reasoning model may spend (set
``max_completion_tokens`` in ``--model-kwargs`` to bound it)."""


def text_tokens(text: str) -> int:
    """An upper estimate of the tokens of ``text``: its UTF-8 bytes, more than any byte-level
    BPE tokenizer makes; no tokenizer is downloaded (an offline run cannot)."""
    return len(text.encode("utf-8", "surrogatepass"))


def prompt_tokens(prompt: str) -> int:
    """An upper estimate of a one-message chat prompt's input tokens."""
    return text_tokens(prompt) + MESSAGE_TOKENS


def output_bound(body: Mapping[str, Any] | None) -> int:
    """Output tokens a request can be billed for: its own limit, else the stated default."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = (body or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return OUTPUT_TOKENS_BOUND


@dataclass(frozen=True)
class Usage:
    """The usage one reply reported; a count the provider did not send is None (unknown)."""

    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    provider_cost: float | None = None
    """Dollars the provider reported for the call (OpenRouter's ``usage.cost``)."""

    @property
    def reported(self) -> bool:
        """Whether the reply said how many tokens went in and out."""
        return self.input_tokens is not None and self.output_tokens is not None

    def dollars(self, price: Price | None) -> float | None:
        """The provider's cost when reported, else ``price`` applied, else unknown."""
        if self.provider_cost is not None:
            return self.provider_cost
        if price is None or self.input_tokens is None or self.output_tokens is None:
            return None
        return price.dollars(self.input_tokens, self.cached_input_tokens or 0, self.output_tokens)

    def estimated(self, prompt: str, reply: str) -> Usage:
        """This usage with each unreported count replaced by its upper estimate."""
        return replace(
            self,
            input_tokens=prompt_tokens(prompt) if self.input_tokens is None else self.input_tokens,
            output_tokens=text_tokens(reply) if self.output_tokens is None else self.output_tokens,
        )


def _int(value: Any) -> int | None:
    """A token count as sent, or None (absent, null or not a count: unknown)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _cost(raw: Any) -> float | None:
    cost = raw.get("cost") if isinstance(raw, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    return float(cost)


def raw_usage(raw: Any) -> Usage:
    """The usage of an OpenAI ``usage`` object or dict (None when the reply had none)."""
    if raw is not None and not isinstance(raw, dict):
        dump = getattr(raw, "model_dump", None)
        raw = dump() if callable(dump) else {}
    raw = raw or {}
    inputs = raw.get("prompt_tokens_details") or {}
    outputs = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens")),
        cached_input_tokens=_int(inputs.get("cached_tokens")),
        output_tokens=_int(raw.get("completion_tokens")),
        reasoning_tokens=_int(outputs.get("reasoning_tokens")),
        provider_cost=_cost(raw),
    )


def reply_usage(message: AIMessage) -> Usage:
    """The usage of a chat reply, from the provider's own ``usage`` object: LangChain's
    ``usage_metadata`` turns a missing count into 0, so it is read only without one."""
    raw = message.response_metadata.get("token_usage")
    if isinstance(raw, dict):
        return raw_usage(raw)
    usage: dict[str, Any] = dict(message.usage_metadata or {})
    if not usage:
        return Usage()
    inputs = usage.get("input_token_details") or {}
    outputs = usage.get("output_token_details") or {}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        cached_input_tokens=_int(inputs.get("cache_read")),
        output_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=_int(outputs.get("reasoning")),
    )


def reply_text(message: AIMessage) -> str:
    """The text of a chat reply (content blocks joined; reasoning blocks skipped)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def served_model(message: AIMessage) -> str | None:
    """The model the provider says served a chat reply (its ``model`` field), if named."""
    metadata = message.response_metadata
    served = metadata.get("model_name") or metadata.get("model")
    return str(served) if served else None


def usage_metadata(usage: Mapping[str, Any]) -> dict[str, Any]:
    """LangChain's ``usage_metadata`` of an OpenAI ``usage`` object, as langchain-openai maps
    it (``reply_usage`` reads the raw object, which keeps unknown counts unknown)."""
    read = raw_usage(dict(usage))
    input_tokens, output_tokens = read.input_tokens or 0, read.output_tokens or 0
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": _int(usage.get("total_tokens")) or input_tokens + output_tokens,
        "input_token_details": {"cache_read": read.cached_input_tokens or 0},
        "output_token_details": {"reasoning": read.reasoning_tokens or 0},
    }


PRICED = "aidanbench_usage"
"""The ``response_metadata`` key under which a chat client leaves a reply's ledger line, so the
node reading the reply takes its tokens and dollars from it instead of pricing it again."""


def usage_line(
    role: str,
    model: str,
    usage: Usage,
    price: Price | None,
    where: Mapping[str, Any],
    *,
    priced_as: str | None = None,
    served: str | None = None,
    batch: bool = False,
    request: str | None = None,
    prompt: str | None = None,
    reply: str = "",
) -> dict[str, Any]:
    """The ledger's ``usage`` line of one reply: the one place a reply is priced.

    ``price`` is the served model's (``PriceTable.served_price``), at batch prices for a
    ``batch`` call. ``prompt`` and ``reply``
    estimate the usage when the reply reported none; ``priced_as`` names the model asked for
    when it is not ``model`` (a variant ``NAME@LABEL`` is asked as ``NAME``)."""
    line: dict[str, Any] = {
        "event": "usage",
        "id": request,
        "role": role,
        "model": model,
        **({"priced_as": priced_as} if priced_as not in (None, model) else {}),
        **where,
        "served_model": served,
        **{name: getattr(usage, name) for name in TOKEN_FIELDS},
        "provider_cost": usage.provider_cost,
        "cost_usd": usage.dollars(price),
    }
    if batch:
        line["batch"] = True
    if not usage.reported and prompt is not None:
        estimate = usage.estimated(prompt, reply)
        line["estimated_input_tokens"] = estimate.input_tokens
        line["estimated_output_tokens"] = estimate.output_tokens
        line["estimated_cost_usd"] = estimate.dollars(price)
    return line


def bound(price: Price | None, input_tokens: int | None, output_tokens: int) -> float | None:
    """What a request can be billed at most (None without a price or an input bound)."""
    if price is None or input_tokens is None:
        return None
    return price.dollars(input_tokens, 0, output_tokens)


def call_site(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The thread and node a request was made for, from LangGraph's run metadata."""
    metadata = metadata or {}
    return {"thread": metadata.get("thread_id"), "node": metadata.get("langgraph_node")}


def message_text(messages: list[list[BaseMessage]]) -> str:
    """The text of a chat request's messages, for estimates of its tokens."""
    return "".join(
        m.content if isinstance(m.content, str) else json.dumps(m.content)
        for batch in messages
        for m in batch
    )


@dataclass(frozen=True)
class RoleLedger:
    """Where one role's client records each attempt, and the prices it is charged at."""

    ledger: UsageBook
    role: str
    model: str
    """The name the lines carry: the row's (a variant's ``NAME@LABEL``)."""
    prices: PriceTable
    priced_as: str | None = None
    """The name the model is asked and priced by, when not ``model`` (a variant's ``NAME``)."""

    @property
    def asked(self) -> str:
        """The model asked for, as the price table names it."""
        return self.priced_as or self.model

    def sent(self, where: Mapping[str, Any], input_tokens: int, output_tokens: int) -> str:
        """Record a request billable at most these tokens as sent, priced as the asked model
        (no reply has named what served yet); its id, for ``replied`` or ``failed``."""
        price = self.prices.price(self.asked)
        return self.ledger.sent(
            self.role,
            self.model,
            where,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            bound_usd=bound(price, input_tokens, output_tokens),
        )

    def replied(
        self,
        usage: Usage,
        where: Mapping[str, Any],
        request: str | None,
        prompt: str,
        reply: str = "",
        served: str | None = None,
    ) -> dict[str, Any]:
        """Record the reply to ``request``, priced as the model that ``served`` it."""
        line = usage_line(
            self.role,
            self.model,
            usage,
            self.prices.served_price(self.asked, served),
            where,
            priced_as=self.priced_as,
            served=served,
            request=request,
            prompt=prompt,
            reply=reply,
        )
        self.ledger.write(line)
        return line

    def replied_chat(
        self,
        message: AIMessage,
        usage: Usage,
        where: Mapping[str, Any],
        request: str | None,
        prompt: str,
    ) -> None:
        """Record the chat reply ``message``; the line is left on the message (``PRICED``)."""
        served = served_model(message)
        line = self.replied(usage, where, request, prompt, reply_text(message), served)
        message.response_metadata[PRICED] = line

    def failed(self, request: str, error: BaseException) -> None:
        """Record that request ``request`` failed with ``error``."""
        self.ledger.failed(self.role, self.model, request, status_of(error))


class LedgerCallback(AsyncCallbackHandler):
    """Writes a chat client's every attempt to the ledger: ``sent``, then its ``usage``
    (attached to the client itself, so each attempt of the retry layer is seen)."""

    run_inline = True

    def __init__(self, record: RoleLedger, request_body: Mapping[str, Any] | None = None) -> None:
        self.record = record
        self.output_bound = output_bound(request_body)
        self._where: dict[UUID, tuple[dict[str, Any], str, str]] = {}

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        where = call_site(metadata)
        prompt = message_text(messages)
        request = self.record.sent(where, prompt_tokens(prompt), self.output_bound)
        self._where[run_id] = (where, request, prompt)

    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        where, request, prompt = self._where.pop(run_id, ({}, None, ""))
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage):
                    usage = reply_usage(message)
                    if usage.provider_cost is None:
                        raw = (response.llm_output or {}).get("token_usage")
                        usage = replace(usage, provider_cost=_cost(raw))
                    self.record.replied_chat(message, usage, where, request, prompt)
                    return

    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        found = self._where.pop(run_id, None)
        if found is not None and found[1] is not None:
            self.record.failed(found[1], error)


def embedding_usage(raw: Any) -> Usage:
    """An embeddings reply's usage. An embedding has no output and no prompt cache to read, so
    once its input tokens are reported its output, reasoning and cached input tokens are known
    to be 0 (its usage object names only ``prompt_tokens``)."""
    usage = raw_usage(raw)
    if usage.input_tokens is None:
        return usage
    return replace(
        usage,
        output_tokens=0 if usage.output_tokens is None else usage.output_tokens,
        reasoning_tokens=0 if usage.reasoning_tokens is None else usage.reasoning_tokens,
        cached_input_tokens=0 if usage.cached_input_tokens is None else usage.cached_input_tokens,
    )
