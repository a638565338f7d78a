"""``ChatOpenAI`` keeping the reasoning text a reply carries beside its content.

``ChatOpenAI`` drops the text providers put beside the content (``REASONING_FIELDS``). A reply
with empty content and such text is a failure of its own (the model answered inside its
reasoning), which the generate node names; so this subclass keeps that text in
``additional_kwargs["reasoning"]``, as ``services.chat.read_reply`` does. Everything else is
``ChatOpenAI``'s, callbacks and tracing included.
"""

from __future__ import annotations

from typing import Any

import openai
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI

from aidanbench.services.chat import REASONING_FIELDS, reasoning_of


class ReasoningChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` with the reply's reasoning text in ``additional_kwargs``."""

    def _create_chat_result(
        self,
        response: dict[str, Any] | openai.BaseModel,
        generation_info: dict[str, Any] | None = None,
    ) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        if isinstance(response, dict):
            choices = response.get("choices") or []
        else:
            choices = getattr(response, "choices", None) or []
        for generation, choice in zip(result.generations, choices, strict=False):
            if isinstance(choice, dict):
                message = choice.get("message") or {}
            else:
                found = getattr(choice, "message", None)
                message = {name: getattr(found, name, None) for name in REASONING_FIELDS}
            text = reasoning_of(message) if isinstance(message, dict) else None
            if text is not None:
                generation.message.additional_kwargs["reasoning"] = text
        return result
