"""What every node gets besides the state: settings, services and the stream writer.

Nodes are written as ``async def verb_noun(state, ctx) -> dict`` and adapted to
LangGraph's ``(state, runtime)`` signature by ``bind``; the adapter resolves settings
from ``runtime.context`` (LangGraph passes None when no context is given, so the schema's
defaults apply) and services from the factory the graph builder was given. Keeping
services out of ``runtime.context`` keeps the context a plain, serialisable settings form
that Studio can render.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from aidanbench.graph.settings import Settings
from aidanbench.graph.state import CallStats, ErrorInfo, QuestionState
from aidanbench.services import Services, ServicesFactory, key_values, role_host
from aidanbench.services.errors import describe


@dataclass
class NodeContext:
    """Settings, lazily resolved services and a custom-stream writer for one node call."""

    settings: Settings
    factory: ServicesFactory
    emit: Callable[[Any], None]

    @cached_property
    def services(self) -> Services:
        """Services for these settings (resolved on first use, inside the node's error
        handling, so a configuration error is recorded like any other)."""
        return self.factory(self.settings)

    def failure(self, role: str, exc: BaseException) -> ErrorInfo:
        """The recorded form of a failed call by ``role``, with the run's keys redacted."""
        return describe(role, role_host(self.settings, role), exc, key_values(self.settings))


NodeFn = Callable[[QuestionState, NodeContext], Awaitable[dict[str, Any]]]


def settings_of(runtime: Runtime[Settings] | None) -> Settings:
    """The run's settings, or the schema defaults when no context was passed."""
    context = None if runtime is None else runtime.context
    return context if isinstance(context, Settings) else Settings()


def bind(fn: NodeFn, factory: ServicesFactory) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Adapt ``fn(state, ctx)`` to a LangGraph node ``(state, runtime)``."""

    async def node(state: QuestionState, runtime: Runtime[Settings]) -> dict[str, Any]:
        ctx = NodeContext(settings_of(runtime), factory, runtime.stream_writer)
        return await fn(state, ctx)

    node.__name__ = fn.__name__
    node.__qualname__ = fn.__qualname__
    node.__doc__ = fn.__doc__
    return node


def no_calls() -> CallStats:
    """Cost of a role that made no request (cache hit or nothing to compare)."""
    return CallStats(served_model=None, latency_s=0.0, input_tokens=0, output_tokens=0, calls=0)


def add_calls(total: CallStats, more: CallStats) -> CallStats:
    """Two costs of the same role summed (re-asks, pairs)."""
    return CallStats(
        served_model=more["served_model"] or total["served_model"],
        latency_s=total["latency_s"] + more["latency_s"],
        input_tokens=total["input_tokens"] + more["input_tokens"],
        output_tokens=total["output_tokens"] + more["output_tokens"],
        calls=total["calls"] + more["calls"],
    )


def message_stats(message: AIMessage, latency_s: float) -> CallStats:
    """Cost of one chat call, from the usage and model id the provider reported."""
    usage: dict[str, Any] = dict(message.usage_metadata or {})
    served = message.response_metadata.get("model_name") or message.response_metadata.get("model")
    return CallStats(
        served_model=str(served) if served else None,
        latency_s=latency_s,
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        calls=1,
    )


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """Yields a function returning seconds elapsed since entry."""
    start = time.perf_counter()
    yield lambda: time.perf_counter() - start


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
