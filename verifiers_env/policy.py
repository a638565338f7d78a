"""The model under test as the question graph sees it: a chat model over a verifiers turn.

The graph's ``generate`` node asks ``services.model`` for each answer with the
benchmark's prompt. Here that model is one open verifiers ``Interaction``: each call is
one turn of the policy agent, so the policy call itself (model, endpoint, key, sampling)
is verifiers', and the prompt reaches it unchanged.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict


class PolicyRunEnded(RuntimeError):
    """The policy's run ended without answering (an error, a limit or a ``@stop``).

    Not one of the graph's recoverable API errors, so it leaves the graph and fails the
    episode, where verifiers records it: an error, never a score.
    """


class InteractionModel(BaseChatModel):
    """A chat model whose every call is one turn of ``interaction``.

    The task's own prompt opens the exchange (a prompted task speaks first), so the
    first call must ask exactly that prompt; each later call sends its prompt as the
    next user turn, which the harness answers from that message alone.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    interaction: Any
    """The policy agent's open ``vf.Interaction``."""
    opening_prompt: str
    """The task's prompt: the first answer's prompt."""
    started: bool = False

    @property
    def _llm_type(self) -> str:
        return "verifiers-interaction"

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
        prompt = _prompt_of(messages)
        if not self.started:
            if prompt != self.opening_prompt:
                raise RuntimeError("the first answer's prompt differs from the task's prompt")
            self.started = True
            segment = await self.interaction.turn()
        else:
            segment = await self.interaction.turn(prompt)
        if segment.terminated:
            trace = self.interaction.trace
            error = trace.last_error
            why = f"{error.type}: {error.message}" if error else trace.stop_condition
            raise PolicyRunEnded(f"the policy's run ended without an answer ({why})")
        replies = [m for m in segment.messages if isinstance(m, vf.AssistantMessage)]
        text = (replies[-1].content or "") if replies else ""
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def _prompt_of(messages: list[BaseMessage]) -> str:
    if len(messages) != 1 or not isinstance(messages[0], HumanMessage):
        raise ValueError("the policy is asked one user prompt at a time")
    content = messages[0].content
    if not isinstance(content, str):
        raise ValueError("the policy's prompt must be text")
    return content
