"""What nodes call: clients for the three roles, the score cache and endpoint limits.

Nodes never build clients (building one blocks the event loop); they get a ``Services`` from a
factory the graph builder was given, which callers embedding the graph can replace. Names are
imported on first use (PEP 562), so a light module's import does not build the client stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aidanbench.services.limits import EndpointStats
    from aidanbench.services.registry import (
        DEFAULT_CACHE_BYTES,
        ROLES,
        OpenAIServices,
        Services,
        ServicesFactory,
        default_services,
        embedding_namespace,
        judge_namespace,
        key_values,
        repaired,
        shared_cache,
        with_policy,
    )

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "ROLES",
    "EndpointStats",
    "OpenAIServices",
    "Services",
    "ServicesFactory",
    "default_services",
    "embedding_namespace",
    "judge_namespace",
    "key_values",
    "repaired",
    "shared_cache",
    "with_policy",
]

_HOME = {"EndpointStats": "aidanbench.services.limits"}
"""Exported names that live outside ``services.registry``."""


def __getattr__(name: str) -> Any:
    """Import an exported name from its module on first access."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _HOME.get(name, "aidanbench.services.registry")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
