"""A content-addressed cache of embeddings and judge scores.

Vectors are kept out of checkpointed state (which they would make grow quadratically), keyed
by (namespace, sha256 of the text), so each answer is embedded once per embedding model, even
across restarts and by ``rescore``. The namespace is endpoint and model, so a process serving
several endpoints never hands one endpoint's vector to another. Judge scores are keyed by (judge
namespace, sha256 of the rendered prompt): each pair of answers is judged for similarity at most
once, and coherence judgments made outside a run (``calibrate``, ``rescore --judge-model``) are kept
one row per sample, with the model that served it. The ids of batches submitted are kept too
(``services.batch``), so a killed command resumes its batch instead of paying for a second.

Only usable vectors are stored: finite, not all zeros, and of the namespace's one length (the
most common on disk, else the first stored). A vector read back that breaks those rules is
treated as absent, so it is embedded again and replaced.

An in-memory dict, written through to SQLite (WAL) when a path is given; one instance per path
and services instance. ``max_bytes`` bounds the in-memory layer of a cache that outlives runs
(least recently used entries go first: a disk-backed cache reads them back, a memory-only
one embeds or judges again). That layer is keyed by the text itself, not its
digest: each turn looks up every earlier answer, and hashing them all again would make each
turn's cost grow with the chain.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from aidanbench.core.errors import MalformedReply

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL, digest BLOB NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, digest)
);
CREATE TABLE IF NOT EXISTS similarities (
    judge TEXT NOT NULL, digest BLOB NOT NULL, score INTEGER NOT NULL,
    PRIMARY KEY (judge, digest)
);
CREATE TABLE IF NOT EXISTS judgments (
    judge TEXT NOT NULL, digest BLOB NOT NULL, sample INTEGER NOT NULL,
    score INTEGER NOT NULL, served TEXT,
    PRIMARY KEY (judge, digest, sample)
);
CREATE TABLE IF NOT EXISTS batches (
    digest TEXT PRIMARY KEY, batch_id TEXT NOT NULL, created REAL NOT NULL,
    collected INTEGER NOT NULL DEFAULT 0
);
"""


def digest(text: str) -> bytes:
    """sha256 of the UTF-8 text (a lone surrogate hashed as its surrogate-escaped bytes)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def endpoint_key(base_url: str | None) -> str:
    """The endpoint part of a namespace: the base URL without credentials, query or fragment
    (the OpenAI API when None)."""
    if not base_url:
        return "https://api.openai.com/v1"
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path.rstrip('/')}"


def usable(vector: np.ndarray, size: int | None) -> bool:
    """Finite, not all zeros, one-dimensional and ``size`` long (when known)."""
    return (
        vector.ndim == 1
        and vector.size > 0
        and (size is None or vector.size == size)
        and bool(np.all(np.isfinite(vector)))
        and bool(np.any(vector))
    )


class UnusableVector(MalformedReply):
    """A vector the cache refuses to store (not finite, zero, or of the wrong length)."""


SCORE_BYTES = 100
"""What one cached similarity score is charged against ``max_bytes`` (key and int)."""

VECTOR_OVERHEAD_BYTES = 100
"""What one cached vector is charged beyond its float32 data (key, array header)."""


class ScoreCache:
    """Embeddings and similarity scores, in memory and optionally on disk (``max_bytes``
    None: the in-memory layer keeps everything, for a cache that lives as long as one run)."""

    def __init__(self, path: str | Path | None = None, max_bytes: int | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.max_bytes = max_bytes
        self.held_bytes = 0
        """What the in-memory layer holds, as charged against ``max_bytes``."""
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._sizes: dict[str, int | None] = {}
        self._scores: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)

    def vectors(self, model: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Cached vectors of ``texts`` under ``model`` (None where missing)."""
        with self._lock:
            memo = self._vectors
            found = [memo.get((model, t)) for t in texts]
            if self._db is not None and any(v is None for v in found):
                absent = [t for t, v in zip(texts, found, strict=True) if v is None]
                self._load_vectors(model, absent)
                found = [memo.get((model, t)) for t in texts]
            if self.max_bytes is not None:
                for text, vector in zip(texts, found, strict=True):
                    if vector is not None:
                        memo.move_to_end((model, text))
        return found

    def size(self, model: str) -> int | None:
        """The length of every vector stored under ``model``, once one is known."""
        with self._lock:
            return self._size(model)

    def _size(self, model: str) -> int | None:
        if model not in self._sizes:
            found = None
            if self._db is not None:
                row = self._db.execute(
                    "SELECT length(vector), count(*) FROM embeddings WHERE model = ? "
                    "GROUP BY 1 ORDER BY 2 DESC LIMIT 1",
                    (model,),
                ).fetchone()
                found = None if row is None else int(row[0]) // 4
            self._sizes[model] = found
        return self._sizes[model]

    def _load_vectors(self, model: str, texts: list[str]) -> None:
        assert self._db is not None
        size = self._size(model)
        for text in texts:
            row = self._db.execute(
                "SELECT vector FROM embeddings WHERE model = ? AND digest = ?",
                (model, digest(text)),
            ).fetchone()
            if row is not None and len(row[0]) % 4 == 0:
                vector = np.frombuffer(row[0], dtype=np.float32)
                if usable(vector, size):
                    self._hold_vector(model, text, vector)
        self._evict()

    def _hold_vector(self, model: str, text: str, vector: np.ndarray) -> None:
        old = self._vectors.pop((model, text), None)
        if old is not None:
            self.held_bytes -= old.nbytes + VECTOR_OVERHEAD_BYTES
        self._vectors[(model, text)] = vector
        self.held_bytes += vector.nbytes + VECTOR_OVERHEAD_BYTES

    def _hold_score(self, key: tuple[str, bytes], score: int) -> None:
        if key not in self._scores:
            self.held_bytes += SCORE_BYTES
        self._scores[key] = score
        self._scores.move_to_end(key)

    def _evict(self) -> None:
        """Forget least recently used entries until the layer fits (vectors first: the bulk)."""
        if self.max_bytes is None:
            return
        while self.held_bytes > self.max_bytes and self._vectors:
            _, vector = self._vectors.popitem(last=False)
            self.held_bytes -= vector.nbytes + VECTOR_OVERHEAD_BYTES
        while self.held_bytes > self.max_bytes and self._scores:
            self._scores.popitem(last=False)
            self.held_bytes -= SCORE_BYTES

    def put_vectors(
        self, model: str, items: Iterable[tuple[str, Sequence[float] | np.ndarray]]
    ) -> None:
        """Store vectors (as float32) for texts under ``model``; ``UnusableVector``, and nothing
        stored, if any is unusable."""
        rows = [(text, np.asarray(vector, dtype=np.float32)) for text, vector in items]
        with self._lock:
            size = self._size(model)
            for _, vec in rows:
                size = vec.size if size is None else size
                if not usable(vec, size):
                    raise UnusableVector(f"refused to cache an unusable vector of {model}")
            if size is not None:
                self._sizes[model] = size
            for text, vec in rows:
                self._hold_vector(model, text, vec)
            self._evict()
            if self._db is not None and rows:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                    [(model, digest(text), vec.tobytes()) for text, vec in rows],
                )

    def similarity(self, judge: str, prompt: str) -> int | None:
        """A cached similarity score for the rendered judge prompt, if any."""
        key = (judge, digest(prompt))
        with self._lock:
            if key in self._scores:
                if self.max_bytes is not None:
                    self._scores.move_to_end(key)
                return self._scores[key]
            if self._db is not None:
                row = self._db.execute(
                    "SELECT score FROM similarities WHERE judge = ? AND digest = ?", key
                ).fetchone()
                if row is not None:
                    self._hold_score(key, int(row[0]))
                    self._evict()
                    return int(row[0])
        return None

    def put_similarity(self, judge: str, prompt: str, score: int) -> None:
        """Store a similarity score for the rendered judge prompt."""
        key = (judge, digest(prompt))
        with self._lock:
            self._hold_score(key, score)
            self._evict()
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO similarities VALUES (?, ?, ?)", (*key, score)
                )

    def judgments(self, judge: str, prompt: str) -> list[tuple[int, str | None]]:
        """Cached coherence judgments of the rendered prompt, in sample order, each with the
        model that served it (on disk only: the commands that judge outside a run keep no
        memory layer)."""
        if self._db is None:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT score, served FROM judgments WHERE judge = ? AND digest = ? "
                "ORDER BY sample",
                (judge, digest(prompt)),
            ).fetchall()
        return [(int(score), served) for score, served in rows]

    def put_judgments(
        self, judge: str, prompt: str, judged: Sequence[tuple[int, str | None]]
    ) -> None:
        """Store every judgment of the rendered prompt (replacing what was there)."""
        if self._db is None:
            return
        key = digest(prompt)
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM judgments WHERE judge = ? AND digest = ?", (judge, key))
            self._db.executemany(
                "INSERT INTO judgments VALUES (?, ?, ?, ?, ?)",
                [(judge, key, n, score, served) for n, (score, served) in enumerate(judged)],
            )
            self._db.execute("COMMIT")

    def batch(self, request_digest: str) -> tuple[str, bool] | None:
        """The batch submitted for these requests, and whether its results were stored."""
        if self._db is None:
            return None
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, collected FROM batches WHERE digest = ?", (request_digest,)
            ).fetchone()
        return None if row is None else (str(row[0]), bool(row[1]))

    def put_batch(self, request_digest: str, batch_id: str, *, collected: bool = False) -> None:
        """Record the batch submitted for these requests, first, so a killed command finds it."""
        if self._db is None:
            return
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO batches VALUES (?, ?, strftime('%s', 'now'), ?)",
                (request_digest, batch_id, int(collected)),
            )

    def close(self) -> None:
        """Close the database; the in-memory copy stays usable."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
