"""When models stop being served: the bundled, dated table of known shutdowns.

A model that has been shut down is no longer listed by ``GET /v1/models``, and a request to it
gets the same 404 as a typo. ``shutdowns.json`` (OpenAI's deprecations page, as of its ``date``)
keeps the dates, so a preflight can say "shut down on DATE" and warn before a listed model goes
away. A dated snapshot shares its model's date.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

BUNDLED = "shutdowns.json"
"""The bundled table's file name inside ``aidanbench.services``."""

SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{4})(?:-preview)?$")
"""The suffix of a dated snapshot of a model."""


@dataclass(frozen=True)
class Shutdowns:
    """Known shutdown dates of one provider's models, with where they come from."""

    models: Mapping[str, datetime.date]
    provider: str
    host: str
    """The provider's API host, the endpoint the dates are about."""
    source: str
    as_of: str

    def date_of(self, model: str) -> datetime.date | None:
        """The shutdown date of ``model`` or of the model it is a dated snapshot of."""
        found = self.models.get(model)
        if found is None:
            found = self.models.get(SNAPSHOT.sub("", model))
        return found

    def serves(self, host: str) -> bool:
        """Whether ``host`` is the provider's own API (the dates are about it alone)."""
        return host == self.host


@functools.cache
def known_shutdowns() -> Shutdowns:
    """The bundled table (read once)."""
    text = resources.files("aidanbench.services").joinpath(BUNDLED).read_text("utf-8")
    data = json.loads(text)
    return Shutdowns(
        models={name: parse_date(day) for name, day in data["models"].items()},
        provider=data["provider"],
        host=data["host"],
        source=data["source"],
        as_of=data["date"],
    )


def parse_date(text: str) -> datetime.date:
    """A ``YYYY-MM-DD`` date (``ValueError`` otherwise)."""
    return datetime.date.fromisoformat(text)
