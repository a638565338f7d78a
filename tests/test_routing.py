"""The routers (``nodes.routing``) on hand-built states: every kind of state goes where
the graph says, and an impossible one is an error naming what it got."""

from __future__ import annotations

from typing import Any

import pytest

from aidanbench.core.settings import Settings
from aidanbench.nodes.routing import (
    destinations,
    next_steps,
    router,
)

from .states import Q, Runtime, candidate, error, scored


def test_routing_of_each_kind_of_state() -> None:
    on = Settings(llm_novelty=True)
    plain = Settings(pipeline=False)
    assert next_steps({"question": Q}, on) == ["generate"]  # type: ignore[typeddict-item]
    stopped: Any = {"question": Q, "stop_reason": "novelty", "candidate": candidate(1)}
    assert next_steps(stopped, on) == ["__end__"]
    failed: Any = {"candidate": {"index": 1, "error": error()}}
    assert next_steps(failed, on) == ["decide"]
    fresh: Any = {"candidate": candidate(2)}
    assert next_steps(fresh, on) == ["judge", "embed_novelty", "llm_novelty", "generate_next"]
    assert next_steps(fresh, plain) == ["judge", "embed_novelty"]
    stale: Any = {
        "candidate": candidate(2),
        "coherence_result": scored(1, 80.0),
        "novelty_result": scored(2, 0.5),
        "similarity_result": "not an outcome",
        "lookahead": candidate(2),
    }
    assert next_steps(stale, on) == ["judge", "llm_novelty", "generate_next"]
    done: Any = {**stale, "coherence_result": scored(2, 80.0), "lookahead": candidate(3)}
    assert next_steps(done, Settings()) == ["decide"]


def test_no_look_ahead_past_the_answer_cap() -> None:
    state: Any = {"candidate": candidate(3)}
    assert next_steps(state, Settings(max_answers=3)) == ["judge", "embed_novelty"]
    assert next_steps(state, Settings(max_answers=4)) == ["judge", "embed_novelty", "generate_next"]


def test_routers_read_the_runtime_settings_or_the_defaults() -> None:
    state: Any = {"candidate": candidate(2)}
    assert router("generate")(state, Runtime(Settings(llm_novelty=True))) == [  # type: ignore[arg-type]
        "judge",
        "embed_novelty",
        "llm_novelty",
        "generate_next",
    ]
    assert router("decide")(state, Runtime(None)) == ["judge", "embed_novelty", "generate_next"]  # type: ignore[arg-type]
    assert router("prepare")({"question": Q}, Runtime(None)) == ["generate"]  # type: ignore[arg-type, typeddict-item]
    assert router("prepare")(state, Runtime(Settings(pipeline=False))) == ["judge", "embed_novelty"]  # type: ignore[arg-type]
    assert destinations("generate") == [
        "judge",
        "embed_novelty",
        "llm_novelty",
        "lexical_novelty",
        "generate_next",
        "decide",
    ]


def test_router_errors_name_source_and_steps() -> None:
    state: Any = {"candidate": {"index": 1, "error": error()}}
    with pytest.raises(RuntimeError) as caught:
        router("decide")(state, Runtime(None))  # type: ignore[arg-type]
    assert str(caught.value) == "routing after decide: impossible next steps ['decide']"
