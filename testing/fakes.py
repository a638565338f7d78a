"""In-process fakes of the three roles, for tests and examples without any server.

Chat and embeddings answer with a function of the text (never of call order: parallel
branches reorder calls), wrapped as a ``ServicesFactory`` for ``build_question_graph``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from aidanbench.core.settings import Settings
from aidanbench.services import (
    ROLES,
    Services,
    ServicesFactory,
    embedding_namespace,
    shared_cache,
)
from aidanbench.services.cache import ScoreCache
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.registry import FIXED_CEILING
from aidanbench.testing.brain import Brain, classify


class FunctionChatModel(BaseChatModel):
    """A chat model whose reply is ``respond(prompt)``; optional delay per call."""

    respond: Callable[[str], str]
    delay: Callable[[str], float] | None = None
    name_served: str = "fake-model"
    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "function-chat"

    def _prompt(self, messages: list[BaseMessage]) -> str:
        return "\n".join(str(m.content) for m in messages)

    def _result(self, prompt: str) -> ChatResult:
        self.calls.append(prompt)
        text = self.respond(prompt)
        message = AIMessage(
            content=text,
            response_metadata={"model_name": self.name_served},
            usage_metadata={
                "input_tokens": len(prompt) // 4,
                "output_tokens": len(text) // 4,
                "total_tokens": len(prompt) // 4 + len(text) // 4,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(self._prompt(messages))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = self._prompt(messages)
        if self.delay is not None:
            await asyncio.sleep(self.delay(prompt))
        return self._result(prompt)


class FunctionEmbeddings(Embeddings):
    """Embeddings given by ``vector(text)``; optional delay per batch."""

    def __init__(self, vector: Callable[[str], Sequence[float]], delay: float = 0.0) -> None:
        self.vector = vector
        self.delay = delay
        self.batches: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [list(self.vector(t)) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.embed_documents(texts)


def fake_services(
    model: BaseChatModel,
    judge: BaseChatModel,
    embeddings: Embeddings,
    cache: ScoreCache | None = None,
) -> ServicesFactory:
    """A services factory returning these clients whatever the settings say. The cache is the
    settings' ``cache_path`` file, as in real runs, else this factory's own in-memory one."""
    own_cache = cache if cache is not None else ScoreCache()

    def factory(settings: Settings) -> Services:
        return Services(
            build={
                "model": lambda: model,
                "judge": lambda: judge,
                "embeddings": lambda: embeddings,
            },
            cache=shared_cache(settings.cache_path) if settings.cache_path else own_cache,
            limiters={
                role: EndpointLimiter(settings.max_concurrency or FIXED_CEILING) for role in ROLES
            },
            embedding_namespace=embedding_namespace(settings),
        )

    return factory


def brain_services(
    brain: Brain,
    *,
    delays: Mapping[str, float] | None = None,
    cache: ScoreCache | None = None,
    events: list[tuple[str, float, float]] | None = None,
) -> ServicesFactory:
    """In-process services answering from a ``Brain`` (the stub server's logic, no HTTP).
    ``delays`` gives seconds per request kind, so concurrency shows; ``events`` receives
    ``(kind, start, end)`` monotonic times of every call."""
    wait = dict(delays or {})

    class _TimedChat(FunctionChatModel):
        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kwargs: Any
        ) -> ChatResult:
            start = time.monotonic()
            result = await super()._agenerate(messages, *args, **kwargs)
            if events is not None:
                events.append((classify(self._prompt(messages)), start, time.monotonic()))
            return result

    def chat(model: str) -> FunctionChatModel:
        return _TimedChat(
            respond=lambda prompt: brain.chat(classify(prompt), model, prompt, {}).text,
            delay=lambda prompt: wait.get(classify(prompt), 0.0),
            name_served=model,
        )

    class _BrainEmbeddings(FunctionEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.batches.append(list(texts))
            return brain.embed("fake-embedding", texts)

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            start = time.monotonic()
            vectors = await super().aembed_documents(texts)
            if events is not None:
                events.append(("embed", start, time.monotonic()))
            return vectors

    return fake_services(
        chat("fake-model"),
        chat("fake-judge"),
        _BrainEmbeddings(lambda text: [], delay=wait.get("embed", 0.0)),
        cache,
    )
