"""Clients, caches and limiters per settings: what ``aidanbench.services`` exports."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage

from aidanbench.core.errors import ConfigError, MalformedReply
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL, Settings
from aidanbench.services import clients, retry
from aidanbench.services.batching import EmbeddingBatcher
from aidanbench.services.cache import ScoreCache, endpoint_key
from aidanbench.services.errors import host_of
from aidanbench.services.limits import EndpointLimiter

ROLES = ("model", "judge", "embeddings")


@dataclass
class Services:
    """Clients and shared helpers for one settings object.

    ``build`` holds one constructor per role; each client is built on first use, so a
    missing key for one role is reported by the node that needs it (naming the role).
    Chat requests go through ``chat`` and embedding requests through ``embedder``, which
    coalesces the questions' concurrent requests (``services.batching``); both take a
    limiter slot per attempt, bound each attempt by ``request_timeout`` and retry
    transient failures ``max_retries`` times (``services.retry``). ``embedding_namespace``
    keys the cached vectors (``services.cache``).
    """

    build: dict[str, Callable[[], object]]
    cache: ScoreCache
    limiters: dict[str, EndpointLimiter]
    pools: list[httpx2.AsyncClient] = field(default_factory=list)
    """HTTP pools the built clients use, closed by ``aclose``."""
    request_timeout: float | None = None
    """Seconds one attempt may take, all of it (None: unbounded)."""
    max_retries: int = 0
    """Retries of a transient failure; the clients themselves never retry."""
    embedding_namespace: str = "default"
    """What decides a vector (endpoint and model): the cache key of this embedder."""
    _built: dict[str, object] = field(default_factory=dict)
    _batcher: EmbeddingBatcher | None = None

    async def aclose(self) -> None:
        """Close the clients' HTTP pools (clients built afterwards get new ones)."""
        pools, self.pools = self.pools, []
        self._built.clear()
        self._batcher = None
        for pool in pools:
            await pool.aclose()

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

    @property
    def embedder(self) -> EmbeddingBatcher:
        """Embedding requests, batched across every question using these services."""
        if self._batcher is None:
            namespace = self.embedding_namespace
            self._batcher = EmbeddingBatcher(
                client=lambda: self.embeddings,
                limiter=self.limiters["embeddings"],
                timeout=self.request_timeout,
                max_retries=self.max_retries,
                size=lambda: self.cache.size(namespace),
            )
        return self._batcher

    async def chat(self, role: str, prompt: str) -> AIMessage:
        """The reply of ``role`` (``model`` or ``judge``) to one user message.

        A 200 reply the client cannot read (no choices, not JSON, an HTML page, an
        ``error`` object) is a ``MalformedReply``, retried like a 5xx. Lone UTF-16
        surrogates, which no UTF-8 file, database or request can hold, are replaced by
        U+FFFD as a UTF-8 decoder replaces invalid bytes.
        """
        client = self.model if role == "model" else self.judge

        async def request() -> AIMessage:
            try:
                reply = await client.ainvoke([HumanMessage(prompt)])
            except (ValueError, LookupError, TypeError, AttributeError) as exc:
                raise MalformedReply(f"{type(exc).__name__}: {exc}") from exc
            if not isinstance(reply, AIMessage):
                raise MalformedReply(f"a {type(reply).__name__} instead of a message")
            return reply

        reply = await retry.call(
            self.limiters[role],
            request,
            limit_s=self.request_timeout,
            max_retries=self.max_retries,
        )
        return repaired(reply)


_SURROGATE = re.compile("[\ud800-\udfff]")


def repaired(reply: AIMessage) -> AIMessage:
    """``reply`` with lone surrogates in its text replaced by U+FFFD."""
    content = reply.content
    if isinstance(content, str):
        if _SURROGATE.search(content) is None:
            return reply
        return reply.model_copy(update={"content": _SURROGATE.sub("\ufffd", content)})
    blocks: list[str | dict[object, object]] = []
    for block in content:
        if isinstance(block, str):
            blocks.append(_SURROGATE.sub("\ufffd", block))
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            blocks.append({**block, "text": _SURROGATE.sub("\ufffd", block["text"])})
        else:
            blocks.append(block)
    return reply.model_copy(update={"content": blocks})


def embedding_namespace(settings: Settings) -> str:
    """The cache key of the settings' embeddings: model and endpoint (``local`` alone)."""
    if settings.embedding_model == LOCAL_EMBEDDING_MODEL:
        return LOCAL_EMBEDDING_MODEL
    return f"{settings.embedding_model} @ {endpoint_key(settings.embedding_base_url)}"


def judge_namespace(settings: Settings) -> str:
    """The cache key of the settings' similarity judgements: judge, endpoint, temperature."""
    key = f"{settings.judge_model} @ {endpoint_key(settings.judge_base_url)}"
    if settings.judge_temperature is not None:
        key += f" T={settings.judge_temperature!r}"
    return key


def key_values(settings: Settings) -> list[str]:
    """The values of every role's key variable, to redact from error messages."""
    names = {settings.api_key_env, settings.judge_api_key_env, settings.embedding_api_key_env}
    return [value for name in sorted(names) if (value := os.environ.get(name))]


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


class OpenAIServices:
    """A ``ServicesFactory`` of OpenAI-compatible clients, built once per settings and loop.

    Clients hold connection pools bound to the running loop, so a new loop (a new
    ``asyncio.run``) gets new clients; limiters are shared by every settings object that
    reaches the same endpoint on that loop. Without a ``cache_path`` the score cache lives
    in memory for the loop's lifetime, shared by its questions.

    ``transport`` picks the HTTP pools (``services.clients``): ``httpx`` pools need no
    closing; ``aiohttp`` pools are cheaper per request and must be closed with
    ``aclose`` on the loop that used them.
    """

    def __init__(self, transport: clients.Transport = "httpx") -> None:
        self.transport = transport
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Services]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, settings: Settings) -> Services:
        loop = asyncio.get_running_loop()
        per_loop = self._by_loop.setdefault(loop, {})
        key = settings.model_dump_json()
        if key not in per_loop:
            per_loop[key] = self._build(loop, settings)
        return per_loop[key]

    def _build(self, loop: asyncio.AbstractEventLoop, settings: Settings) -> Services:
        hosts = {role: role_host(settings, role) for role in ROLES}
        services = Services(
            build={},
            cache=(
                shared_cache(settings.cache_path)
                if settings.cache_path
                else _memory_caches.setdefault(loop, ScoreCache())
            ),
            limiters={role: _limiter(loop, hosts[role], settings) for role in ROLES},
            request_timeout=settings.request_timeout,
            max_retries=settings.max_retries,
            embedding_namespace=embedding_namespace(settings),
        )

        def pool() -> httpx2.AsyncClient:
            made = clients.http_pool(settings, self.transport)
            services.pools.append(made)
            return made

        local = settings.embedding_model == LOCAL_EMBEDDING_MODEL
        services.build.update(
            model=lambda: clients.model_under_test(settings, pool()),
            judge=lambda: clients.judge(settings, pool()),
            embeddings=lambda: clients.embeddings(settings, None if local else pool()),
        )
        return services

    async def aclose(self) -> None:
        """Close every pool made for the running loop's services."""
        for services in self._by_loop.pop(asyncio.get_running_loop(), {}).values():
            await services.aclose()


default_services = OpenAIServices()
"""The factory graphs use unless given another: httpx pools, nothing to close."""


__all__ = [
    "ConfigError",
    "OpenAIServices",
    "Services",
    "ServicesFactory",
    "default_services",
    "embedding_namespace",
    "judge_namespace",
    "key_values",
    "role_host",
    "shared_cache",
]
