"""``generate`` and ``generate_next``: ask the model under test for a new answer.

The prompt lists every earlier valid answer, exactly as the benchmark's text does.
``generate_next`` is the pipelined look-ahead: the prompt for answer i+1 depends only on
answers 1..i, not on answer i's scores, so it is asked while answer i is scored, as if
answer i were valid. When answer i fails, ``decide`` discards the look-ahead unseen, or its
request is withdrawn unsent if it has not gone yet (``services.lookahead``): either way, the
same prompt asked again gives the next answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from aidanbench.core.settings import Settings
from aidanbench.core.state import Candidate, ErrorInfo, QuestionState
from aidanbench.core.vocabulary import CONTENT_FILTER, LENGTH
from aidanbench.nodes.context import (
    NodeContext,
    finish_reason,
    message_stats,
    reasoning_text,
    scoring_turn,
    stopwatch,
)
from aidanbench.nodes.parsing import extract_answer
from aidanbench.nodes.prompts import render_generate
from aidanbench.services import ServicesFactory
from aidanbench.services.errors import is_recoverable
from aidanbench.services.lookahead import Withdrawn
from aidanbench.services.usage import reply_text, reply_usage, served_model


def previous_answers(state: QuestionState) -> list[str]:
    """Texts of the valid answers so far, in order."""
    return [a["answer"] for a in state.get("answers", []) if a["valid"]]


def empty_answer(ctx: NodeContext, reply: AIMessage, raw: str) -> ErrorInfo:
    """The error of a reply with nothing to score, naming why it is empty. An empty answer
    cannot be embedded (every embeddings endpoint refuses empty input), so it is a failed,
    retryable generation, never recorded as an answer or a score."""
    return ErrorInfo(
        kind="error",
        role="model",
        message=f"model at {ctx.settings.endpoint('model').host}: empty answer: "
        + empty_cause(reply, raw, ctx.settings.token_limit_field),
        status=None,
        retryable=True,
    )


def empty_cause(reply: AIMessage, raw: str, limit_field: str) -> str:
    """Why a reply has no answer text, and what to change when the token limit cut it."""
    finish = finish_reason(reply)
    spent = reply_usage(reply).reasoning_tokens
    reasoning = reasoning_text(reply)
    if finish == LENGTH:
        used = "" if spent is None else f", {spent:,} reasoning tokens"
        return (
            f"cut by the token limit before any answer text (finish_reason length{used}); "
            f"raise {limit_field} (--model-kwargs, or the model's --variant)"
        )
    if finish == CONTENT_FILTER:
        return "stopped by the provider's content filter (finish_reason content_filter)"
    refusal = reply.additional_kwargs.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return f"the model refused: {' '.join(refusal.split())[:160]}"
    if reasoning.strip():
        return (
            f"the reply's text is only in its reasoning ({len(reasoning):,} characters), "
            f"its content is empty (finish_reason {finish or 'not given'})"
        )
    what = "an empty <answer> tag" if raw.strip() else "no text"
    return f"{what} (finish_reason {finish or 'not given'})"


async def ask_model(ctx: NodeContext, question: str, previous: list[str], index: int) -> Candidate:
    """One generation as a candidate, or the candidate's error when the call failed."""
    try:
        services = ctx.services
        prompt = render_generate(question, previous, cot=ctx.settings.cot)
        with stopwatch() as elapsed:
            reply = await services.chat("model", prompt)
    except Exception as exc:
        if not is_recoverable(exc):
            raise
        return Candidate(index=index, error=ctx.failure("model", exc))
    raw = reply_text(reply)
    answer, tagged = extract_answer(raw)
    if not answer.strip():
        return Candidate(index=index, error=empty_answer(ctx, reply, raw))
    return Candidate(
        index=index,
        answer=answer,
        raw_reply=raw,
        used_answer_tag=tagged,
        call=message_stats(reply, elapsed(), ctx.price("model", served_model(reply)), prompt),
        finish_reason=finish_reason(reply),
        reasoning_tokens=reply_usage(reply).reasoning_tokens,
    )


async def generate(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Ask for the next answer of the chain."""
    ctx = NodeContext(runtime, services)
    previous = previous_answers(state)
    return {"candidate": await ask_model(ctx, state["question"], previous, len(previous) + 1)}


async def generate_next(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """Ask for the answer after the candidate, assuming it will be valid; none when the
    candidate fails before the request is sent. The scorers start first: one that needs no
    request (a cached vector) has its score after one event-loop turn, before the request."""
    ctx = NodeContext(runtime, services)
    candidate = state.get("candidate")
    if candidate is None or "answer" not in candidate:
        raise RuntimeError(f"generate_next needs a generated candidate, got {candidate!r}")
    previous = [*previous_answers(state), candidate["answer"]]
    try:
        with ctx.services.verdicts.unless_failed(scoring_turn(state)):
            await asyncio.sleep(0)
            ask = ask_model(ctx, state["question"], previous, candidate["index"] + 1)
            return {"lookahead": await ask}
    except Withdrawn:
        return {"lookahead": None}
