"""Hand-built question-graph states and parts of them, for the tests of the pure core
(``test_routing``, ``test_decide``, ``test_metrics``)."""

from __future__ import annotations

from typing import Any

from aidanbench.core.settings import Settings

Q = "What is a brick for?"


def stats(calls: int = 1, tokens: tuple[int, int] = (10, 2), model: str | None = "m") -> Any:
    return {
        "served_model": model,
        "latency_s": 0.5,
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "calls": calls,
    }


def candidate(index: int, **extra: Any) -> Any:
    fields = {"answer": f"answer {index}", "raw_reply": f"<answer>answer {index}</answer>"}
    return {"index": index, **fields, "used_answer_tag": True, "call": stats(), **extra}


def scored(index: int, value: float, **extra: Any) -> Any:
    return {"index": index, "value": value, "call": stats(), **extra}


def error(kind: str = "error", role: str = "judge") -> Any:
    return {"kind": kind, "role": role, "message": "m", "status": 500, "retryable": True}


def record(index: int, valid: bool = True, **extra: Any) -> Any:
    fields = {
        "answer": f"answer {index}",
        "raw_reply": "r",
        "used_answer_tag": True,
        "coherence": 80.0,
        "novelty": 0.5,
        "llm_novelty": None,
        "valid": valid,
        "stop_reason": None if valid else "novelty",
        "elapsed_s": 1.0,
        "calls": {},
        "flags": [],
    }
    return {"index": index, **fields, **extra}


class Runtime:
    """The parts of LangGraph's ``Runtime`` that routers and ``decide`` use."""

    def __init__(self, settings: Settings | None) -> None:
        self.context = settings
        self.events: list[Any] = []

    def stream_writer(self, event: Any) -> None:
        self.events.append(event)
