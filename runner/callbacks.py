"""LangChain's run reports, skipped at once when no callback handler listens.

LangGraph reports every node's run to LangChain's callback managers, and
``AsyncCallbackManagerForChainRun.on_chain_end`` and ``on_chain_error`` are ``shielded``: each
call makes a task and a shield around it (so handlers finish even when the caller is
cancelled) before it looks whether there is a handler at all. A run of the command has none,
so every node of every turn made a task for nobody (docs/performance.md, "CPU per turn").
``quiet_chain_ends`` wraps both so a run manager without handlers returns at once; with
handlers (LangSmith, Studio, a test's recorder) LangChain's own shielded call runs as before.

``quiet_node_runs`` does the same for the run each node is: LangGraph's ``RunnableSeq`` (the
node, then its channel writers) configures a callback manager (merging the config's metadata
and tags), starts a run, makes a child manager and a config for each step, and awaits the
node in a task of its own made to hold that config, all for nobody when no handler listens.
Unheard, the node is awaited on the task LangGraph made for it, with its config set as the
one ``langgraph.config.get_config`` returns (what that task would hold), and its writers
after it; heard, LangGraph's own ``ainvoke`` runs.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.callbacks.manager import AsyncCallbackManagerForChainRun
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph._internal._runnable import RunnableSeq

from aidanbench.nodes.routing import listening

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


def quiet_node_runs() -> None:
    """Install the wrapper on LangGraph's ``RunnableSeq.ainvoke`` (once per process)."""
    traced = RunnableSeq.ainvoke
    if not getattr(traced, QUIET, False):
        RunnableSeq.ainvoke = _quiet_sequence(traced)  # type: ignore[method-assign, assignment]


def _quiet_sequence(traced: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(traced)
    async def ainvoke(
        self: RunnableSeq, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        if config is None or listening(config):
            return await traced(self, input, config, **kwargs)
        config.pop("run_id", None)  # the run it names is not started: nobody hears it
        first, *writers = self.steps
        token = var_child_runnable_config.set(config)
        try:
            output = await first.ainvoke(input, config, **kwargs)
        finally:
            var_child_runnable_config.reset(token)
        for writer in writers:
            output = await writer.ainvoke(output, config)
        return output

    setattr(ainvoke, QUIET, True)
    return ainvoke
