"""Checks before a run writes anything: is every role's model there, and does it answer?

A mistyped model, a retired one or a refused key would otherwise be found out question by
question. Before the run directory is touched, every distinct endpoint of the session is
asked once for ``GET /models``:

* no answer: unreachable, one line naming the flags that set each role's URL;
* 401 or 403: each role gets its minimal request instead, since some gateways refuse the
  list to keys that may use their models; a key refused there too is one line naming its
  variable, else a warning;
* a model list: a listed model whose ``shutdown_date`` is past is refused; one before the
  run's likely end (``LIKELY_RUN_DAYS``) is a warning.

A model the list does not name, or an endpoint without a list (many OpenAI-compatible
servers list only some models, or none), gets one minimal request (``services.
endpoint_check``): 404 is unknown, 401/403 a refused key, any other failure a warning. On
OpenAI's own API a model past its shutdown date in the bundled table (``services.
lifecycle``) is refused without a request: OpenAI stops listing a model once it is shut down.

Everything is asked concurrently and bounded (``LIST_LIMIT_S``, then ``ASK_LIMIT_S``). The
minimal requests cost tokens: they are written to the usage ledger once the run goes ahead
(``Preflight.record``); a refused run writes nothing, so their cost is then not recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import difflib
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aidanbench.core.base_url import BASE_URL_VARIABLE
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import ROLE_NAMES, Endpoint, Settings, role_flag
from aidanbench.record.usage import UsageBook
from aidanbench.services.endpoint_check import (
    PROBE_MAX_TOKENS,
    PROBE_MESSAGE,
    PROBE_TEXT,
    Answer,
    endpoint_client,
    list_models,
    listed_models,
    minimal_chat,
    minimal_embeddings,
)
from aidanbench.services.lifecycle import Shutdowns, known_shutdowns, parse_date
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import bound, prompt_tokens, raw_usage, usage_line

if TYPE_CHECKING:
    import openai

LIST_LIMIT_S = 4.0
"""Seconds ``GET /models`` may take, all of it."""

ASK_LIMIT_S = 5.0
"""Seconds one minimal request may take, all of it."""

LIKELY_RUN_DAYS = 30
"""How far ahead a shutdown date is warned of: a campaign grows and resumes one run directory
over weeks, and a model gone in that window leaves it impossible to finish or grow."""

Flag = Callable[[str, Literal["model", "base_url", "api_key_env"]], str]
"""Names what sets a role's model, base URL or key variable (``core.settings.role_flag``)."""

BENCHMARK_JUDGE = Settings.model_fields["judge_model"].default
"""The benchmark's own judge, the one the published scores used."""


def roles_of(settings: Iterable[Settings]) -> list[Endpoint]:
    """Every distinct remote role endpoint (a judge panel's included), with the URL it reaches."""
    found: dict[Endpoint, None] = {}
    for s in settings:
        for endpoint in s.endpoints():
            if not endpoint.local:
                found[dataclasses.replace(endpoint, base_url=endpoint.url)] = None
    return list(found)


def request_kind(endpoint: Endpoint) -> Literal["chat", "embeddings"]:
    """Which minimal request the role's model answers."""
    return "embeddings" if endpoint.role == "embeddings" else "chat"


@dataclass
class Preflight:
    """What the checks found: warnings to print and the requests they cost."""

    warnings: list[str] = field(default_factory=list)
    asked: dict[Endpoint, Answer] = field(default_factory=dict)
    """Each minimal request sent, by role, to be written to the usage ledger."""

    def record(self, ledger: UsageBook, prices_path: str | None) -> None:
        """Write every minimal request to the usage ledger (node ``preflight``)."""
        table = price_table(prices_path)
        for endpoint, answer in self.asked.items():
            where = {"thread": None, "node": "preflight"}
            role, model = endpoint.role, endpoint.model
            chat = request_kind(endpoint) == "chat"
            prompt = PROBE_MESSAGE if chat else PROBE_TEXT
            tokens, most = prompt_tokens(prompt), PROBE_MAX_TOKENS if chat else 0
            request = ledger.sent(
                role,
                model,
                where,
                input_tokens=tokens,
                output_tokens=most,
                bound_usd=bound(table.price(model), tokens, most),
            )
            if not answer.ok:
                ledger.failed(role, model, request, answer.status)
                continue
            payload = answer.payload if isinstance(answer.payload, dict) else {}
            served = payload.get("model") if chat else None
            served = str(served) if served else None
            usage = raw_usage(payload.get("usage"))
            if not chat and usage.input_tokens is not None:  # an embedding has no output
                usage = dataclasses.replace(usage, output_tokens=0)
            ledger.write(
                usage_line(
                    role,
                    model,
                    usage,
                    table.served_price(model, served),
                    where,
                    served=served,
                    request=request,
                    prompt=prompt,
                    reply=probe_reply(payload) if chat else "",
                )
            )


def probe_reply(payload: dict[str, Any]) -> str:
    """The text of a minimal chat request's reply ("" when it has none)."""
    choices = payload.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


@dataclass
class _Server:
    """The roles reaching one endpoint with one key, and what it answered."""

    base_url: str
    key: str = field(repr=False)
    roles: list[Endpoint] = field(default_factory=list)
    listing: Answer | None = None
    models: dict[str, str | None] | None = None
    asked: dict[Endpoint, Answer] = field(default_factory=dict)


async def check(
    settings: Sequence[Settings],
    *,
    sources: dict[str, str] | None = None,
    flag: Flag = role_flag,
    keys: Mapping[str, str] = os.environ,
) -> Preflight:
    """Check every role of ``settings`` (module docstring): ``UsageError`` for the first
    refusal (model under test, judge, embeddings), warnings to stderr. ``sources`` says
    where each role's URL came from (``core.base_url.environment_base_urls``); ``flag``
    names what sets a role's model, URL or key variable where the user typed it (the seed's
    ``vf-eval`` has its own).
    """
    today = datetime.date.today()
    endpoints: dict[tuple[str, str], _Server] = {}
    for role in roles_of(settings):
        key = (role.url, role.key_env)
        endpoints.setdefault(key, _Server(role.url, keys.get(role.key_env, ""))).roles.append(role)
    table = known_shutdowns()
    await asyncio.gather(*(_look(endpoint, table, today) for endpoint in endpoints.values()))
    result = Preflight()
    refusals: list[tuple[int, str]] = []
    for endpoint in endpoints.values():
        result.asked |= endpoint.asked
        refusals += _verdicts(endpoint, table, today, sources or {}, result, flag)
    if refusals:
        raise UsageError(min(refusals)[1])
    for line in result.warnings:
        print(line, file=sys.stderr)
    return result


async def _look(endpoint: _Server, table: Shutdowns, today: datetime.date) -> None:
    client = endpoint_client(endpoint.base_url, endpoint.key, max(LIST_LIMIT_S, ASK_LIMIT_S))
    try:
        endpoint.listing = await list_models(client, LIST_LIMIT_S)
        if endpoint.listing.status is None:
            return
        endpoint.models = listed_models(endpoint.listing.payload) if endpoint.listing.ok else None
        unlisted = [
            role
            for role in endpoint.roles
            if role.model not in (endpoint.models or {})
            and not _retired_at_provider(role, table, today)
        ]
        answers = await asyncio.gather(*(_ask(client, role, table) for role in unlisted))
        endpoint.asked = dict(zip(unlisted, answers, strict=True))
    finally:
        await client.close()


async def _ask(client: openai.AsyncOpenAI, role: Endpoint, table: Shutdowns) -> Answer:
    if request_kind(role) == "embeddings":
        return await minimal_embeddings(client, role.model, ASK_LIMIT_S)
    return await minimal_chat(client, role.model, ASK_LIMIT_S, openai_api=table.serves(role.host))


def _retired_at_provider(role: Endpoint, table: Shutdowns, today: datetime.date) -> bool:
    """A model shut down by the provider's table, on the provider's own API."""
    shutdown = table.date_of(role.model)
    return table.serves(role.host) and shutdown is not None and shutdown <= today


def _verdicts(
    endpoint: _Server,
    table: Shutdowns,
    today: datetime.date,
    sources: dict[str, str],
    result: Preflight,
    flag: Flag,
) -> list[tuple[int, str]]:
    """The refusals of one endpoint, with their role's order; warnings go to ``result``."""
    order = {role: ("model", "judge", "embeddings").index(role.role) for role in endpoint.roles}
    listing = endpoint.listing
    assert listing is not None
    if listing.status is None:
        first = min(endpoint.roles, key=lambda r: order[r])
        return [(order[first], unreachable_line(endpoint.roles, listing, sources, flag))]
    if listing.status in (401, 403):
        asked = endpoint.asked
        refused = [role for role in asked if asked[role].status in (401, 403)]
        if refused:
            first = min(refused, key=lambda r: order[r])
            return [(order[first], key_refused_line(endpoint.roles, endpoint.asked[first], flag))]
        result.warnings.append(list_refused_line(endpoint, listing))
    refusals: list[tuple[int, str]] = []
    for role in endpoint.roles:
        line = _verdict(role, endpoint, table, today, result, flag)
        if line is not None:
            refusals.append((order[role], line))
    return refusals


def _verdict(
    role: Endpoint,
    endpoint: _Server,
    table: Shutdowns,
    today: datetime.date,
    result: Preflight,
    flag: Flag,
) -> str | None:
    """One role's refusal line, or None (a warning may be added to ``result``)."""
    listed = endpoint.models or {}
    provider_date = table.date_of(role.model) if table.serves(role.host) else None
    if role.model in listed:
        shutdown = _date(listed[role.model]) or provider_date
        if shutdown is not None and shutdown <= today:
            return retired_line(role, shutdown, f"{role.host} lists it as shut down", flag)
        _warn_soon(role, shutdown, today, result)
        return None
    if provider_date is not None and provider_date <= today:
        return retired_line(role, provider_date, f"{table.provider}'s deprecations page", flag)
    answer = endpoint.asked[role]
    if answer.ok:
        _warn_soon(role, provider_date, today, result)
        return None
    if answer.status == 404:
        return unknown_line(role, answer, list(listed), table, flag)
    if answer.status in (401, 403):
        return key_refused_line([role], answer, flag)
    what = f"HTTP {answer.status}" if answer.status is not None else answer.message
    detail = f": {answer.message}" if answer.status is not None and answer.message else ""
    result.warnings.append(
        f"warning: {ROLE_NAMES[role.role]} {printable(role.model)} at {role.host} was not checked "
        f"(a one-line request got {printable(what + detail)}); the run goes on"
    )
    return None


def _date(text: str | None) -> datetime.date | None:
    if text is None:
        return None
    try:
        return parse_date(text)
    except ValueError:
        return None


def _warn_soon(
    role: Endpoint, shutdown: datetime.date | None, today: datetime.date, result: Preflight
) -> None:
    if shutdown is None or shutdown > today + datetime.timedelta(days=LIKELY_RUN_DAYS):
        return
    days = (shutdown - today).days
    result.warnings.append(
        f"warning: {ROLE_NAMES[role.role]} {printable(role.model)} at {role.host} shuts down on "
        f"{shutdown.isoformat()}, in {days} day{'s' if days != 1 else ''}: a run directory "
        "still growing or resuming then cannot finish it with this model"
    )


def _roles_text(roles: Sequence[Endpoint]) -> str:
    names = list(dict.fromkeys(ROLE_NAMES[r.role] for r in roles))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def successor_hint(role: Endpoint, flag: Flag) -> str:
    """What to do about a judge, embedding or model that cannot be used."""
    if role.role == "judge":
        return (
            f"choose a successor with {flag('judge', 'model')} and calibrate its threshold "
            "with aidanbench calibrate --judge-model M"
        )
    return f"choose another with {flag(role.role, 'model')}"


def retired_line(role: Endpoint, shutdown: datetime.date, source: str, flag: Flag) -> str:
    """The refusal of a model past its shutdown date."""
    if role.role == "judge" and role.model == BENCHMARK_JUDGE:
        return (
            f"the judge {role.model}, the benchmark's own (the published scores used it), was "
            f"shut down on {shutdown.isoformat()} ({source}): {successor_hint(role, flag)}"
        )
    return (
        f"the {ROLE_NAMES[role.role]} {printable(role.model)} at {role.host} was shut down on "
        f"{shutdown.isoformat()} ({source}): {successor_hint(role, flag)}"
    )


def unknown_line(
    role: Endpoint, answer: Answer, listed: Sequence[str], table: Shutdowns, flag: Flag
) -> str:
    """The refusal of a model the endpoint does not serve (404)."""
    said = f"HTTP 404 {answer.code}" if answer.code else "HTTP 404"
    if answer.message:
        said += f": {answer.message}"
    if answer.code != "model_not_found" and "model" not in answer.message.lower():
        return (
            f"the {ROLE_NAMES[role.role]} endpoint {role.host} answered a one-line request "
            f"with {printable(said)}: check {flag(role.role, 'base_url')} (an "
            "OpenAI-compatible base URL usually ends in /v1)"
        )
    close = difflib.get_close_matches(role.model, listed, n=3, cutoff=0.6)
    hints = []
    if close:
        hints.append(f"close names it lists: {', '.join(printable(m) for m in close)}")
    retired = table.date_of(role.model.removeprefix("openai/"))
    if retired is not None:
        hints.append(f"{table.provider} shut {printable(role.model)} down on {retired.isoformat()}")
    if role.role == "judge" and role.model == BENCHMARK_JUDGE:
        hints.append("it is the benchmark's own judge: the published scores used it")
    extra = f" ({'; '.join(hints)})" if hints else ""
    return (
        f"the {ROLE_NAMES[role.role]} {printable(role.model)} is unknown at {role.host} "
        f"({printable(said)}){extra}: {successor_hint(role, flag)}"
    )


def key_refused_line(roles: Sequence[Endpoint], answer: Answer, flag: Flag) -> str:
    """The refusal of a key (401, 403), naming the variable that holds it."""
    role = roles[0]
    said = f"HTTP {answer.status}" + (f": {answer.message}" if answer.message else "")
    return (
        f"the {_roles_text(roles)} endpoint {role.host} refused the key in {role.key_env} "
        f"({printable(said)}): put a valid key in {role.key_env}, or name another variable "
        f"with {flag(role.role, 'api_key_env')}"
    )


def list_refused_line(endpoint: _Server, listing: Answer) -> str:
    """The warning of an endpoint that refused its model list but took the key."""
    said = f"HTTP {listing.status}" + (f": {listing.message}" if listing.message else "")
    return (
        f"warning: {endpoint.roles[0].host} refused its model list ({printable(said)}) but "
        f"took the key in {endpoint.roles[0].key_env}: its models were checked with one "
        "request each"
    )


def unreachable_line(
    roles: Sequence[Endpoint], answer: Answer, sources: dict[str, str], flag: Flag
) -> str:
    """The refusal of an endpoint that does not answer, naming what sets its URL."""
    flags = []
    for role in roles:
        source = sources.get(role.role)
        flags.append(flag(role.role, "base_url") + (f" (here {source})" if source else ""))
    return (
        f"cannot reach the {_roles_text(roles)} endpoint {roles[0].host} "
        f"({printable(answer.message)}): check its URL ({', '.join(dict.fromkeys(flags))}; "
        f"{BASE_URL_VARIABLE} sets every role given none) and that the server is running"
    )
