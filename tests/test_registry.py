"""A services instance owns its clients, caches and limiters, and closes them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aidanbench.graph.questions import bundled_questions
from aidanbench.services import DEFAULT_CACHE_BYTES, OpenAIServices, default_services
from aidanbench.services.cache import VECTOR_OVERHEAD_BYTES, ScoreCache
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain

from .graphs import run_question
from .test_http import stub_settings


async def test_one_limiter_per_host_whatever_the_other_settings(api_key: str) -> None:
    """Two models with different limit values on one host share one limit: the lower."""
    questions = bundled_questions(4)
    brain = ScriptedBrain({q: 2 for q in questions})
    latency = Latency(generate=0.03, coherence=0.03, embed=0.03)
    with OpenAIStub(brain, latency=latency) as stub:
        async with OpenAIServices() as factory:
            first = stub_settings(stub, model="model-a", max_concurrency=2)
            second = stub_settings(stub, model="model-b", max_concurrency=3)
            assert factory(first).limiters["model"] is factory(second).limiters["judge"]
            outs = await asyncio.gather(
                *(run_question(factory, q, s) for q in questions for s in (first, second))
            )
            assert [out["score"] for out in outs] == [2] * 8
            assert stub.max_concurrency() <= 2  # not 2 + 3 from two limiters
            assert list(factory.endpoint_stats()) == [f"127.0.0.1:{stub.port}"]


async def test_instances_own_their_caches_and_limiters(stub: OpenAIStub) -> None:
    settings = stub_settings(stub)
    one, other = OpenAIServices(), OpenAIServices()
    assert one(settings).cache is not other(settings).cache
    assert one(settings).limiters["model"] is not other(settings).limiters["model"]


async def test_closing_closes_clients_and_cache_files(
    stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    question = bundled_questions(1)[0]
    stub.brain = ScriptedBrain({question: 2})
    settings = stub_settings(stub, cache_path=str(tmp_path / "cache.sqlite"))
    async with OpenAIServices("aiohttp") as factory:
        services = factory(settings)
        out = await run_question(factory, question, settings)
        assert out["score"] == 2
        pools = list(services.pools)
        cache = services.cache
        assert pools and cache._db is not None
    assert all(pool.is_closed for pool in pools)
    assert cache._db is None, "the cache file is closed with the run"


def test_default_factory_bounds_its_memory_cache() -> None:
    assert default_services.cache_bytes == DEFAULT_CACHE_BYTES
    size = 8
    per_vector = 4 * size + VECTOR_OVERHEAD_BYTES
    cache = ScoreCache(max_bytes=10 * per_vector)
    for i in range(25):
        cache.put_vectors("m", [(f"text {i}", np.ones(size) * (i + 1))])
        cache.vectors("m", ["text 0"])  # kept in use: never the one evicted
    assert cache.held_bytes <= 10 * per_vector
    found = cache.vectors("m", ["text 0", "text 1", "text 24"])
    assert found[0] is not None and found[2] is not None
    assert found[1] is None, "the least recently used vector is forgotten"


async def test_default_services_use_the_bounded_cache(stub: OpenAIStub) -> None:
    assert default_services(stub_settings(stub)).cache.max_bytes == DEFAULT_CACHE_BYTES


async def test_forget_drops_the_caches_and_limiters(stub: OpenAIStub, tmp_path: Path) -> None:
    """What an instance remembers of an endpoint is gone after ``forget``: a later server
    on the same port (a new stub, a restarted provider) starts with nothing cached."""
    factory = OpenAIServices()
    in_memory, on_disk = stub_settings(stub), stub_settings(stub, cache_path=str(tmp_path / "c"))
    before = factory(in_memory)
    before.cache.put_vectors("m", [("text", np.ones(4))])
    file_cache = factory(on_disk).cache
    factory.forget()
    after = factory(in_memory)
    assert after.cache is not before.cache
    assert after.cache.vectors("m", ["text"]) == [None]
    assert after.limiters["model"] is not before.limiters["model"]
    assert file_cache._db is None, "a cache file is closed (and opened again if named)"
    assert factory(on_disk).cache._db is not None
    await factory.aclose()


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_starts_with_fresh_default_services(turn: int) -> None:
    """conftest's ``fresh_default_services``: nothing one test cached reaches the next
    (in one process, the second turn would find the first's vector)."""
    cache = default_services.cache(None)
    assert cache.vectors("m", ["left by a test"]) == [None]
    cache.put_vectors("m", [("left by a test", np.ones(4))])


async def test_one_connection_pool_per_host_whatever_the_settings(api_key: str) -> None:
    """Every model and role reaching one host shares one pool: connections opened for one
    model are reused by the next instead of each settings object keeping its own idle
    connections (and open files) to the same server."""
    questions = bundled_questions(2)
    brain = ScriptedBrain({q: 2 for q in questions})
    with OpenAIStub(brain) as stub:
        async with OpenAIServices("aiohttp") as factory:
            first = stub_settings(stub, model="model-a")
            second = stub_settings(stub, model="model-b", judge_model="judge-b")
            outs = await asyncio.gather(
                *(run_question(factory, q, s) for q in questions for s in (first, second))
            )
            assert [out["score"] for out in outs] == [2] * 4
            pools = [*factory(first).pools, *factory(second).pools]
            assert len(pools) == 5, "model and judge of each took a pool, and the one embedder"
            assert len({id(pool) for pool in pools}) == 1


CONNECTIONS_ALLOWED = """
import resource, sys
from aidanbench.services.registry import OPEN_FILES_RESERVE, connections_allowed
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (400, 600))  # a low hard limit, like macOS
print(connections_allowed(1024, 0), connections_allowed(1024, 100))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], OPEN_FILES_RESERVE)
"""


@pytest.mark.e2e
def test_endpoint_ceiling_fits_the_open_file_limit() -> None:
    """A ceiling above what the process may open is lowered to what it may (after raising
    the soft limit as far as the hard one allows), so a run at a high
    ``--endpoint-concurrency`` waits for connections instead of failing mid-run with "Too
    many open files"."""
    done = subprocess.run(
        [sys.executable, "-c", CONNECTIONS_ALLOWED], capture_output=True, text=True, check=True
    )
    first, raised = done.stdout.splitlines()
    soft, reserve = (int(x) for x in raised.split())
    assert soft == 600, "the soft limit is raised to the hard one"
    assert first.split() == [str(600 - reserve), str(600 - reserve - 100)]


async def test_forget_starts_the_shared_factory_afresh(stub: OpenAIStub, api_key: str) -> None:
    """What ``default_services`` learnt of an endpoint (its vectors' length, scores) is
    forgotten: a later server on a reused port (another test's stub) starts from nothing.
    conftest's ``fresh_default_services`` does this before every test."""
    first, second = bundled_questions(2)
    settings = stub_settings(stub)
    stub.brain = ScriptedBrain({first: 2}, dim=256)
    assert (await run_question(default_services, first, settings))["score"] == 2

    stub.brain = ScriptedBrain({second: 2}, dim=8)  # the same endpoint, shorter vectors
    stale = await run_question(default_services, second, settings)
    assert stale["score"] == 0 and stale["stop_reason"] == "error", "remembered length 256"

    default_services.forget()
    assert (await run_question(default_services, second, settings))["score"] == 2


async def test_every_model_under_test_shares_one_embedding_batcher(api_key: str) -> None:
    """The answers of a campaign's models share embedding requests: settings that differ
    only in the model under test (or the judge) share one batcher, so the answers of 80
    models embedded in one step are one request, not 80; another embedding model has its
    own."""
    with OpenAIStub(ScriptedBrain({})) as stub:
        async with OpenAIServices("aiohttp") as factory:
            first = stub_settings(stub, model="model-a")
            second = stub_settings(stub, model="model-b", judge_model="judge-b")
            other = stub_settings(stub, model="model-a", embedding_model="other-embedding")
            assert factory(first).embedder is factory(second).embedder
            assert factory(other).embedder is not factory(first).embedder
            vectors = await asyncio.gather(
                factory(first).embed(["an answer of model a"]),
                factory(second).embed(["an answer of model b"]),
            )
            assert [len(v) for v in vectors] == [1, 1]
            assert stub.count("embed") == 1, "both answers in one request"


async def test_a_settings_object_finds_its_services_without_being_serialised(
    monkeypatch: pytest.MonkeyPatch, api_key: str
) -> None:
    """Every node call asks the factory for its services: one settings object is turned
    into its key (its JSON) once, and equal settings in another object share the services."""
    from aidanbench.core.settings import Settings

    dumped: list[str] = []
    real = Settings.model_dump_json

    def counting(self: Settings, **kwargs: object) -> str:
        dumped.append(self.model)
        return real(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Settings, "model_dump_json", counting)
    settings = Settings(model="model-a")
    async with OpenAIServices() as factory:
        services = factory(settings)
        assert all(factory(settings) is services for _ in range(5))
        assert dumped == ["model-a"]
        twin = settings.model_copy()
        assert factory(twin) is services
        assert factory(settings.model_copy(update={"model": "model-b"})) is not services
        assert dumped == ["model-a", "model-a", "model-b"]
