"""Answers as reasoning models give them: hidden reasoning, the token limit, filters.

``ReasoningBrain`` wraps another brain and, for the models given, plays a reasoning model. Each
reply spends hidden reasoning tokens by the request's effort (``reasoning_effort`` or
OpenRouter's ``reasoning.effort``), counted in ``completion_tokens`` and reported as
``reasoning_tokens`` unless ``report_reasoning=False`` (as some providers do). Reasoning counts
against ``max_completion_tokens`` (else ``max_tokens``) as OpenAI's does: a limit it uses up
gives ``finish_reason: "length"`` and empty content, one the answer overruns cuts the answer at
the limit (closing tag lost), also ``length``.

Rules keyed by the answer's text (never call order): ``cut`` answers are halved (``length``),
``filtered`` ones stopped (``content_filter``, empty content), ``reasoning_only`` ones come back
empty with the answer in the reasoning. ``style`` places visible reasoning: ``None`` nowhere
(OpenAI), ``"field"`` in ``message.reasoning`` (OpenRouter), ``"blocks"`` a thinking block
before the text block (Mistral's thinking models).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Literal

from .brain import CHARS_PER_TOKEN, Brain, Kind, Reply, default_tokens

Style = Literal["field", "blocks"]

EFFORT_TOKENS: Mapping[str, int] = MappingProxyType({"low": 8, "medium": 32, "high": 128})
"""Reasoning tokens per reply at each effort: small, so tests can set limits around them."""


def effort_of(body: Mapping[str, Any]) -> str | None:
    """The reasoning effort a request asks for (``reasoning_effort``, ``reasoning.effort``)."""
    reasoning = body.get("reasoning")
    effort = body.get("reasoning_effort")
    if effort is None and isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
    return effort if isinstance(effort, str) else None


def limit_of(body: Mapping[str, Any]) -> int | None:
    """The request's token limit: ``max_completion_tokens``, else ``max_tokens``."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class ReasoningBrain:
    """Another brain's answers, given as a reasoning model gives them (module docstring)."""

    def __init__(
        self,
        inner: Brain,
        *,
        models: Collection[str] | None = None,
        effort_tokens: Mapping[str, int] = EFFORT_TOKENS,
        default_effort: str = "medium",
        report_reasoning: bool = True,
        style: Style | None = None,
        cut: Collection[str] = (),
        filtered: Collection[str] = (),
        reasoning_only: Collection[str] = (),
    ) -> None:
        self.inner = inner
        self.models = None if models is None else frozenset(models)
        self.effort_tokens = MappingProxyType(dict(effort_tokens))
        self.default_effort = default_effort
        self.report_reasoning = report_reasoning
        self.style = style
        self.cut = tuple(cut)
        self.filtered = tuple(filtered)
        self.reasoning_only = tuple(reasoning_only)

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """The inner brain's reply, reasoned over, limited and filtered."""
        reply = self.inner.chat(kind, model, prompt, body)
        if self.models is not None and model not in self.models:
            return reply
        effort = effort_of(body) or self.default_effort
        thought = self.effort_tokens.get(effort, self.effort_tokens[self.default_effort])
        limit = limit_of(body)
        text, finish, reasoning = reply.text, "stop", f"Thinking ({effort}) before answering."
        if self._matches(self.filtered, reply.text):
            text, finish = "", "content_filter"
        elif limit is not None and thought >= limit:
            thought, text, finish = limit, "", "length"
        elif limit is not None and thought + default_tokens(text) > limit:
            text, finish = text[: (limit - thought) * CHARS_PER_TOKEN], "length"
        elif self._matches(self.cut, reply.text):
            text, finish = text[: len(text) // 2], "length"
        if self._matches(self.reasoning_only, reply.text):
            text, reasoning = "", reply.text
        shown_reasoning, blocks = self._shown(reasoning, text)
        return replace(
            reply,
            text=text,
            finish_reason=finish,
            completion_tokens=thought + (default_tokens(text) if text else 0),
            reasoning_tokens=thought if self.report_reasoning else None,
            reasoning=shown_reasoning,
            blocks=blocks,
        )

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """The inner brain's vectors."""
        return self.inner.embed(model, texts)

    @staticmethod
    def _matches(markers: Sequence[str], text: str) -> bool:
        return any(marker in text for marker in markers)

    def _shown(
        self, reasoning: str, text: str
    ) -> tuple[str | None, tuple[Mapping[str, Any], ...] | None]:
        """The reasoning field and content blocks of the reply, as ``style`` says."""
        if self.style == "field":
            return reasoning, None
        if self.style == "blocks":
            thinking = {"type": "thinking", "thinking": [{"type": "text", "text": reasoning}]}
            blocks: list[Mapping[str, Any]] = [thinking]
            if text:
                blocks.append({"type": "text", "text": text})
            return None, tuple(blocks)
        return None, None
