"""Clients, caches and limiters per settings: what ``aidanbench.services`` exports."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx2
import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage

from aidanbench.core.errors import ConfigError, MalformedReply
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL, ROLES, Settings
from aidanbench.record.usage import UsageBook
from aidanbench.services import clients, retry
from aidanbench.services.batching import EmbeddingBatcher
from aidanbench.services.cache import ScoreCache, endpoint_key
from aidanbench.services.chat import OpenAIChat
from aidanbench.services.endpoint_check import PROBE_MESSAGE, PROBE_TEXT
from aidanbench.services.limits import INITIAL_LIMIT, EndpointLimiter, EndpointStats
from aidanbench.services.lookahead import Verdicts
from aidanbench.services.refusals import RefusalWatch

T = TypeVar("T")

ChatClient = BaseChatModel | OpenAIChat
"""A chat role's client: any LangChain chat model, or the direct ``OpenAIChat``."""


@dataclass
class Services:
    """Clients and shared helpers for one settings object.

    ``build`` holds one constructor per role; each client is built on first use, so a missing
    key for one role is reported by the node that needs it (naming the role). Chat and embedding
    requests take a limiter slot per attempt and are retried (``services.retry``); embeddings
    are coalesced across questions (``services.batching``).
    """

    build: dict[str, Callable[[], object]]
    cache: ScoreCache
    limiters: dict[str, EndpointLimiter]
    pools: list[httpx2.AsyncClient] = field(default_factory=list)
    """HTTP pools the built clients use: one per host, shared with every other settings object
    reaching that host, and closed by ``OpenAIServices.aclose``."""
    request_timeout: float | None = None
    """Seconds one attempt may take, all of it (None: unbounded)."""
    max_retries: int = 0
    """Retries of a transient failure; the clients themselves never retry."""
    embedding_namespace: str = "default"
    """What decides a vector (endpoint and model): the cache key of this embedder."""
    refusals: RefusalWatch | None = None
    """Tells a refused role from one request's error; None: every failure is the request's."""
    verdicts: Verdicts = field(default_factory=Verdicts)
    """The failing answers of these services' questions, for their look-aheads."""
    models: dict[str, str] = field(default_factory=dict)
    """The model each chat role asks: its attempts are held under it at its endpoint's
    limiter, so a model that stops answering is named (``limits.Stalled``)."""
    _built: dict[str, object] = field(default_factory=dict)
    _batcher: EmbeddingBatcher | None = None

    def forget(self) -> None:
        """Drop the built clients (their pools are closed by their factory)."""
        self._built.clear()
        self._batcher = None
        self.pools = []

    def _get(self, role: str) -> object:
        if role not in self._built:
            self._built[role] = self.build[role]()
        return self._built[role]

    def warm(self) -> None:
        """Build every client now, outside any node; one that cannot be built is left to fail
        inside its node, where the error is recorded."""
        for role in ROLES:
            try:
                self._get(role)
            except (ConfigError, ImportError):
                continue

    @property
    def model(self) -> ChatClient:
        """The model under test."""
        client = self._get("model")
        assert isinstance(client, BaseChatModel | OpenAIChat)
        return client

    @property
    def judge(self) -> ChatClient:
        """The judge (coherence and similarity)."""
        client = self._get("judge")
        assert isinstance(client, BaseChatModel | OpenAIChat)
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
        """The reply of ``role`` to one user message, retried; a refused role raises
        ``EndpointRefused``. Lone UTF-16 surrogates, which no UTF-8 file, database or request
        can hold, become U+FFFD as a UTF-8 decoder replaces invalid bytes.
        """
        client = self.model if role == "model" else self.judge
        limiter, limit_s, retries = self.limiters[role], self.request_timeout, self.max_retries
        request = retry.call(
            limiter,
            lambda: ask(client, prompt),
            limit_s=limit_s,
            max_retries=retries,
            model=self.models.get(role),
        )
        return repaired(await self._watched(role, request))

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Vectors of ``texts``; a refused embeddings role raises ``EndpointRefused``."""
        return await self._watched("embeddings", self.embedder.embed(texts))

    async def _watched(self, role: str, request: Awaitable[T]) -> T:
        """``request``'s result; a failure that refuses ``role`` raises ``EndpointRefused``."""
        try:
            result = await request
        except Exception as exc:
            if self.refusals is not None:
                await self.refusals.check(role, exc, lambda: self._probe(role))
            raise
        if self.refusals is not None:
            self.refusals.succeeded(role)
        return result

    async def _probe(self, role: str) -> object:
        """One content-free request of ``role``, as its settings send it."""
        limiter, limit_s = self.limiters[role], self.request_timeout
        if role == "embeddings":
            embeddings = self.embeddings
            return await retry.attempt_once(
                limiter, limit_s, lambda: embeddings.aembed_documents([PROBE_TEXT])
            )
        client, model = self.model if role == "model" else self.judge, self.models.get(role)
        return await retry.attempt_once(limiter, limit_s, lambda: ask(client, PROBE_MESSAGE), model)


async def ask(client: ChatClient, prompt: str) -> AIMessage:
    """One attempt of a chat role's client at one user message; a 200 reply it cannot read
    is a ``MalformedReply``, retried like a 5xx."""
    if isinstance(client, OpenAIChat):
        return await client.reply(prompt)
    try:
        reply = await client.ainvoke([HumanMessage(prompt)])
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        raise MalformedReply(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(reply, AIMessage):
        raise MalformedReply(f"a {type(reply).__name__} instead of a message")
    return reply


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


def embedder_key(settings: Settings) -> tuple[object, ...]:
    """What makes two settings' embedding clients the same, so settings that differ only in
    the model under test (or the judge) share one batcher."""
    return (
        embedding_namespace(settings),
        settings.embedding_api_key_env,
        settings.request_timeout,
        settings.max_retries,
        settings.prices_path,
        settings.cache_path,
    )


def judge_namespace(settings: Settings) -> str:
    """The cache key of the settings' similarity judgements: judge, endpoint, temperature."""
    key = f"{settings.judge_model} @ {endpoint_key(settings.judge_base_url)}"
    if settings.judge_temperature is not None:
        key += f" T={settings.judge_temperature!r}"
    return key


def key_values(settings: Settings) -> list[str]:
    """The values of every role's key variable, to redact from error messages."""
    names = {settings.endpoint(role).key_env for role in ROLES}
    return [value for name in sorted(names) if (value := os.environ.get(name))]


ServicesFactory = Callable[[Settings], Services]
"""What a graph builder takes to reach models: settings in, services out."""

OPEN_FILES_RESERVE = 256
"""Open files kept back from connections (databases, outputs, sockets, a parent's files)."""


FIXED_CEILING = 1024
"""The ceiling of an endpoint whose limit does not adapt and whose settings give none."""

CONNECTIONS_MOST = 8192
"""Connections the endpoints of one event loop may hold together when their ceilings are
automatic: a bound on their memory (``docs/performance.md``)."""


def connections_allowed(wanted: int, taken: int) -> int:
    """How many connections one more endpoint may hold, at most ``wanted`` (at least one).

    Each connection is an open file. The soft limit is raised toward the hard one (no privilege
    needed), and what is left of it caps the ceiling, so a high ``--endpoint-concurrency`` on a
    machine with a low limit waits for a connection instead of failing with "Too many open
    files" in the middle of a run.
    """
    try:
        import resource
    except ImportError:  # Windows: no such limit to respect
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = taken + wanted + OPEN_FILES_RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - OPEN_FILES_RESERVE - taken))


def reserved(limiters: dict[str, EndpointLimiter], wanted: int) -> int:
    """How many more connections (at most ``wanted``) an automatic ceiling among ``limiters``
    may have, within open files and ``CONNECTIONS_MOST``."""
    taken = sum(limiter.ceiling for limiter in limiters.values())
    if taken >= CONNECTIONS_MOST:
        return 0
    return min(connections_allowed(wanted, taken), CONNECTIONS_MOST - taken)


DEFAULT_CACHE_BYTES = 256 * 2**20
"""In-memory score cache of the graph's default services: a server or notebook outlives any
run, so its cache forgets the least recently used entries beyond this (about 20,000 vectors
of 3,072 floats, far more than one question's chain)."""


@dataclass
class _LoopState:
    """What one event loop's questions share: services per settings, limiters per host."""

    services: dict[str, Services] = field(default_factory=dict)
    by_object: dict[int, tuple[Settings, Services]] = field(default_factory=dict)
    """``services`` by settings object, each kept alive so its id names it: every node call
    asks, and the key of ``services`` (the settings as JSON) costs more than the rest of
    the call (``Settings`` is frozen, so one object always has one key)."""
    limiters: dict[str, EndpointLimiter] = field(default_factory=dict)
    pools: dict[str, httpx2.AsyncClient] = field(default_factory=dict)
    """One HTTP connection pool per host, sized to its limiter's ceiling."""
    embedders: dict[tuple[object, ...], EmbeddingBatcher] = field(default_factory=dict)
    """One batcher per ``embedder_key``: every model under test's answers share requests."""


class OpenAIServices:
    """A ``ServicesFactory`` of OpenAI-compatible clients that owns what it builds.

    An instance owns, and ``aclose`` releases: the clients (built once per settings and event
    loop, as their pools are bound to the loop), the score caches (one per ``cache_path``, else
    one in memory bounded by ``cache_bytes``) and one endpoint limiter per host, shared by
    every settings object reaching it; where two ask for different limits, the lower ones hold
    (``EndpointLimiter.tighten``). Use it as ``async with OpenAIServices() as factory:`` or
    call ``aclose`` on the loop that ran the questions.

    ``transport`` picks the HTTP pools (``httpx`` needs no closing; ``aiohttp`` is cheaper per
    request and must be closed) and ``chat`` the chat clients: ``langchain`` (traced by LangSmith
    and Studio) or ``openai`` (``OpenAIChat``: the same request for less CPU, untraced).
    ``adaptive`` lets each endpoint's in-flight limit adapt below its ceiling (``services.limits``);
    off, the limit is the ceiling. ``share`` is how many processes of one run reach the same
    endpoints (``runner.workers``): each holds that share of every ceiling and rate, so together
    they never ask for more than one would, and their adaptive limits, each halving on its own 429s,
    settle at fair shares as TCP flows sharing a link do.
    """

    def __init__(
        self,
        transport: clients.Transport = "httpx",
        *,
        chat: clients.ChatKind = "langchain",
        cache_bytes: int | None = None,
        adaptive: bool = True,
        share: int = 1,
        ledger: UsageBook | None = None,
    ) -> None:
        self.transport = transport
        self.ledger = ledger
        self.share = max(1, share)
        self.chat = chat
        self.cache_bytes = cache_bytes
        self.adaptive = adaptive
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self._last: _LoopState | None = None
        self._caches: dict[Path | None, ScoreCache] = {}
        self._caches_lock = threading.Lock()

    async def __aenter__(self) -> OpenAIServices:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __call__(self, settings: Settings) -> Services:
        state = self._state()
        known = state.by_object.get(id(settings))
        if known is not None and known[0] is settings:
            return known[1]
        key = settings.model_dump_json()
        if key not in state.services:
            state.services[key] = self._build(state, settings)
        state.by_object[id(settings)] = (settings, state.services[key])
        return state.services[key]

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopState()
        self._last = state
        return state

    def cache(self, path: str | Path | None) -> ScoreCache:
        """This instance's score cache for ``path`` (None: the in-memory one)."""
        key = None if path is None else Path(path).resolve()
        with self._caches_lock:
            if key not in self._caches:
                self._caches[key] = ScoreCache(key, max_bytes=self.cache_bytes)
            return self._caches[key]

    def limiter(self, host: str, settings: Settings) -> EndpointLimiter:
        """The running loop's limiter of ``host``, tightened to ``settings``' limits."""
        limiters = self._state().limiters
        found = limiters.get(host)
        asked = settings.max_concurrency
        wanted = None if asked is None else max(1, asked // self.share)
        rate = settings.requests_per_minute
        rate = None if rate is None else rate / self.share
        taken = sum(limiter.ceiling for limiter in limiters.values())
        if found is None and wanted is None and self.adaptive:
            found = limiters[host] = EndpointLimiter(
                connections_allowed(INITIAL_LIMIT, taken),
                rate,
                reserve=functools.partial(reserved, limiters),
            )
        elif found is None:
            ceiling = connections_allowed(wanted or FIXED_CEILING, taken)
            found = limiters[host] = EndpointLimiter(ceiling, rate, adaptive=self.adaptive)
        else:
            found.tighten(None if wanted is None else connections_allowed(wanted, taken), rate)
        return found

    def endpoint_stats(self) -> dict[str, EndpointStats]:
        """Each endpoint's stats by host, of the running loop or else the last one used."""
        try:
            state = self._loops.get(asyncio.get_running_loop()) or self._last
        except RuntimeError:  # no running loop here (the live table's thread)
            state = self._last
        if state is None:
            return {}
        return {host: limiter.stats() for host, limiter in list(state.limiters.items())}

    def backlog(self) -> float:
        """Requests waiting for a slot at the running loop's busiest endpoint, in units
        of its limit (0: no request waits; 1: a whole limit's worth waits)."""
        state = self._loops.get(asyncio.get_running_loop())
        if state is None:
            return 0.0
        return max(
            (limiter.queued / max(1.0, limiter.limit) for limiter in state.limiters.values()),
            default=0.0,
        )

    def _build(self, state: _LoopState, settings: Settings) -> Services:
        hosts = {role: settings.endpoint(role).host for role in ROLES}
        services = Services(
            build={},
            cache=self.cache(settings.cache_path),
            limiters={role: self.limiter(hosts[role], settings) for role in ROLES},
            request_timeout=settings.request_timeout,
            max_retries=settings.max_retries,
            embedding_namespace=embedding_namespace(settings),
            refusals=RefusalWatch(settings, key_values(settings)),
            models={role: settings.endpoint(role).model for role in ("model", "judge")},
        )

        def pool(role: str) -> httpx2.AsyncClient:
            host = hosts[role]
            made = state.pools.get(host)
            if made is None:
                limiter = state.limiters[host]
                size = limiter.ceiling if limiter.reserve is None else CONNECTIONS_MOST
                made = state.pools[host] = clients.http_pool(settings, self.transport, size)
            services.pools.append(made)
            return made

        key = embedder_key(settings)
        if key in state.embedders:
            services._batcher = state.embedders[key]
        else:
            state.embedders[key] = services.embedder
        local = settings.embedding_model == LOCAL_EMBEDDING_MODEL
        book = self.ledger
        services.build.update(
            model=lambda: clients.model_under_test(settings, pool("model"), self.chat, book),
            judge=lambda: clients.judge(settings, pool("judge"), self.chat, book),
            embeddings=lambda: clients.embeddings(
                settings, None if local else pool("embeddings"), book
            ),
        )
        return services

    def forget(self) -> None:
        """Start again with empty score caches and no limiters, keeping the connection pools.

        For a process that reuses one instance across unrelated runs, such as a test session:
        a new server may be given an earlier one's port, and would otherwise find its cached
        scores and vectors, and the vector length learnt from them (a reply of another length
        is refused).
        """
        with self._caches_lock:
            caches, self._caches = list(self._caches.values()), {}
        for cache in caches:
            cache.close()
        for state in list(self._loops.values()):
            for services in state.services.values():
                services.forget()
            state.services.clear()
            state.by_object.clear()
            state.limiters.clear()
            state.embedders.clear()

    async def aclose(self) -> None:
        """Close the running loop's clients and every cache file this instance opened (the
        in-memory cache is kept for later runs; a cache file is opened again if a later run
        names it)."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None:
            for services in state.services.values():
                services.forget()
            for pool in state.pools.values():
                await pool.aclose()
        with self._caches_lock:
            files = [path for path in self._caches if path is not None]
            for path in files:
                self._caches.pop(path).close()


default_services = OpenAIServices(cache_bytes=DEFAULT_CACHE_BYTES)
"""The factory graphs use unless given another: httpx pools, nothing to close, a bounded
in-memory cache."""


shared_cache = OpenAIServices().cache
"""One ``ScoreCache`` per file and process, for test factories with no owner to close it."""


def with_policy(shared: Services, policy: ChatClient) -> Services:
    """``shared``'s judge, embeddings, cache and batcher, with ``policy`` as the model under
    test (the verifiers environments), on a limiter of its own: it never waits for a judge slot.
    """
    return Services(
        build={
            "model": lambda: policy,
            "judge": lambda: shared.judge,
            "embeddings": lambda: shared.embeddings,
        },
        cache=shared.cache,
        limiters={**shared.limiters, "model": EndpointLimiter(1, None)},
        models=dict(shared.models),
        _batcher=shared.embedder,
    )
