"""OpenAI-compatible clients for the three roles, built from settings.

Keys are read from the environment variables the settings name, here and nowhere else; they go
straight into the client and are never stored in state, results or messages. Every client has a
request timeout (langchain-openai sends none by default) and makes one attempt per call: the one
retry layer is ``services.retry``.

Each host gets an HTTP connection pool of its own, made on the running event loop
(``services.registry``): langchain-openai's own pool per base URL, made on one event loop,
fails ("Event loop is closed") when a second ``asyncio.run`` reaches the same endpoint.

``httpx`` pools need no closing, so they suit a graph whose lifetime nobody manages (Studio, a
notebook, a parent agent). ``aiohttp`` costs less CPU per request (httpx's pool checks every idle
connection on each request; docs/performance.md), what a long run spends its CPU on; its sessions
must be closed, so the command line, which owns its run, uses it, and ``OpenAIChat`` for the
same reason.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from functools import cache, partial
from typing import Literal

import httpx2
import openai
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import SecretStr

from aidanbench.core.errors import ConfigError
from aidanbench.core.settings import ROLES, Settings
from aidanbench.record.usage import UsageBook
from aidanbench.services.chat import OpenAIChat
from aidanbench.services.direct_post import DirectPost
from aidanbench.services.embeddings import OpenAICompatibleEmbeddings
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import LedgerCallback, RoleLedger


def api_key(variable: str, role: str) -> SecretStr:
    """The key in ``variable``; a ``ConfigError`` naming the variable when it is unset."""
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(f"environment variable {variable} (API key of the {role}) is not set")
    return SecretStr(value)


def check_keys(settings: Settings, roles: Sequence[str] = ROLES) -> None:
    """A ``ConfigError`` naming the first of ``roles`` whose key variable is unset: what a run
    checks before anything starts."""
    for endpoint in settings.endpoints():
        if endpoint.role in roles and not endpoint.local:
            api_key(endpoint.key_env, endpoint.role)


Transport = Literal["httpx", "aiohttp"]
"""The HTTP transport under the OpenAI client (see the module docstring)."""

ChatKind = Literal["langchain", "openai"]
"""``langchain``: ``ChatOpenAI``, traced by LangSmith and Studio; ``openai``: ``OpenAIChat``,
the same request for less CPU, untraced."""

RUN_TRANSPORT: Transport = "aiohttp"
RUN_CHAT: ChatKind = "openai"
"""The clients of a run that owns them from start to end (the run engine, ``rescore
--judge-model``); graphs embedded anywhere else keep httpx and the traced ``ChatOpenAI``. The
second chat client saves CPU per turn where a run is CPU-bound (docs/performance.md)."""


@cache
def tls_context() -> ssl.SSLContext:
    """The certificates every client verifies against, loaded once per process, not per client."""
    return httpx2.create_ssl_context()


def http_pool(settings: Settings, transport: Transport, size: int) -> httpx2.AsyncClient:
    """A connection pool of ``size`` connections (the host limiter's ceiling)."""
    make = openai.DefaultAioHttpClient if transport == "aiohttp" else openai.DefaultAsyncHttpxClient
    return make(
        timeout=settings.request_timeout,
        limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size),
        verify=tls_context(),
    )


def role_ledger(
    settings: Settings, book: UsageBook | None, role: str, model: str, name: str
) -> RoleLedger | None:
    """Where a role's client records its requests in ``book``: under ``name`` (a variant's
    ``NAME@LABEL``), priced as ``model``, the name sent."""
    if book is None:
        return None
    return RoleLedger(book, role, name, price_table(settings.prices_path), model)


def openai_client(
    base_url: str | None, key: SecretStr, settings: Settings, pool: httpx2.AsyncClient | None
) -> openai.AsyncOpenAI:
    """An OpenAI client making one attempt per call (``services.retry`` retries)."""
    return openai.AsyncOpenAI(
        api_key=key.get_secret_value(),
        base_url=base_url,
        timeout=settings.request_timeout,
        max_retries=0,
        http_client=pool,
    )


def chat_client(
    settings: Settings,
    pool: httpx2.AsyncClient,
    kind: ChatKind = "langchain",
    book: UsageBook | None = None,
    *,
    role: str,
) -> BaseChatModel | OpenAIChat:
    """One chat role's client of ``kind``, writing to the usage ledger ``book`` when one is kept.
    The model under test sends its temperature and extra request fields and its lines carry the
    row's name; the judge sends no temperature unless one is set."""
    endpoint = settings.endpoint(role)
    base_url, model = endpoint.base_url, endpoint.model
    key = api_key(endpoint.key_env, role)
    temperature, extra_body, name = settings.judge_temperature, None, model
    if role == "model":
        temperature, extra_body = settings.temperature, settings.request_fields or None
        name = settings.model
    record = role_ledger(settings, book, role, model, name)
    if kind == "openai":
        client = openai_client(base_url, key, settings, pool)
        direct = DirectPost.of(client, pool)
        return OpenAIChat(client, model, temperature, extra_body, record, direct)
    # imported here: slow to load, and unused by the command line
    from aidanbench.services.langchain_chat import ReasoningChatOpenAI

    callbacks: list[BaseCallbackHandler] | None = None
    if record is not None:
        callbacks = [LedgerCallback(record, extra_body)]
    return ReasoningChatOpenAI(
        callbacks=callbacks,
        model=model,
        base_url=base_url,
        api_key=key,
        temperature=temperature,
        timeout=settings.request_timeout,
        max_retries=0,
        extra_body=extra_body,
        http_async_client=pool,
        http_client=httpx2.Client(verify=tls_context()),  # unused; saves building one
    )


model_under_test = partial(chat_client, role="model")
"""Chat client of the model under test (``chat_client``)."""

judge = partial(chat_client, role="judge")
"""Chat client of the judge (``chat_client``)."""


def embeddings(
    settings: Settings, pool: httpx2.AsyncClient | None, book: UsageBook | None = None
) -> Embeddings:
    """Embedding client; ``local`` loads all-MiniLM-L6-v2 on this machine (no ``pool``)."""
    endpoint = settings.endpoint("embeddings")
    if endpoint.local:
        from aidanbench.services.local_embeddings import local_embeddings

        return local_embeddings()
    key = api_key(endpoint.key_env, "embeddings")
    client = openai_client(endpoint.base_url, key, settings, pool)
    model = settings.embedding_model
    usage = role_ledger(settings, book, "embeddings", model, model)
    direct = DirectPost.of(client, pool)
    return OpenAICompatibleEmbeddings(client, settings.embedding_model, usage, direct)
