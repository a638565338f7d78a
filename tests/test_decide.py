"""The pure core on hand-built inputs, exactly: what mutation testing showed the rest missed.

``scripts/mutation.sh`` mutates parsing, novelty, metrics, routing, ``decide`` and the
pass rule and runs these tests with the other fast unit tests; each test here pins a
behaviour that some mutant changed while every other test still passed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from aidanbench.core.metric_names import environment_aliases
from aidanbench.core.settings import Settings
from aidanbench.core.thresholds import Thresholds
from aidanbench.nodes import decide as decide_module
from aidanbench.nodes.decide import (
    answer_event,
    branch_error,
    decide,
    decided,
    scoring_keys,
    should_pause,
)
from aidanbench.nodes.metrics import chain_metrics
from aidanbench.nodes.novelty import cosine_novelty, llm_novelty, unit
from aidanbench.nodes.parsing import ScoreParseError, extract_answer, parse_score
from aidanbench.nodes.routing import (
    after_decide,
    after_generate,
    after_prepare,
    destinations,
    next_steps,
)

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


# --- parsing ------------------------------------------------------------------------------


def test_answer_is_stripped_and_flagged() -> None:
    assert extract_answer("x <answer>  a\n</answer> y") == ("a", True)
    assert extract_answer("  plain reply \n") == ("plain reply", False)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (" ", "empty"),
        ("none", "missing"),
        ("<s>1</s><s>2</s>", "multiple"),
        ("<s>101</s>", "out_of_range"),
    ],
)
def test_every_parse_error_names_its_tag(reply: str, reason: str) -> None:
    with pytest.raises(ScoreParseError) as caught:
        parse_score(reply, "s")
    assert (caught.value.reason, caught.value.tag) == (reason, "s")
    assert " <s>: " in str(caught.value)


def test_score_parse_error_names_reason_tag_and_reply() -> None:
    with pytest.raises(ScoreParseError) as caught:
        parse_score("<s>x_y</s>", "s")
    err = caught.value
    assert (err.reason, err.tag, err.reply) == ("not_integer", "s", "<s>x_y</s>")
    assert str(err) == "judge reply has not integer <s>: '<s>x_y</s>'"


def test_long_replies_are_cut_at_200_characters_in_the_message() -> None:
    exact = "a" * 200
    with pytest.raises(ScoreParseError) as caught:
        parse_score(exact, "s")
    assert str(caught.value).endswith(f"{exact!r}")
    with pytest.raises(ScoreParseError) as caught:
        parse_score(exact + "b", "s")
    assert str(caught.value).endswith(repr(exact + "…"))
    assert caught.value.reply == exact + "b"


def test_score_bounds_are_inclusive_and_adjustable() -> None:
    assert parse_score("<s>0</s>", "s") == 0
    assert parse_score("<s>100</s>", "s") == 100
    assert parse_score("<s>5</s>", "s", low=5, high=5) == 5
    for value in ("4", "6"):
        with pytest.raises(ScoreParseError, match="out of range"):
            parse_score(f"<s>{value}</s>", "s", low=5, high=5)


def test_score_tag_is_matched_literally_and_across_lines() -> None:
    assert parse_score("<a.b>\n7\n</a.b>", "a.b") == 7
    with pytest.raises(ScoreParseError, match="missing"):
        parse_score("<aXb>7</aXb>", "a.b")


# --- novelty ------------------------------------------------------------------------------


def test_unit_scales_to_length_one_and_refuses_bad_vectors() -> None:
    assert unit([3.0, 4.0]).tolist() == [0.6, 0.8]
    for bad in ([0.0, 0.0], [math.inf, 1.0], [math.nan, 1.0]):
        with pytest.raises(ValueError) as caught:
            unit(bad)
        assert str(caught.value) == "embedding has zero or non-finite length"


def test_vectors_are_computed_in_double_precision() -> None:
    """A float32 vector of 1e-30 has a float32 norm of 0 (its square underflows)."""
    tiny = np.array([1e-30, 0.0], dtype=np.float32)
    assert unit(tiny).tolist() == [1.0, 0.0]
    assert unit(np.array([3, 4], dtype=np.float32)).dtype == np.float64
    assert cosine_novelty([1.0, 0.0], [tiny]) == pytest.approx(0.0)
    assert cosine_novelty(tiny, [np.array([0.0, 1e-30], dtype=np.float32)]) == 1.0


def test_previous_vectors_of_zero_or_non_finite_length_are_errors() -> None:
    for bad in ([0.0, 0.0], [math.inf, 0.0], [math.nan, 0.0]):
        with pytest.raises(ValueError) as caught:
            cosine_novelty([1.0, 0.0], [[1.0, 1.0], bad])
        assert str(caught.value) == "embedding has zero or non-finite length"


def test_novelty_uses_the_most_similar_earlier_answer_exactly() -> None:
    previous = [np.array([0.0, 2.0]), np.array([3.0, 4.0])]
    assert cosine_novelty(np.array([1.0, 0.0]), previous) == pytest.approx(1 - 0.6, abs=1e-12)
    assert isinstance(cosine_novelty([1.0, 0.0], previous), float)


def test_llm_novelty_of_each_score() -> None:
    assert llm_novelty([]) == 1.0
    assert llm_novelty([0]) == 1.0
    assert llm_novelty([40, 85, 10]) == pytest.approx(0.15)
    assert llm_novelty([100]) == 0.0


# --- metrics ------------------------------------------------------------------------------


def test_chain_metrics_of_an_empty_chain() -> None:
    ours = {
        "score": 0,
        "novelty_sum": 0.0,
        "mean_coherence": None,
        "mean_novelty": None,
        "mean_llm_novelty": None,
        "format_adherence": None,
    }
    assert chain_metrics([]) == ours | environment_aliases(ours)


def test_chain_metrics_average_valid_answers_only() -> None:
    answers = [
        record(1, coherence=60.0, novelty=1.0, llm_novelty=0.9),
        record(2, coherence=90.0, novelty=0.5, llm_novelty=None, used_answer_tag=False),
        record(3, valid=False, coherence=10.0, novelty=0.05, llm_novelty=0.1),
    ]
    metrics = chain_metrics(answers)
    ours = {
        "score": 2,
        "novelty_sum": 1.5,
        "mean_coherence": 75.0,
        "mean_novelty": 0.75,
        "mean_llm_novelty": 0.9,
        "format_adherence": pytest.approx(2 / 3),
    }
    assert metrics == ours | environment_aliases(ours)
    assert isinstance(metrics["novelty_sum"], float)


def test_chain_metrics_with_only_an_invalid_answer() -> None:
    metrics = chain_metrics([record(1, valid=False, used_answer_tag=False)])
    assert metrics["score"] == 0 and metrics["novelty_sum"] == 0.0
    assert metrics["mean_coherence"] is None and metrics["mean_novelty"] is None
    assert metrics["format_adherence"] == 0.0


# --- the pass rule ------------------------------------------------------------------------


def test_thresholds_default_to_the_benchmark() -> None:
    assert Thresholds() == Thresholds(15.0, 0.15, None)
    assert Thresholds().failure(15.5, 0.16) is None
    assert Thresholds().failure(15.0, 0.16) == "coherence"
    assert Thresholds().failure(16.0, 0.15) == "novelty"


def test_llm_novelty_is_checked_after_the_others_and_must_be_given() -> None:
    rule = Thresholds(llm_novelty=0.2)
    assert rule.failure(50, 0.5, 0.2) == "llm_novelty"
    assert rule.failure(50, 0.5, 0.21) is None
    assert rule.failure(50, 0.1, 0.0) == "novelty"
    with pytest.raises(ValueError) as caught:
        rule.failure(50, 0.5)
    assert str(caught.value) == "LLM novelty is on but the answer has no LLM novelty score"


# --- routing ------------------------------------------------------------------------------


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
    assert after_generate(state, Runtime(Settings(llm_novelty=True))) == [  # type: ignore[arg-type]
        "judge",
        "embed_novelty",
        "llm_novelty",
        "generate_next",
    ]
    assert after_decide(state, Runtime(None)) == ["judge", "embed_novelty", "generate_next"]  # type: ignore[arg-type]
    assert after_prepare({"question": Q}, Runtime(None)) == ["generate"]  # type: ignore[arg-type, typeddict-item]
    assert after_prepare(state, Runtime(Settings(pipeline=False))) == ["judge", "embed_novelty"]  # type: ignore[arg-type]
    assert destinations(int) == []


def test_router_errors_name_source_and_steps() -> None:
    state: Any = {"candidate": {"index": 1, "error": error()}}
    with pytest.raises(RuntimeError) as caught:
        after_decide(state, Runtime(None))  # type: ignore[arg-type]
    assert str(caught.value) == "routing after decide: impossible next steps ['decide']"


# --- decide -------------------------------------------------------------------------------


def test_scoring_keys() -> None:
    assert scoring_keys(False) == ["coherence_result", "novelty_result"]
    assert scoring_keys(True) == ["coherence_result", "novelty_result", "similarity_result"]


def test_branch_error_takes_the_generation_first_then_keys_in_order() -> None:
    first, second = error("judge_error"), error("error", "embeddings")
    state: Any = {
        "candidate": candidate(1),
        "coherence_result": {"index": 1, "error": first},
        "novelty_result": {"index": 1, "error": second},
    }
    assert branch_error(state, ["novelty_result", "coherence_result"]) is second
    assert branch_error(state, ["coherence_result"]) is first
    assert branch_error({**state, "candidate": {"index": 1, "error": second}}, []) is second
    assert branch_error({"candidate": None}, ["coherence_result"]) is None  # type: ignore[typeddict-item]


def turn(index: int = 2, coherence: float = 80.0, novelty: float = 0.5, **extra: Any) -> Any:
    return {
        "question": Q,
        "answers": [record(i) for i in range(1, index)],
        "started_at": 100.0,
        "candidate": candidate(index),
        "coherence_result": scored(index, coherence, flags=["f1"]),
        "novelty_result": scored(index, novelty, call=stats(0, (0, 0), None), flags=["f1", "f2"]),
        **extra,
    }


def test_a_valid_answer_is_recorded_and_the_look_ahead_becomes_the_candidate() -> None:
    ahead = candidate(3)
    cut = candidate(2, finish_reason="length", reasoning_tokens=17)
    update, rec = decided(turn(lookahead=ahead, candidate=cut), Settings(), now=112.3456)
    assert rec == {
        "index": 2,
        "answer": "answer 2",
        "raw_reply": "<answer>answer 2</answer>",
        "used_answer_tag": True,
        "coherence": 80.0,
        "novelty": 0.5,
        "llm_novelty": None,
        "valid": True,
        "stop_reason": None,
        "elapsed_s": 12.346,
        "calls": {"generate": stats(), "judge": stats(), "embed": stats(0, (0, 0), None)},
        "flags": ["f1", "f2"],
        "finish_reason": "length",
        "truncated": True,
        "served_model": "m",
        "reasoning_tokens": 17,
    }
    assert update["answers"] == [rec]
    assert update["candidate"] is ahead and update["lookahead"] is None
    assert update["coherence_result"] is None and update["novelty_result"] is None
    assert "similarity_result" not in update and "stop_reason" not in update
    assert update["score"] == 2


def test_an_invalid_answer_stops_and_keeps_the_look_ahead_cost_as_speculative() -> None:
    spent = stats(2, (5, 5))
    state = turn(novelty=0.15, lookahead=candidate(3), speculative=spent)
    update, rec = decided(state, Settings(), now=101.0)
    assert rec is not None and rec["valid"] is False and rec["stop_reason"] == "novelty"
    assert update["stop_reason"] == "novelty"
    assert update["candidate"] is None and update["lookahead"] is None
    assert update["speculative"] == {
        "served_model": "m",
        "latency_s": 1.0,
        "input_tokens": 15,
        "output_tokens": 7,
        "calls": 3,
    }
    assert update["score"] == 1


def test_without_earlier_speculation_the_look_ahead_is_the_whole_speculative_cost() -> None:
    update, _ = decided(turn(coherence=15.0, lookahead=candidate(3)), Settings(), now=101.0)
    assert update["stop_reason"] == "coherence"
    assert update["speculative"] == {**stats(), "latency_s": 0.5}
    update, _ = decided(turn(coherence=15.0), Settings(), now=101.0)
    assert "speculative" not in update


def test_the_answer_cap_stops_after_the_capped_valid_answer() -> None:
    update, rec = decided(turn(index=3), Settings(max_answers=3), now=101.0)
    assert rec is not None and rec["valid"] and update["stop_reason"] == "max_answers"
    update, _ = decided(turn(index=3), Settings(max_answers=4), now=101.0)
    assert "stop_reason" not in update


def test_a_failed_look_ahead_stops_with_its_error_after_recording() -> None:
    failure = error("error", "model")
    update, rec = decided(turn(lookahead={"index": 3, "error": failure}), Settings(), now=1.0)
    assert rec is not None and rec["valid"]
    assert update["stop_reason"] == "error" and update["error"] is failure
    assert update["candidate"] is None and update["lookahead"] is None


def test_a_branch_error_stops_without_a_record() -> None:
    failure = error("judge_error")
    state = turn(coherence_result={"index": 2, "error": failure})
    assert decided(state, Settings(), now=1.0) == (
        {"stop_reason": "judge_error", "error": failure},
        None,
    )


def test_decide_needs_a_candidate_and_current_outcomes() -> None:
    with pytest.raises(RuntimeError) as caught:
        decided({"question": Q}, Settings(), now=1.0)  # type: ignore[typeddict-item]
    assert str(caught.value) == "decide ran without a candidate"
    stale = turn(novelty_result=scored(1, 0.5))
    with pytest.raises(RuntimeError, match="decide: novelty_result is not scored for answer 2"):
        decided(stale, Settings(), now=1.0)
    missing = turn(coherence_result={"index": 2})
    with pytest.raises(RuntimeError, match="coherence_result is not scored"):
        decided(missing, Settings(), now=1.0)
    with pytest.raises(RuntimeError, match="similarity_result is not scored"):
        decided(turn(), Settings(llm_novelty=True), now=1.0)


def test_llm_novelty_is_recorded_and_costed_under_similarity() -> None:
    state = turn(similarity_result=scored(2, 0.1, call=stats(3)))
    update, rec = decided(state, Settings(llm_novelty=True), now=100.0)
    assert rec is not None and rec["llm_novelty"] == 0.1 and rec["stop_reason"] == "llm_novelty"
    assert rec["calls"]["similarity"] == stats(3)
    assert rec["elapsed_s"] == 0.0
    assert update["similarity_result"] is None


def test_elapsed_time_counts_from_now_when_the_start_is_unknown() -> None:
    _, rec = decided(turn(started_at=None), Settings(), now=55.0)
    assert rec is not None and rec["elapsed_s"] == 0.0


def test_missing_costs_are_recorded_as_no_calls() -> None:
    state = turn(candidate={k: v for k, v in candidate(2).items() if k != "call"})
    state["coherence_result"] = {"index": 2, "value": 80.0}
    _, rec = decided(state, Settings(), now=1.0)
    assert rec is not None
    none = {"served_model": None, "latency_s": 0.0, "input_tokens": 0, "output_tokens": 0}
    assert rec["calls"]["generate"] == {**none, "calls": 0}
    assert rec["calls"]["judge"] == {**none, "calls": 0}


@pytest.mark.parametrize(
    ("settings", "index", "valid", "pause"),
    [
        (Settings(), 2, False, False),
        (Settings(interrupt_on_reject=True), 2, False, True),
        (Settings(interrupt_on_reject=True), 2, True, False),
        (Settings(interrupt_every=2), 4, True, True),
        (Settings(interrupt_every=2), 3, True, False),
        (Settings(interrupt_every=3), 3, False, True),
    ],
)
def test_should_pause(settings: Settings, index: int, valid: bool, pause: bool) -> None:
    assert should_pause(record(index, valid), settings) is pause


def test_answer_event_totals_calls_and_tokens() -> None:
    rec = record(4, coherence=70.0, novelty=0.4, llm_novelty=0.3)
    rec["calls"] = {"generate": stats(1, (10, 5)), "judge": stats(2, (20, 3))}
    assert answer_event(rec, 3, None) == {
        "event": "answer",
        "index": 4,
        "valid": True,
        "coherence": 70.0,
        "novelty": 0.4,
        "llm_novelty": 0.3,
        "score": 3,
        "stop_reason": None,
        "calls": 3,
        "tokens": 38,
        "cost_usd": None,  # records without dollars (made before they were kept): unknown
        "usage_missing": 0,
    }
    rec["calls"]["judge"] |= {"input_tokens": None, "output_tokens": None, "usage_missing": 2}
    event = answer_event(rec, 3, None)
    assert (event["tokens"], event["usage_missing"]) == (None, 2), "unknown, and counted"


def test_the_first_answer_of_a_new_thread_has_no_earlier_answers() -> None:
    state = turn(index=1)
    del state["answers"]
    update, rec = decided(state, Settings(), now=101.0)
    assert update["answers"] == [rec] and update["score"] == 1


async def test_the_decide_node_emits_the_answer_event() -> None:
    runtime = Runtime(Settings(max_answers=2))
    update = await decide(turn(lookahead=candidate(3)), runtime)  # type: ignore[arg-type]
    assert update["stop_reason"] == "max_answers"
    assert runtime.events == [answer_event(update["answers"][0], 2, "max_answers")]
    assert runtime.events[0]["stop_reason"] == "max_answers"


async def test_the_decide_node_emits_a_branch_error() -> None:
    failure = error("judge_error")
    runtime = Runtime(None)
    update = await decide(turn(novelty_result={"index": 2, "error": failure}), runtime)  # type: ignore[arg-type]
    assert update == {"stop_reason": "judge_error", "error": failure}
    assert runtime.events == [{"event": "error", "index": 2, **failure}]


async def test_the_decide_node_pauses_with_the_answer_for_review(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paused: list[Any] = []
    monkeypatch.setattr(decide_module, "interrupt", paused.append)
    runtime = Runtime(Settings(interrupt_on_reject=True))
    update = await decide(turn(coherence=3.0), runtime)  # type: ignore[arg-type]
    rec = update["answers"][0]
    assert paused == [{"reason": "review", "answer": rec, "score": 1}]
    assert runtime.events == [answer_event(rec, 1, "coherence")]
    paused.clear()
    await decide(turn(), Runtime(Settings(interrupt_every=5)))  # type: ignore[arg-type]
    assert paused == []
