"""The model under test as the question graph sees it: a chat model over a verifiers turn.

The ``generate`` node asks ``services.model`` for each answer; here that model is one open verifiers
``Interaction``, each call one turn of the policy agent, so the policy call is verifiers' and the
prompt reaches it unchanged.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf
from langchain_core.messages import AIMessage
from pydantic import ConfigDict

from aidanbench.services.prompt_model import PromptModel


class PolicyRunEnded(RuntimeError):
    """The policy's run ended without answering (an error, a limit or a ``@stop``). Not one of the
    graph's recoverable API errors, so it fails the episode, where verifiers records it: an error,
    never a score."""


class InteractionModel(PromptModel):
    """A chat model whose every call is one turn of ``interaction``. A prompted task speaks first,
    so the first call must ask exactly the task's prompt; each later prompt is the next user turn,
    answered from that message alone."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    interaction: Any
    """The policy agent's open ``vf.Interaction``."""
    opening_prompt: str
    """The task's prompt: the first answer's prompt."""
    started: bool = False

    @property
    def _llm_type(self) -> str:
        return "verifiers-interaction"

    async def answer(self, prompt: str) -> AIMessage:
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
        return AIMessage(content=(replies[-1].content or "") if replies else "")
