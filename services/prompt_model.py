"""A chat model asked one user prompt at a time, and only asynchronously: the model under
test when something outside the graph makes the request (a verifiers rollout). One prompt is
enough: the graph sends each answer's fresh prompt alone, as one user message.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class PromptModel(BaseChatModel):
    """A chat model whose every call answers one user prompt with ``answer``."""

    async def answer(self, prompt: str) -> AIMessage:
        """The reply to ``prompt``."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the policy is reached asynchronously only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = await self.answer(prompt_of(messages))
        return ChatResult(generations=[ChatGeneration(message=message)])


def prompt_of(messages: list[BaseMessage]) -> str:
    """The text of the one user message a call may hold."""
    if len(messages) != 1 or not isinstance(messages[0], HumanMessage):
        raise ValueError("the policy is asked one user prompt at a time")
    content = messages[0].content
    if not isinstance(content, str):
        raise ValueError("the policy's prompt must be text")
    return content
