"""The whole published run, replayed through the run driver while the provider misbehaves.

Every embeddings reply comes back with its ``data`` reversed (each item keeping its
``index``), and the first attempt of about a third of all requests fails transiently: a
429, a 500, a reset connection, an HTML page or an ``{"error": …}`` body with status 200.
Faults are chosen by each request's content and attempt number, never by arrival order
(an embeddings text meets at most one fault, since batching regroups retries), so the
scores are the same under any interleaving. Every transient fault is retried, so the
scores must be the published ones exactly: 421 / 45 / 224 / 147 / 275, question by
question (1,112 in all).
"""

from __future__ import annotations

import hashlib
import io
import threading
from pathlib import Path

import pytest

from aidanbench import reference
from aidanbench.cli.demo import KEY_VARIABLE, demo_tasks, published_scores
from aidanbench.runner.local import drive_local as drive
from aidanbench.runner.progress import Progress
from aidanbench.services import ServicesFactory
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, malformed, reordered_embeddings
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain

pytestmark = pytest.mark.e2e

TRANSIENT = (
    Fault(status=429),
    Fault(status=500),
    Fault(reset=True),
    malformed("html"),
    malformed("error-200"),
)


class Misbehaving:
    """A transient fault on the first attempt of one request in three (by content); every
    later attempt and every embeddings reply answered, the embeddings reordered.

    Embedding requests are batched across questions and a retried caller joins whatever
    batch is next, so a retry is a request with new content: an embeddings fault is
    therefore given only to a request none of whose texts met one before. Each text is
    faulted at most once, so every caller's retries get through, whatever the batching.
    """

    def __init__(self) -> None:
        self.faulted_texts: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, info: RequestInfo) -> Fault | None:
        digest = int(hashlib.sha256(info.key.encode("utf-8", "surrogatepass")).hexdigest(), 16)
        if info.attempt == 1 and digest % 3 == 0 and self.first_fault(info):
            return TRANSIENT[digest // 3 % len(TRANSIENT)]
        return reordered_embeddings() if info.kind == "embed" else None

    def first_fault(self, info: RequestInfo) -> bool:
        if info.kind != "embed":
            return True
        with self.lock:
            if self.faulted_texts.intersection(info.texts):
                return False
            self.faulted_texts.update(info.texts)
            return True


async def test_published_run_is_exact_under_transient_faults_and_reordered_embeddings(
    services: ServicesFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "sk-local-replay")
    chains = published_chains()
    with OpenAIStub(ReplayBrain(chains), faults=Misbehaving()) as stub:
        tasks = [
            type(task)(task.settings.model_copy(update={"max_retries": 3}), task.question, 1)
            for task in demo_tasks(chains, stub.base_url, tmp_path)
        ]
        lines = await drive(
            tasks,
            tmp_path,
            concurrency=len(tasks),
            progress=Progress(out=io.StringIO(), live=False),
            services=services,
        )
        faulted = sum(1 for r in stub.requests if r.attempt > 1)
    assert faulted > 100, "a good share of the requests met a fault and was retried"
    odd = [(line.stop_reason, line.error) for line in lines]
    odd = [x for x in odd if x[0] not in ("coherence", "novelty")]
    assert not odd, odd[:3]
    got: dict[str, dict[str, int]] = {}
    for line in lines:
        assert line.score is not None
        got.setdefault(line.model, {})[line.question] = line.score
    assert got == published_scores(chains)
    assert {m: sum(s.values()) for m, s in got.items()} == reference.PUBLISHED_TOTALS
    assert sum(reference.PUBLISHED_TOTALS.values()) == 1112
