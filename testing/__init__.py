"""A local OpenAI-compatible server for tests, benchmarks and notebooks.

``OpenAIStub`` answers on 127.0.0.1 from a ``Brain`` (``ScriptedBrain``'s chain plan gives a run
known scores), slowed by ``Latency`` or failed by fault hooks (``faults``) as a remote API is::

    with OpenAIStub(ScriptedBrain({"What is art?": 5})) as stub:
        chat = ChatOpenAI(model="m", base_url=stub.base_url, api_key="test-key", timeout=5)
"""

from .brain import (
    COHERENCE_MARKER,
    GENERATE_MARKER,
    INCOHERENT,
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
