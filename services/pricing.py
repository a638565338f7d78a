"""Dollars from tokens: the bundled, dated price table and the files that override it.

A price is per million tokens, in US dollars: ``input``, ``cached_input`` (``null`` when no
discount is known: cached tokens then cost the input price) and ``output`` (reasoning tokens
are output tokens, as every provider bills them). ``--prices FILE`` replaces the bundled price
of every model it names.

A model with no price has an *unknown* cost (``None``), never 0, so a total is only a number
when every part of it is. A cost the provider reported (OpenRouter's ``usage.cost``) wins.

A call is priced as the model that *served* it, not the one asked for: a provider that
substitutes another model bills that model. But OpenAI answers an alias (``gpt-4o-mini``) with
the dated snapshot it routed to, and a snapshot the table does not list is priced as its alias
(``same_model``). Any other served name absent from the table is unknown.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

BUNDLED = "prices.json"
"""The bundled table's file name inside ``aidanbench.services``."""

PER = 1_000_000
"""Prices are per this many tokens."""

BATCH_DISCOUNT = 0.5
"""What a batch API call costs as a share of the list price (OpenAI, OpenRouter: half)."""

_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
"""A dated snapshot's suffix: ``-2024-07-18`` (OpenAI), ``-20241022``, ``-0125``."""


def same_model(asked: str, served: str | None) -> bool:
    """Whether ``served`` is the model asked for: the same name or a dated snapshot of it, a
    provider prefix (``openai/``) set aside. A reply naming no model served the one asked."""
    if served is None or served == asked:
        return True
    plain_asked, plain_served = asked.rsplit("/", 1)[-1], served.rsplit("/", 1)[-1]
    if plain_served == plain_asked:
        return True
    return _SNAPSHOT.sub("", plain_served) == plain_asked


class PriceFileError(ValueError):
    """A prices file that cannot be read or has the wrong shape (one line, for stderr)."""


@dataclass(frozen=True)
class Price:
    """One model's price in dollars per million tokens."""

    input: float
    cached_input: float | None
    output: float

    def dollars(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float:
        """What these tokens cost; cached tokens are part of ``input_tokens``."""
        cached = min(max(cached_input_tokens, 0), input_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        fresh = input_tokens - cached
        return (fresh * self.input + cached * cached_rate + output_tokens * self.output) / PER

    def batch(self) -> Price:
        """The price of the same call through a batch API (``BATCH_DISCOUNT``)."""
        cached = None if self.cached_input is None else self.cached_input * BATCH_DISCOUNT
        return Price(self.input * BATCH_DISCOUNT, cached, self.output * BATCH_DISCOUNT)


@dataclass(frozen=True)
class PriceTable:
    """Prices by model id, with the provenance a report prints."""

    models: Mapping[str, Price]
    date: str | None
    source: str

    def price(self, model: str | None) -> Price | None:
        """The model's price, or None when it has none (its cost is unknown)."""
        return None if model is None else self.models.get(model)

    def served_price(self, asked: str, served: str | None) -> Price | None:
        """The price of a call asked of ``asked`` and served by ``served`` (module docstring)."""
        if served is not None and served in self.models:
            return self.models[served]
        return self.models.get(asked) if same_model(asked, served) else None

    def describe(self) -> dict[str, Any]:
        """Provenance for ``metadata.json``: date, source and how many models."""
        return {"date": self.date, "source": self.source, "models": len(self.models)}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PriceFileError(f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def parse_prices(data: Any, origin: str) -> dict[str, Price]:
    """The ``models`` of a price document, checked; ``PriceFileError`` naming the fault."""
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise PriceFileError(f'{origin}: expected an object with a "models" object')
    out: dict[str, Price] = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or not {"input", "output"} <= set(entry):
            raise PriceFileError(f'{origin}: {name!r} needs "input" and "output" prices')
        cached = entry.get("cached_input")
        where = f"{origin}: {name}"
        out[name] = Price(
            input=_number(entry["input"], f"{where}.input"),
            cached_input=None if cached is None else _number(cached, f"{where}.cached_input"),
            output=_number(entry["output"], f"{origin}: {name}.output"),
        )
    return out


_tables: dict[str | None, PriceTable] = {}
_lock = threading.Lock()


def price_table(override: str | Path | None = None) -> PriceTable:
    """The bundled table with ``override``'s models replacing theirs (read once per file)."""
    key = None if override is None else str(Path(override).resolve())
    with _lock:
        if key in _tables:
            return _tables[key]
    text = resources.files("aidanbench.services").joinpath(BUNDLED).read_text("utf-8")
    bundled = json.loads(text)
    models = parse_prices(bundled, BUNDLED)
    source = f"bundled list prices of {bundled.get('date')}"
    date = bundled.get("date")
    if override is not None:
        try:
            data = json.loads(Path(override).read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PriceFileError(f"--prices {override}: {type(exc).__name__}: {exc}") from None
        models |= parse_prices(data, f"--prices {override}")
        date = data.get("date", date) if isinstance(data, dict) else date
        source += f", overridden by {Path(override).name}"
    table = PriceTable(models=models, date=date, source=source)
    with _lock:
        _tables[key] = table
    return table
