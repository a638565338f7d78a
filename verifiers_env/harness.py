"""The policy side of an episode: one chat request per answer, with nothing but its prompt.

AidanBench sends a fresh prompt for every answer, while verifiers' chat harnesses resume a turn on
the whole conversation, so this one answers each segment from its own messages alone. It runs
in-process, which the ``Harness`` contract allows as long as every model call goes through the
rollout's interception endpoint: verifiers then owns the policy call (model, endpoint, key,
sampling, retries) and records it on the trace.
"""

from __future__ import annotations

from typing import Any

import openai
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire


class AidanBenchHarnessConfig(vf.HarnessConfig):
    """No settings: the policy's model and sampling come from the run (``-m``, ``--sampling.*``)."""


class AidanBenchHarness(vf.Harness[AidanBenchHarnessConfig]):
    """Answer each segment with one streamed chat completion of its messages only."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        if prompt is None:
            raise vf.HarnessError("nothing to answer: the segment has no prompt")
        messages: list[Any] = []
        if system:
            messages.append({"role": "system", "content": system})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(message_to_wire(message) for message in prompt)
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret) as client:
            stream = await client.chat.completions.create(
                model=ctx.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for _ in stream:
                pass  # the interception records the reply on the trace
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def resume(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        messages: vf.Messages,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        """The next answer, from the environment's new prompt alone (no earlier turns)."""
        fresh = data.model_copy(update={"prompt": list(messages)})
        return await self.launch(ctx, trace, runtime, endpoint, secret, mcp_urls, fresh)
