"""A content-addressed cache of embeddings and judge similarity scores.

Vectors are kept out of checkpointed state (every checkpoint would carry them all) and
stored here instead, keyed by (embedding model, sha256 of the text), so each answer is
embedded once per embedding model, even across restarts and by ``rescore``. Similarity
judgements are keyed by (judge model, sha256 of the rendered prompt): each pair of answers
is judged at most once.

Backed by an in-memory dict, written through to SQLite when a path is given (WAL mode;
a few small writes per answer). One instance per path and process, shared by every
question of a run. The in-memory layer is keyed by the text itself, not its digest: each
turn looks up every earlier answer, and hashing them all again would make each turn's
cost grow with the chain; a dict hit on a string already in state is a pointer comparison.
Only the disk layer needs digests.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL, digest BLOB NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, digest)
);
CREATE TABLE IF NOT EXISTS similarities (
    judge TEXT NOT NULL, digest BLOB NOT NULL, score INTEGER NOT NULL,
    PRIMARY KEY (judge, digest)
);
"""


def digest(text: str) -> bytes:
    """sha256 of the UTF-8 text: the cache key of an answer or a prompt."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class ScoreCache:
    """Embeddings and similarity scores, in memory and optionally on disk."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._vectors: dict[tuple[str, str], np.ndarray] = {}
        self._scores: dict[tuple[str, bytes], int] = {}
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
        return found

    def _load_vectors(self, model: str, texts: list[str]) -> None:
        assert self._db is not None
        for text in texts:
            row = self._db.execute(
                "SELECT vector FROM embeddings WHERE model = ? AND digest = ?",
                (model, digest(text)),
            ).fetchone()
            if row is not None:
                self._vectors[(model, text)] = np.frombuffer(row[0], dtype=np.float32)

    def put_vectors(self, model: str, items: Iterable[tuple[str, Sequence[float]]]) -> None:
        """Store vectors (as float32) for texts under ``model``."""
        rows = [(text, np.asarray(vector, dtype=np.float32)) for text, vector in items]
        with self._lock:
            for text, vec in rows:
                self._vectors[(model, text)] = vec
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
                return self._scores[key]
            if self._db is not None:
                row = self._db.execute(
                    "SELECT score FROM similarities WHERE judge = ? AND digest = ?", key
                ).fetchone()
                if row is not None:
                    self._scores[key] = int(row[0])
                    return int(row[0])
        return None

    def put_similarity(self, judge: str, prompt: str, score: int) -> None:
        """Store a similarity score for the rendered judge prompt."""
        key = (judge, digest(prompt))
        with self._lock:
            self._scores[key] = score
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO similarities VALUES (?, ?, ?)", (*key, score)
                )

    def close(self) -> None:
        """Close the database; the in-memory copy stays usable."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
