"""A local OpenAI-compatible server for tests, benchmarks and notebooks.

``OpenAIStub`` answers chat completions and embeddings on 127.0.0.1 from a ``Brain``; the
default ``ScriptedBrain`` plays a model, a judge and an embedder whose answers follow a
per-question chain plan, so a benchmark run against it has known scores. ``Latency`` makes
calls take time (in parallel threads, as a remote API would) and fault hooks inject
HTTP errors, connection resets and hangs::

    with OpenAIStub(ScriptedBrain({"What is art?": 5})) as stub:
        chat = ChatOpenAI(model="m", base_url=stub.base_url, api_key="test-key", timeout=5)
"""

from .brain import (
    COHERENCE_MARKER,
    GENERATE_MARKER,
    INCOHERENT,
    KINDS,
    RESTATEMENT,
    SIMILARITY_MARKER,
    Brain,
    Ending,
    Kind,
    Reply,
    ScriptedBrain,
    classify,
    parse_coherence_prompt,
    parse_generate_prompt,
    parse_similarity_prompt,
    question_id,
    unit_vector,
)
from .faults import (
    Fault,
    FaultHook,
    RequestInfo,
    combine,
    connection_reset,
    error_body,
    fail_times,
    hang,
    http_error,
    rate_limited,
    when,
)
from .server import Latency, OpenAIStub, RecordedRequest

__all__ = [
    "COHERENCE_MARKER",
    "GENERATE_MARKER",
    "INCOHERENT",
    "KINDS",
    "RESTATEMENT",
    "SIMILARITY_MARKER",
    "Brain",
    "Ending",
    "Fault",
    "FaultHook",
    "Kind",
    "Latency",
    "OpenAIStub",
    "RecordedRequest",
    "Reply",
    "RequestInfo",
    "ScriptedBrain",
    "classify",
    "combine",
    "connection_reset",
    "error_body",
    "fail_times",
    "hang",
    "http_error",
    "parse_coherence_prompt",
    "parse_generate_prompt",
    "parse_similarity_prompt",
    "question_id",
    "rate_limited",
    "unit_vector",
    "when",
]
