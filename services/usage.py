"""What every request actually cost, kept apart from the checkpoints: the usage ledger.

The answers' records say what each *recorded* answer cost. They cannot say what a run
spent: a call whose reply arrived just before a crash is made again after it, a 5xx is
retried, and neither leaves a trace in the state. The ledger does. Every chat request
writes one ``sent`` line before it goes out (so a request the server saw is counted
even when the process dies before the reply) and one ``usage`` line when its reply
arrives, with the tokens the provider reported and the dollars; embedding requests do
the same. Lines are appended with one ``write`` each to a file opened ``O_APPEND``: the
kernel holds them the moment the call returns, so a SIGKILL loses none, and a rerun
appends to the same file, so the run's totals are summed across its sessions.

The ledger also holds the run-wide budget (``max_cost``): once the dollars spent reach
it, ``exhausted`` turns true; the driver stops starting questions and ``decide`` stops
the ones in flight at their next turn (stop reason ``budget``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import LLMResult

from aidanbench.services.pricing import Price, PriceTable

LEDGER = "usage.jsonl"
"""The ledger's file name in a run directory."""


@dataclass(frozen=True)
class Usage:
    """The usage one reply reported."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    provider_cost: float | None = None
    """Dollars the provider reported for the call (OpenRouter's ``usage.cost``)."""

    def dollars(self, price: Price | None) -> float | None:
        """The provider's cost when reported, else ``price`` applied, else unknown."""
        if self.provider_cost is not None:
            return self.provider_cost
        if price is None:
            return None
        return price.dollars(self.input_tokens, self.cached_input_tokens, self.output_tokens)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _cost(raw: Any) -> float | None:
    cost = raw.get("cost") if isinstance(raw, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    return float(cost)


def reply_usage(message: AIMessage) -> Usage:
    """The usage of a chat reply: langchain's counts, and the provider's cost if any."""
    usage: dict[str, Any] = dict(message.usage_metadata or {})
    inputs = usage.get("input_token_details") or {}
    outputs = usage.get("output_token_details") or {}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        cached_input_tokens=_int(inputs.get("cache_read")),
        output_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=_int(outputs.get("reasoning")),
        provider_cost=_cost(message.response_metadata.get("token_usage")),
    )


def served_model(message: AIMessage) -> str | None:
    """The model the provider says served a chat reply (its ``model`` field), if named."""
    metadata = message.response_metadata
    served = metadata.get("model_name") or metadata.get("model")
    return str(served) if served else None


def usage_metadata(usage: Mapping[str, Any]) -> dict[str, Any]:
    """LangChain's ``usage_metadata`` of an OpenAI ``usage`` object, as langchain-openai
    maps it (``reply_usage`` reads it back); ``services.chat`` builds its replies with it."""
    inputs = usage.get("prompt_tokens_details") or {}
    outputs = usage.get("completion_tokens_details") or {}
    input_tokens = _int(usage.get("prompt_tokens"))
    output_tokens = _int(usage.get("completion_tokens"))
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": _int(usage.get("total_tokens")) or input_tokens + output_tokens,
        "input_token_details": {"cache_read": _int(inputs.get("cached_tokens"))},
        "output_token_details": {"reasoning": _int(outputs.get("reasoning_tokens"))},
    }


def raw_usage(raw: Any) -> Usage:
    """The usage of an OpenAI ``usage`` object or dict (embedding replies)."""
    if raw is not None and not isinstance(raw, dict):
        dump = getattr(raw, "model_dump", None)
        raw = dump() if callable(dump) else {}
    raw = raw or {}
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens")),
        cached_input_tokens=_int(details.get("cached_tokens")),
        output_tokens=_int(raw.get("completion_tokens")),
        provider_cost=_cost(raw),
    )


@dataclass
class Totals:
    """Sums over ledger lines; ``dollars`` is None once any priced line was unknown."""

    calls: int = 0
    replies: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    dollars: float | None = 0.0
    provider_cost_calls: int = 0

    def add(self, line: dict[str, Any]) -> None:
        """Count one ledger line."""
        if line.get("event") == "sent":
            self.calls += 1
            return
        self.replies += 1
        self.input_tokens += _int(line.get("input_tokens"))
        self.cached_input_tokens += _int(line.get("cached_input_tokens"))
        self.output_tokens += _int(line.get("output_tokens"))
        self.reasoning_tokens += _int(line.get("reasoning_tokens"))
        self.provider_cost_calls += int(line.get("provider_cost") is not None)
        cost = line.get("cost_usd")
        self.dollars = None if cost is None or self.dollars is None else self.dollars + cost

    def as_dict(self) -> dict[str, Any]:
        """The totals as written to ``metadata.json`` (``dollars`` null when unknown)."""
        return {
            "api_calls": self.calls,
            "replies": self.replies,
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "tokens": self.input_tokens + self.output_tokens,
            "dollars": self.dollars,
            "provider_cost_calls": self.provider_cost_calls,
        }


def read_ledger(path: Path) -> Iterator[dict[str, Any]]:
    """Every whole line of a ledger (a line cut by a crash is skipped)."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict):
            yield line


def summarise_ledger(path: Path) -> dict[str, Any]:
    """The run's totals as sent, overall, by role and model, and the look-ahead part.

    ``speculative`` counts the look-ahead generations (node ``generate_next``), kept
    apart; ``unpriced_models`` lists the models whose cost is unknown (the model that
    served, where the reply named one); ``served_models`` counts, per ``role:asked model``
    of the chat roles, the replies by the model the provider said served them.
    """
    overall, lookahead = Totals(), Totals()
    by_model: dict[str, Totals] = {}
    unpriced: set[str] = set()
    served: dict[str, dict[str, int]] = {}
    for line in read_ledger(path):
        overall.add(line)
        key = f"{line.get('role')}:{line.get('model')}"
        by_model.setdefault(key, Totals()).add(line)
        if line.get("node") == "generate_next":
            lookahead.add(line)
        if line.get("event") == "usage" and line.get("cost_usd") is None:
            unpriced.add(str(line.get("served_model") or line.get("model")))
        if line.get("event") == "usage" and line.get("role") != "embeddings":
            name = str(line.get("served_model") or "not reported")
            counts = served.setdefault(key, {})
            counts[name] = counts.get(name, 0) + 1
    return {
        **overall.as_dict(),
        "speculative": lookahead.as_dict(),
        "by_role_model": {key: totals.as_dict() for key, totals in sorted(by_model.items())},
        "unpriced_models": sorted(unpriced),
        "served_models": {key: dict(sorted(c.items())) for key, c in sorted(served.items())},
    }


@dataclass
class UsageLedger:
    """The append-only usage file of one run directory, and the run's budget."""

    path: Path
    max_cost: float | None = None
    """Dollars after which the run stops (None: no cap)."""
    spent: float = 0.0
    """Dollars of every priced line so far, this session's and earlier ones'."""
    _fd: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for line in read_ledger(self.path):
            if line.get("event") == "usage" and isinstance(line.get("cost_usd"), int | float):
                self.spent += float(line["cost_usd"])

    @property
    def exhausted(self) -> bool:
        """Whether the run's budget is spent."""
        return self.max_cost is not None and self.spent >= self.max_cost

    def write(self, line: dict[str, Any]) -> None:
        """Append one line (one ``write``: whole, or, cut by a crash, skipped on reading)."""
        data = (json.dumps({"t": round(time.time(), 3), **line}) + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, data)
            cost = line.get("cost_usd")
            if line.get("event") == "usage" and isinstance(cost, int | float):
                self.spent += float(cost)

    def sent(self, role: str, model: str, where: dict[str, Any]) -> None:
        """A request is about to go out."""
        self.write({"event": "sent", "role": role, "model": model, **where})

    def replied(
        self,
        role: str,
        model: str,
        usage: Usage,
        price: Price | None,
        where: dict[str, Any],
        *,
        served: str | None = None,
        batch: bool = False,
    ) -> None:
        """A reply arrived with this usage; ``price`` is the served model's
        (``PriceTable.served_price``), at batch prices for a ``batch`` call."""
        line: dict[str, Any] = {
            "event": "usage",
            "role": role,
            "model": model,
            **where,
            "served_model": served,
            "input_tokens": usage.input_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
            "output_tokens": usage.output_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "provider_cost": usage.provider_cost,
            "cost_usd": usage.dollars(price),
        }
        if batch:
            line["batch"] = True
        self.write(line)

    def close(self) -> None:
        """Close the file (a later write opens it again)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


_ledgers: dict[Path, UsageLedger] = {}
_ledgers_lock = threading.Lock()


def ledger(path: str | Path) -> UsageLedger:
    """The one ``UsageLedger`` of a file in this process."""
    key = Path(path).resolve()
    with _ledgers_lock:
        if key not in _ledgers:
            _ledgers[key] = UsageLedger(key)
        return _ledgers[key]


def forget_ledger(path: str | Path) -> None:
    """Close and drop the process's ledger of ``path`` (a run ended)."""
    with _ledgers_lock:
        found = _ledgers.pop(Path(path).resolve(), None)
    if found is not None:
        found.close()


def call_site(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The thread and node a request was made for, from LangGraph's run metadata."""
    metadata = metadata or {}
    return {"thread": metadata.get("thread_id"), "node": metadata.get("langgraph_node")}


class LedgerCallback(AsyncCallbackHandler):
    """Writes a chat client's every attempt to the ledger: ``sent``, then its ``usage``.

    Attached to the client itself, so each attempt of the retry layer is seen, and the
    thread and node come from the metadata LangGraph gives the call.
    """

    run_inline = True

    def __init__(self, ledger: UsageLedger, role: str, model: str, prices: PriceTable) -> None:
        self.ledger, self.role, self.model, self.prices = ledger, role, model, prices
        self._where: dict[UUID, dict[str, Any]] = {}

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        where = call_site(metadata)
        self._where[run_id] = where
        self.ledger.sent(self.role, self.model, where)

    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        where = self._where.pop(run_id, {})
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage):
                    usage = reply_usage(message)
                    if usage.provider_cost is None:
                        raw = (response.llm_output or {}).get("token_usage")
                        usage = replace(usage, provider_cost=_cost(raw))
                    served = served_model(message)
                    price = self.prices.served_price(self.model, served)
                    self.ledger.replied(self.role, self.model, usage, price, where, served=served)
                    return

    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._where.pop(run_id, None)


@dataclass
class EmbeddingUsage:
    """Records an embeddings client's requests in the ledger (a batch serves many
    questions, so these lines name no thread)."""

    ledger: UsageLedger
    model: str
    price: Price | None

    def sent(self) -> None:
        """A request is about to go out."""
        self.ledger.sent("embeddings", self.model, {"thread": None, "node": None})

    def replied(self, raw: Any) -> None:
        """Its reply arrived, with this ``usage`` object."""
        where = {"thread": None, "node": None}
        self.ledger.replied("embeddings", self.model, raw_usage(raw), self.price, where)
