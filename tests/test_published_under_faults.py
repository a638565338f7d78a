"""The whole published run, replayed through the run driver while the provider misbehaves.

Every embeddings reply comes back with its ``data`` reversed (each item keeping its
``index``), and the first attempt of about a third of all requests fails transiently: a
429, a 500, a reset connection, an HTML page or an ``{"error": …}`` body with status 200.
Faults are chosen by each request's content and attempt number, never by arrival order,
so the run is the same under any interleaving. Every transient fault is retried, so the
scores must be the published ones exactly: 421 / 45 / 224 / 147 / 275, question by
question (1,112 in all).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from aidanbench import reference
from aidanbench.cli.demo import KEY_VARIABLE, demo_tasks, published_scores
from aidanbench.runner.local import drive_local as drive
from aidanbench.runner.progress import Progress
from aidanbench.services import ServicesFactory
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, malformed, reordered_embeddings
from aidanbench.testing.published import PublishedRunBrain, published_chains

TRANSIENT = (
    Fault(status=429),
    Fault(status=500),
    Fault(reset=True),
    malformed("html"),
    malformed("error-200"),
)


def misbehaving(info: RequestInfo) -> Fault | None:
    """A transient fault on the first attempt of one request in three (by content); every
    later attempt and every embeddings reply answered, the embeddings reordered."""
    digest = int(hashlib.sha256(info.key.encode("utf-8", "surrogatepass")).hexdigest(), 16)
    if info.attempt == 1 and digest % 3 == 0:
        return TRANSIENT[digest // 3 % len(TRANSIENT)]
    return reordered_embeddings() if info.kind == "embed" else None


@pytest.mark.slow
async def test_published_run_is_exact_under_transient_faults_and_reordered_embeddings(
    services: ServicesFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "sk-local-replay")
    chains = published_chains()
    with OpenAIStub(PublishedRunBrain(chains), faults=misbehaving) as stub:
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
    assert all(line["stop_reason"] in ("coherence", "novelty") for line in lines)
    got: dict[str, dict[str, int]] = {}
    for line in lines:
        got.setdefault(line["model"], {})[line["question"]] = line["score"]
    assert got == published_scores(chains)
    assert {m: sum(s.values()) for m, s in got.items()} == reference.PUBLISHED_TOTALS
    assert sum(reference.PUBLISHED_TOTALS.values()) == 1112
