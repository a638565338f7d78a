"""What runs next: one rule, and one router per source node with its own destinations.

The next steps follow from state alone (``next_steps``), so resuming after an error re-runs
exactly the missing work. Each source gets a router whose ``destinations`` are only the
steps the rule can give after it, so the compiled graph (what Studio draws) has exactly the
possible edges:

- after ``prepare`` anything can follow: it runs on whatever state a thread holds (new,
  finished, stopped by an error with some outcomes kept, or paused before ``decide``);
- after ``generate`` there is a candidate and no stop reason: score it, look ahead, or
  decide at once when the generation failed; never ``generate`` again or the end;
- after ``decide`` either the question stopped, or the outcomes are cleared and the
  look-ahead (if any) became the candidate: never ``decide`` again.

A router that meets a step its source cannot lead to raises, naming it: that state is a
bug, not something to route around.

The graph gets the plain routers through ``on_event_loop``: LangGraph runs a plain function
of an async graph in a worker thread, a hop that costs more CPU than the rule. It traces a
router as a run of its own, in a task of its own, whether or not anyone listens; ours are
traced only when a callback handler (LangSmith, Studio) is there to see them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph._internal._runnable import RunnableCallable
from langgraph.runtime import Runtime

from aidanbench.core.scores import declared, scoring
from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionState
from aidanbench.nodes.context import settings_of

R = TypeVar("R")

END_STEP = "__end__"
"""LangGraph's ``END``."""


def destinations(source: str) -> list[str]:
    """The steps the rule can give after ``source``: its router's path map."""
    scorers = [score.node for score in declared()]
    return {
        "prepare": ["generate", *scorers, "generate_next", "decide", END_STEP],
        "generate": [*scorers, "generate_next", "decide"],
        "decide": ["generate", *scorers, "generate_next", END_STEP],
    }[source]


def next_steps(state: QuestionState, settings: Settings) -> list[str]:
    """Nodes to run next (run in parallel), or ``[END]``."""
    if state.get("stop_reason") is not None:
        return [END_STEP]
    candidate = state.get("candidate")
    if candidate is None:
        return ["generate"]
    if "error" in candidate:
        return ["decide"]
    index = candidate["index"]
    steps = []
    for score in scoring(settings):
        outcome = state.get(score.outcome_key)
        if not isinstance(outcome, dict) or outcome.get("index") != index:
            steps.append(score.node)
    if settings.pipeline and (settings.max_answers is None or index < settings.max_answers):
        lookahead = state.get("lookahead")
        if lookahead is None or lookahead.get("index") != index + 1:
            steps.append("generate_next")
    return steps or ["decide"]


def router(source: str) -> Callable[[QuestionState, Runtime[Settings]], Sequence[str]]:
    """The router after ``source`` (``after_<source>``): the rule's next steps, which must
    be among ``destinations(source)``."""

    def route(state: QuestionState, runtime: Runtime[Settings]) -> Sequence[str]:
        steps = next_steps(state, settings_of(runtime))
        impossible = [step for step in steps if step not in destinations(source)]
        if impossible:
            raise RuntimeError(f"routing after {source}: impossible next steps {impossible}")
        return steps

    route.__name__ = route.__qualname__ = f"after_{source}"
    return route


def on_event_loop(
    router: Callable[[QuestionState, Runtime[Settings]], R],
) -> Callable[[QuestionState, Runtime[Settings]], Awaitable[R]]:
    """``router`` as a coroutine function, which LangGraph calls on the event loop."""

    @functools.wraps(router)
    async def routed(state: QuestionState, runtime: Runtime[Settings]) -> R:
        return router(state, runtime)

    return QuietRouter(routed)  # type: ignore[return-value]


class QuietRouter(RunnableCallable):
    """A coroutine router as LangGraph would run it, traced only while a callback handler
    listens: untraced, it is awaited on the node's own task, with no run, task or callback
    made for nobody (LangGraph's private ``RunnableCallable``, so the branch reads its input
    schema from the router as before)."""

    def __init__(self, routed: Callable[..., Awaitable[Any]]) -> None:
        super().__init__(None, routed, trace=True)
        self.quiet = RunnableCallable(None, routed, name=self.name, trace=False)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if listening(config):
            return await super().ainvoke(input, config, **kwargs)
        return await self.quiet.ainvoke(input, config, **kwargs)


def listening(config: RunnableConfig | None) -> bool:
    """Whether a callback handler receives the runs made under ``config``."""
    callbacks = None if config is None else config.get("callbacks")
    handlers = getattr(callbacks, "handlers", callbacks)
    return bool(handlers)
