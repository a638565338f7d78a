"""``decide`` (``nodes.decide``) on hand-built turns: what is recorded, what becomes the
next candidate, what stops the chain, what is emitted and when the run pauses."""

from __future__ import annotations

from typing import Any

import pytest

from aidanbench.core.scores import scoring
from aidanbench.core.settings import Settings
from aidanbench.nodes import decide as decide_module
from aidanbench.nodes.decide import (
    answer_event,
    branch_error,
    changes,
    decide,
    decided,
    should_pause,
)

from .states import Q, Runtime, candidate, error, record, scored, stats


def test_scoring_keys() -> None:
    def scoring_keys(settings: Settings) -> list[str]:
        return [score.outcome_key for score in scoring(settings)]

    assert scoring_keys(Settings()) == ["coherence_result", "novelty_result"]
    assert scoring_keys(Settings(llm_novelty=True)) == [
        "coherence_result",
        "novelty_result",
        "similarity_result",
    ]


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


def test_the_reward_follows_the_settings_reward_mode() -> None:
    """``reward`` is the valid count, or with ``novelty_sum`` the sum of their novelty."""
    counted, _ = decided(turn(index=3, novelty=0.25), Settings(), now=101.0)
    summed, _ = decided(turn(index=3, novelty=0.25), Settings(reward_mode="novelty_sum"), now=101.0)
    assert counted["reward"] == 3
    assert summed["reward"] == 0.5 + 0.5 + 0.25


def test_the_question_cost_cap_counts_discarded_and_pending_look_aheads() -> None:
    """A cap that the recorded answers alone stay under is reached once the discarded
    look-aheads (``speculative``) or the look-ahead already generated are counted: all of
    it was paid for."""
    call = {**stats(), "cost_usd": 0.075}

    def spend(**extra: Any) -> Any:
        state = turn(candidate=candidate(2, call=call), **extra)
        state["coherence_result"]["call"] = {**stats(), "cost_usd": 0.0}
        state["answers"] = [record(1, calls={"generate": call})]
        return state

    settings = Settings(max_question_cost=0.2)
    update, _ = decided(spend(), settings, now=101.0)
    assert "stop_reason" not in update, "two answers: $0.15, under the cap"
    update, _ = decided(spend(speculative=call), settings, now=101.0)
    assert update["stop_reason"] == "max_question_cost", "a discarded look-ahead: $0.225"
    update, _ = decided(spend(lookahead=candidate(3, call=call)), settings, now=101.0)
    assert update["stop_reason"] == "max_question_cost", "the pending look-ahead: $0.225"


def test_the_judge_samples_are_recorded_beside_the_deciding_score() -> None:
    samples = [80.0, 12.0, 95.0]
    state = turn()
    state["coherence_result"]["samples"] = samples
    _, rec = decided(state, Settings(judge_samples=3), now=101.0)
    assert rec is not None and rec["coherence_samples"] == samples and rec["valid"]
    _, rec = decided(turn(), Settings(), now=101.0)
    assert rec is not None and "coherence_samples" not in rec


def test_a_cost_cap_without_a_price_stops_the_question_with_an_error() -> None:
    """No price known: the cap cannot be applied, which is an error, never a $0 spend."""
    update, rec = decided(turn(), Settings(max_question_cost=0.2), now=101.0)
    assert rec is not None and rec["valid"], "the answer is recorded all the same"
    assert update["stop_reason"] == "error"
    assert update["error"]["kind"] == "error" and "no price" in update["error"]["message"]
    assert update["candidate"] is None and update["lookahead"] is None


def test_a_spent_run_budget_stops_the_question_after_recording_its_answer() -> None:
    update, rec = decided(turn(), Settings(), now=101.0, budget_spent=True)
    assert rec is not None and rec["valid"] and update["stop_reason"] == "budget"
    update, _ = decided(turn(), Settings(), now=101.0, budget_spent=False)
    assert "stop_reason" not in update


def test_changes_always_keeps_the_answers_they_append() -> None:
    """``answers`` appends: the same list again is a new answer, never a no-op."""
    same = [record(1)]
    assert changes({"answers": same, "score": 1}, {"answers": same, "score": 1}) == {
        "answers": same
    }
