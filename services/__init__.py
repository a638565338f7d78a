"""What nodes call: clients for the three roles, the score cache and endpoint limits.

Nodes never build clients (building one blocks the event loop for 130-230 ms); they get a
``Services`` from a factory the graph builder was given. The default factory builds
OpenAI-compatible clients once per settings and event loop; callers embedding the graph
can pass their own factory, for example to test with fake models or to use another chat
model class.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from aidanbench.graph.settings import LOCAL_EMBEDDING_MODEL, Settings
from aidanbench.services import clients
from aidanbench.services.cache import ScoreCache
from aidanbench.services.errors import ConfigError, host_of
from aidanbench.services.limits import EndpointLimiter

ROLES = ("model", "judge", "embeddings")


@dataclass
class Services:
    """Clients and shared helpers for one settings object.

    ``build`` holds one constructor per role; each client is built on first use, so a
    missing key for one role is reported by the node that needs it (naming the role).
    """

    build: dict[str, Callable[[], object]]
    cache: ScoreCache
    limiters: dict[str, EndpointLimiter]
    _built: dict[str, object] = field(default_factory=dict)

    def _get(self, role: str) -> object:
        if role not in self._built:
            self._built[role] = self.build[role]()
        return self._built[role]

    def warm(self) -> None:
        """Build every client now, outside any node, so no node pays for it.

        A role that cannot be built (its key is missing, its extra not installed) is left
        to fail inside its node, where the error is recorded for the question.
        """
        for role in ROLES:
            try:
                self._get(role)
            except (ConfigError, ImportError):
                continue

    @property
    def model(self) -> BaseChatModel:
        """The model under test."""
        client = self._get("model")
        assert isinstance(client, BaseChatModel)
        return client

    @property
    def judge(self) -> BaseChatModel:
        """The judge (coherence and similarity)."""
        client = self._get("judge")
        assert isinstance(client, BaseChatModel)
        return client

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model."""
        client = self._get("embeddings")
        assert isinstance(client, Embeddings)
        return client


ServicesFactory = Callable[[Settings], Services]
"""What a graph builder takes to reach models: settings in, services out."""

_caches: dict[Path, ScoreCache] = {}
_caches_lock = threading.Lock()


def shared_cache(path: str | Path) -> ScoreCache:
    """One ``ScoreCache`` per file and process, shared by every question using it."""
    key = Path(path).resolve()
    with _caches_lock:
        if key not in _caches:
            _caches[key] = ScoreCache(key)
        return _caches[key]


def role_host(settings: Settings, role: str) -> str:
    """Host of ``role``'s endpoint for messages (``local`` for on-machine embeddings)."""
    if role == "embeddings" and settings.embedding_model == LOCAL_EMBEDDING_MODEL:
        return "local"
    url = {
        "model": settings.base_url,
        "judge": settings.judge_base_url,
        "embeddings": settings.embedding_base_url,
    }[role]
    return host_of(url)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Services]] = (
    weakref.WeakKeyDictionary()
)
_memory_caches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ScoreCache] = (
    weakref.WeakKeyDictionary()
)
_limiters: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, int, float | None], EndpointLimiter]
] = weakref.WeakKeyDictionary()


def _limiter(loop: asyncio.AbstractEventLoop, host: str, settings: Settings) -> EndpointLimiter:
    per_loop = _limiters.setdefault(loop, {})
    key = (host, settings.max_concurrency, settings.requests_per_minute)
    if key not in per_loop:
        per_loop[key] = EndpointLimiter(settings.max_concurrency, settings.requests_per_minute)
    return per_loop[key]


def default_services(settings: Settings) -> Services:
    """OpenAI-compatible services for ``settings``, built once per settings and event loop.

    Clients hold connection pools bound to the running loop, so a new loop (a new
    ``asyncio.run``) gets new clients; limiters are shared by every settings object that
    reaches the same endpoint on that loop. Without a ``cache_path`` the score cache lives
    in memory for the loop's lifetime, shared by its questions.
    """
    loop = asyncio.get_running_loop()
    per_loop = _by_loop.setdefault(loop, {})
    key = settings.model_dump_json()
    if key not in per_loop:
        hosts = {role: role_host(settings, role) for role in ROLES}
        per_loop[key] = Services(
            build={
                "model": lambda: clients.model_under_test(settings),
                "judge": lambda: clients.judge(settings),
                "embeddings": lambda: clients.embeddings(settings),
            },
            cache=(
                shared_cache(settings.cache_path)
                if settings.cache_path
                else _memory_caches.setdefault(loop, ScoreCache())
            ),
            limiters={role: _limiter(loop, hosts[role], settings) for role in ROLES},
        )
    return per_loop[key]


__all__ = [
    "ConfigError",
    "Services",
    "ServicesFactory",
    "default_services",
    "role_host",
    "shared_cache",
]
