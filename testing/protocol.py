"""The OpenAI wire format the stub speaks: request validation and response shapes.

Only what the benchmark's clients send is accepted; anything else is a 400 with an
OpenAI-shaped error, as the real API would refuse it, so a client bug shows up in tests.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .brain import Reply, default_tokens
from .faults import error_body


class HTTPError(Exception):
    """Refuse the request with ``status`` and an OpenAI-shaped error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class EventStream:
    """A complete server-sent-events body (a streamed chat answer, sent in one piece)."""

    data: bytes


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object."""
    try:
        body = json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise HTTPError(400, "request body must be a JSON object")
    return body


def model_of(body: dict[str, Any]) -> str:
    """The requested model name (required, as by the real API)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise HTTPError(400, "you must provide a model parameter")
    return model


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def chat_prompt(body: dict[str, Any]) -> str:
    """The last user message's text (the benchmark sends one prompt per call), else all the
    messages' texts joined."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, "'messages' must be a non-empty array")
    if not all(isinstance(m, dict) and "role" in m for m in messages):
        raise HTTPError(400, "each message needs a 'role'")
    users = [m for m in messages if m["role"] == "user"]
    if users:
        return _text_of(users[-1].get("content"))
    return "\n\n".join(_text_of(m.get("content")) for m in messages)


def embedding_inputs(body: dict[str, Any]) -> tuple[str, ...]:
    """The texts to embed; empty strings are refused as by OpenAI, and token ids, which mean a
    client built without ``check_embedding_ctx_length=False`` (the benchmark sends strings)."""
    value = body.get("input")
    texts: Any = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise HTTPError(400, "'input' must be a string or a non-empty array of strings")
    if not all(isinstance(text, str) for text in texts):
        raise HTTPError(
            400,
            "'input' holds token ids; this stub takes strings only "
            "(use OpenAIEmbeddings(check_embedding_ctx_length=False))",
        )
    if any(text == "" for text in texts):
        raise HTTPError(400, "'input' cannot contain an empty string")
    return tuple(texts)


def _usage(
    prompt_tokens: int, completion_tokens: int, reply: Reply | None = None
) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reply is not None and reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    if reply is not None and reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    if reply is not None and reply.cost is not None:
        usage["cost"] = reply.cost
    return usage


def chat_completion(
    reply: Reply, model: str, prompt: str, response_id: str, *, stream: bool, usage_chunk: bool
) -> dict[str, Any] | EventStream:
    """A ``chat.completion`` object, or its SSE equivalent when the client streams."""
    served = reply.served_model or model
    completion = default_tokens(reply.text) + (reply.reasoning_tokens or 0)
    usage = _usage(
        default_tokens(prompt) if reply.prompt_tokens is None else reply.prompt_tokens,
        completion if reply.completion_tokens is None else reply.completion_tokens,
        reply,
    )
    head = {"id": response_id, "created": int(time.time()), "model": served}
    content: Any = reply.text if reply.blocks is None else [dict(b) for b in reply.blocks]
    if not stream:
        message = {"role": "assistant", "content": content, "refusal": reply.refusal}
        if reply.reasoning is not None:
            message["reasoning"] = reply.reasoning
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": reply.finish_reason,
        }
        return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
    chunk = {**head, "object": "chat.completion.chunk"}
    delta = {"role": "assistant", "content": reply.text}
    if reply.reasoning is not None:
        delta["reasoning"] = reply.reasoning
    events = [
        {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]},
    ]
    if usage_chunk:
        events.append({**chunk, "choices": [], "usage": usage})
    lines = [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]
    return EventStream("".join(lines).encode("utf-8"))


def embeddings_response(
    vectors: Sequence[Sequence[float]],
    model: str,
    texts: Sequence[str],
    *,
    encoding_format: Any = None,
    dimensions: Any = None,
) -> dict[str, Any]:
    """A ``list`` of ``embedding`` objects, as floats or base64 float32 (the openai client's
    default); ``dimensions`` shortens and renormalises each vector, like the v3 models."""
    if encoding_format not in (None, "float", "base64"):
        raise HTTPError(400, f"unknown encoding_format {encoding_format!r}")
    if len(vectors) != len(texts):
        raise ValueError(f"brain returned {len(vectors)} vectors for {len(texts)} texts")
    data = []
    for index, vector in enumerate(vectors):
        array = np.asarray(vector, dtype=np.float64)
        if dimensions is not None:
            if not isinstance(dimensions, int) or not 0 < dimensions <= array.size:
                raise HTTPError(400, f"'dimensions' must be between 1 and {array.size}")
            array = array[:dimensions] / np.linalg.norm(array[:dimensions])
        embedding: Any
        if encoding_format == "base64":
            embedding = base64.b64encode(array.astype("<f4").tobytes()).decode("ascii")
        else:
            embedding = array.tolist()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(default_tokens(text) for text in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def models_list(
    models: Mapping[str, str | None], page: int | None = None, after: str | None = None
) -> dict[str, Any]:
    """The ``GET /v1/models`` answer: each model, with its ``shutdown_date`` when set;
    with ``page``, that many after the model ``after``, saying whether more follow."""
    names = list(models)
    start = names.index(after) + 1 if after in names else 0
    shown = names[start:] if page is None else names[start : start + page]
    data = []
    for name in shown:
        shutdown = models[name]
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "aidanbench-stub",
        }
        if shutdown is not None:
            entry["shutdown_date"] = shutdown
        data.append(entry)
    if page is None:
        return {"object": "list", "data": data}
    more = start + len(shown) < len(names)
    last = shown[-1] if shown else None
    return {"object": "list", "data": data, "has_more": more, "last_id": last}


def model_not_found(model: str) -> dict[str, Any]:
    """OpenAI's 404 body for a model that does not exist or has been shut down."""
    message = f"The model `{model}` does not exist or you do not have access to it."
    return error_body(404, message, "model_not_found")


KEYS_PAGE = "https://platform.openai.com/account/api-keys"


def unauthorized(authorization: str | None) -> dict[str, Any]:
    """OpenAI's 401 body: the key it got, masked as OpenAI masks it, or none given."""
    key = (authorization or "").removeprefix("Bearer ").strip()
    if not key:
        message = (
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). "
            f"You can obtain an API key from {KEYS_PAGE}."
        )
        code = None
    else:
        masked = key[:8] + "*" * max(len(key) - 12, 0) + key[-4:] if len(key) > 12 else "***"
        message = f"Incorrect API key provided: {masked}. You can find your API key at {KEYS_PAGE}."
        code = "invalid_api_key"
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    }
