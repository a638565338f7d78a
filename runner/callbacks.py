"""LangChain's chain-run ends, skipped at once when no callback handler listens.

LangGraph reports every node's run to LangChain's callback managers, and
``AsyncCallbackManagerForChainRun.on_chain_end`` and ``on_chain_error`` are ``shielded``: each
call makes a task and a shield around it (so handlers finish even when the caller is
cancelled) before it looks whether there is a handler at all. A run of the command has none,
so every node of every turn made a task for nobody (docs/performance.md, "CPU per turn").
``quiet_chain_ends`` wraps both so a run manager without handlers returns at once; with
handlers (LangSmith, Studio, a test's recorder) LangChain's own shielded call runs as before.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.callbacks.manager import AsyncCallbackManagerForChainRun

QUIET = "_aidanbench_quiet"
"""Marks a wrapped method, so installing twice wraps once."""


def quiet_chain_ends() -> None:
    """Install the wrappers on ``AsyncCallbackManagerForChainRun`` (once per process)."""
    for name in ("on_chain_end", "on_chain_error"):
        shielded = getattr(AsyncCallbackManagerForChainRun, name)
        if not getattr(shielded, QUIET, False):
            setattr(AsyncCallbackManagerForChainRun, name, _quiet(shielded))


def _quiet(
    shielded: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    @functools.wraps(shielded)
    async def quiet(self: AsyncCallbackManagerForChainRun, *args: Any, **kwargs: Any) -> None:
        if self.handlers:
            await shielded(self, *args, **kwargs)

    setattr(quiet, QUIET, True)
    return quiet
