"""A local OpenAI-compatible server for tests, benchmarks and notebooks.

``OpenAIStub`` answers chat completions and embeddings on 127.0.0.1 from a ``Brain``; the
default ``ScriptedBrain`` plays a model, a judge and an embedder whose answers follow a
per-question chain plan, so a benchmark run against it has known scores; ``ReasoningBrain``
answers as a reasoning model does (hidden reasoning, the token limit, content filters,
text only in a reasoning field). ``Latency`` makes
calls take time (in parallel threads, as a remote API would) and fault hooks inject
HTTP errors, connection resets, hangs, malformed 200 replies, reordered or damaged
embeddings, bodies dripping in byte by byte and errors quoting the caller's key::

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
    Metered,
    MeteredBrain,
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
    BadVector,
    Fault,
    FaultHook,
    Malformed,
    RequestInfo,
    bad_vector,
    combine,
    connection_reset,
    drip,
    echo_key,
    error_body,
    fail_times,
    hang,
    http_error,
    malformed,
    rate_limited,
    reordered_embeddings,
    when,
)
from .reasoning import ReasoningBrain
from .server import Latency, OpenAIStub, RecordedRequest

__all__ = [
    "COHERENCE_MARKER",
    "GENERATE_MARKER",
    "INCOHERENT",
    "KINDS",
    "RESTATEMENT",
    "SIMILARITY_MARKER",
    "BadVector",
    "Brain",
    "Ending",
    "Fault",
    "FaultHook",
    "Kind",
    "Latency",
    "Malformed",
    "Metered",
    "MeteredBrain",
    "OpenAIStub",
    "ReasoningBrain",
    "RecordedRequest",
    "Reply",
    "RequestInfo",
    "ScriptedBrain",
    "bad_vector",
    "classify",
    "combine",
    "connection_reset",
    "drip",
    "echo_key",
    "error_body",
    "fail_times",
    "hang",
    "http_error",
    "malformed",
    "parse_coherence_prompt",
    "parse_generate_prompt",
    "parse_similarity_prompt",
    "question_id",
    "rate_limited",
    "reordered_embeddings",
    "unit_vector",
    "when",
]
