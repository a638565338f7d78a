"""In-process fakes of the three roles, for tests and examples without any server.

``FunctionChatModel`` answers each prompt with a function of its text (never of call
order, since parallel branches reorder calls); ``FunctionEmbeddings`` does the same for
embeddings. ``fake_services`` wraps them as a ``ServicesFactory`` for
``build_question_graph``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from aidanbench.graph.settings import Settings
from aidanbench.services import ROLES, Services, ServicesFactory, shared_cache
from aidanbench.services.cache import ScoreCache
from aidanbench.services.limits import EndpointLimiter


class FunctionChatModel(BaseChatModel):
    """A chat model whose reply is ``respond(prompt)``; optional delay per call."""

    respond: Callable[[str], str]
    delay: Callable[[str], float] | None = None
    name_served: str = "fake-model"
    calls: list[str] = []

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
    """A services factory returning these clients whatever the settings say.

    The cache defaults to the one the settings name (``cache_path``), as in real runs.
    """

    def factory(settings: Settings) -> Services:
        return Services(
            build={"model": lambda: model, "judge": lambda: judge, "embeddings": lambda: embeddings},
            cache=cache if cache is not None else shared_cache(settings.cache_path),
            hosts={role: "fake" for role in ROLES},
            limiters={role: EndpointLimiter(settings.max_concurrency) for role in ROLES},
        )

    return factory
