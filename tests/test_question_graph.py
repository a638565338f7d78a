"""The per-question graph with in-process fakes: counts, stop reasons, order, concurrency."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from aidanbench.core.settings import Settings
from aidanbench.graph.question import build_question_graph
from aidanbench.testing import ScriptedBrain
from aidanbench.testing.fakes import brain_services

from .graphs import comparable, run_question

Q = "What is a good name for a cat?"


async def test_chain_ends_at_first_repeat() -> None:
    out = await run_question(brain_services(ScriptedBrain({Q: 3})), Q)
    answers = out["answers"]
    assert [a["index"] for a in answers] == [1, 2, 3, 4]
    assert [a["valid"] for a in answers] == [True, True, True, False]
    assert out["score"] == 3
    assert out["stop_reason"] == "novelty"
    assert answers[-1]["stop_reason"] == "novelty"
    assert answers[-1]["novelty"] == pytest.approx(0.0, abs=1e-6)
    assert answers[-1]["answer"] == answers[0]["answer"]
    assert answers[0]["novelty"] == 1.0
    assert all(a["stop_reason"] is None for a in answers[:-1])
    assert out["error"] is None


async def test_coherence_ending_and_metrics() -> None:
    brain = ScriptedBrain({Q: 2}, ending={Q: "coherence"})
    out = await run_question(brain_services(brain), Q)
    assert out["stop_reason"] == "coherence"
    assert [a["coherence"] for a in out["answers"]] == [80.0, 80.0, 5.0]
    assert out["mean_coherence"] == 80.0
    assert out["novelty_sum"] == pytest.approx(sum(a["novelty"] for a in out["answers"][:2]))
    assert out["mean_novelty"] == pytest.approx(out["novelty_sum"] / 2)
    assert out["mean_llm_novelty"] is None
    assert out["format_adherence"] == 1.0


async def test_first_answer_can_fail() -> None:
    out = await run_question(brain_services(ScriptedBrain({Q: 0})), Q)
    assert out["score"] == 0
    assert len(out["answers"]) == 1
    assert out["stop_reason"] == "coherence"


async def test_llm_novelty_ends_reworded_repeat() -> None:
    brain = ScriptedBrain({Q: 3}, ending={Q: "llm_novelty"})
    out = await run_question(brain_services(brain), Q, Settings(llm_novelty=True))
    assert out["stop_reason"] == "llm_novelty"
    assert out["score"] == 3
    last = out["answers"][-1]
    assert last["llm_novelty"] == 0.0 and last["novelty"] > 0.15
    assert [a["llm_novelty"] for a in out["answers"][:3]] == [1.0, 0.9, 0.9]
    assert out["mean_llm_novelty"] == pytest.approx((1.0 + 0.9 + 0.9) / 3)
    assert last["calls"]["similarity"]["calls"] == 3


async def test_llm_novelty_off_never_asks_similarity() -> None:
    events: list[tuple[str, float, float]] = []
    brain = ScriptedBrain({Q: 3})
    out = await run_question(brain_services(brain, events=events), Q)
    assert out["answers"][-1]["llm_novelty"] is None
    assert "similarity" not in {kind for kind, _, _ in events}


async def test_max_answers_cap() -> None:
    out = await run_question(brain_services(ScriptedBrain({Q: 10})), Q, Settings(max_answers=2))
    assert out["stop_reason"] == "max_answers"
    assert [a["valid"] for a in out["answers"]] == [True, True]
    assert out["score"] == 2


async def test_answers_without_tag_count_against_format_adherence() -> None:
    brain = ScriptedBrain({Q: 2}, no_tag_questions={Q})
    out = await run_question(brain_services(brain), Q)
    assert out["score"] == 2
    assert out["format_adherence"] == 0.0
    assert out["answers"][0]["raw_reply"] == out["answers"][0]["answer"]


@pytest.mark.parametrize("pipeline", [False, True])
async def test_judge_and_embedding_overlap(pipeline: bool) -> None:
    events: list[tuple[str, float, float]] = []
    delays = {"generate": 0.03, "coherence": 0.05, "embed": 0.05}
    brain = ScriptedBrain({Q: 2}, ending={Q: "coherence"})  # every text new: no cache hits
    services = brain_services(brain, delays=delays, events=events)
    await run_question(services, Q, Settings(pipeline=pipeline))
    judges = [(s, e) for k, s, e in events if k == "coherence"]
    embeds = [(s, e) for k, s, e in events if k == "embed"]
    assert len(judges) == len(embeds) == 3
    overlapping = sum(1 for js, je in judges if any(es < je and js < ee for es, ee in embeds))
    assert overlapping == len(judges)
    gens = [(s, e) for k, s, e in events if k == "generate"]
    overlapped_gens = sum(1 for gs, ge in gens if any(js < ge and gs < je for js, je in judges))
    assert overlapped_gens == (3 if pipeline else 0)


async def test_pipelined_and_sequential_record_the_same() -> None:
    brain = ScriptedBrain({Q: 5}, ending={Q: "coherence"})
    plain = await run_question(brain_services(brain), Q, Settings(pipeline=False))
    piped = await run_question(brain_services(brain), Q, Settings(pipeline=True))
    assert comparable(plain["answers"]) == comparable(piped["answers"])
    assert plain["speculative"] is None
    assert piped["speculative"]["calls"] == 1


async def node_order(settings: Settings) -> list[list[str]]:
    graph = build_question_graph(brain_services(ScriptedBrain({Q: 1}))).compile()
    steps: list[list[str]] = []
    async for chunk in graph.astream({"question": Q}, context=settings, stream_mode="debug"):
        if chunk["type"] == "task":
            step = chunk["step"]
            while len(steps) < step:
                steps.append([])
            steps[step - 1].append(chunk["payload"]["name"])
    return [sorted(s) for s in steps if s]


async def test_node_order_sequential() -> None:
    assert await node_order(Settings(pipeline=False)) == [
        ["prepare"],
        ["generate"],
        ["embed_novelty", "judge"],
        ["decide"],
        ["generate"],
        ["embed_novelty", "judge"],
        ["decide"],
    ]


async def test_node_order_pipelined_with_llm_novelty() -> None:
    assert await node_order(Settings(pipeline=True, llm_novelty=True)) == [
        ["prepare"],
        ["generate"],
        ["embed_novelty", "generate_next", "judge", "llm_novelty"],
        ["decide"],
        ["embed_novelty", "generate_next", "judge", "llm_novelty"],
        ["decide"],
    ]


class FlakyJudgeBrain(ScriptedBrain):
    """Judge replies without a tag for answer 2 until ``fixed`` is set."""

    fixed = False

    def judge_coherence(self, question: str, answer: str) -> str:
        if answer.startswith("Idea 2") and not self.fixed:
            return "I would say it is quite coherent."
        return super().judge_coherence(question, answer)


async def test_unreadable_judge_stops_with_judge_error_then_resumes() -> None:
    brain = FlakyJudgeBrain({Q: 3})
    events: list[tuple[str, float, float]] = []
    services = brain_services(brain, events=events)
    saver = InMemorySaver()
    settings = Settings(judge_attempts=3, pipeline=False)
    out = await run_question(services, Q, settings, checkpointer=saver)
    assert out["stop_reason"] == "judge_error"
    assert out["error"]["role"] == "judge" and out["error"]["kind"] == "judge_error"
    assert out["score"] == 1 and len(out["answers"]) == 1
    assert sum(1 for k, _, _ in events if k == "coherence") == 1 + 3
    embeds_before = sum(1 for k, _, _ in events if k == "embed")

    brain.fixed = True
    graph = build_question_graph(services).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    tasks = [
        (chunk["step"], chunk["payload"]["name"])
        async for chunk in graph.astream(
            {"question": Q}, config, context=settings, stream_mode="debug"
        )
        if chunk["type"] == "task"
    ]
    first_step = min(step for step, _ in tasks)
    assert [name for step, name in tasks if step <= first_step + 1] == ["prepare", "judge"], (
        "only the failed judge is re-run; the finished embedding of answer 2 is kept"
    )
    again = (await graph.aget_state(config)).values
    assert again["stop_reason"] == "novelty" and again["score"] == 3
    assert again["error"] is None
    fresh = await run_question(brain_services(brain), Q, settings)
    assert comparable(again["answers"]) == comparable(fresh["answers"])
    assert sum(1 for k, _, _ in events if k == "embed") == embeds_before + 1, (
        "answer 3 is embedded; answer 4 repeats answer 1, whose vector is cached"
    )


class DownModelBrain(ScriptedBrain):
    """The model endpoint is unreachable for answer 3 until ``up`` is set."""

    up = False

    def generate(self, question: str, previous: Any) -> str:
        if len(previous) == 2 and not self.up:
            raise openai.APIConnectionError(
                message="Connection error.",
                request=None,  # type: ignore[arg-type]
            )
        return super().generate(question, previous)


@pytest.mark.parametrize("pipeline", [False, True])
async def test_model_error_is_recorded_not_scored(pipeline: bool) -> None:
    brain = DownModelBrain({Q: 4})
    saver = InMemorySaver()
    settings = Settings(pipeline=pipeline)
    out = await run_question(brain_services(brain), Q, settings, checkpointer=saver)
    assert out["stop_reason"] == "error"
    assert out["error"]["role"] == "model"
    assert "connection failed" in out["error"]["message"]
    assert out["score"] == 2 and all(a["valid"] for a in out["answers"])
    brain.up = True
    again = await run_question(brain_services(brain), Q, settings, checkpointer=saver)
    assert again["score"] == 4 and again["stop_reason"] == "novelty"
    assert [a["index"] for a in again["answers"]] == [1, 2, 3, 4, 5]


async def test_finished_thread_is_not_rerun() -> None:
    events: list[tuple[str, float, float]] = []
    saver = InMemorySaver()
    services = brain_services(ScriptedBrain({Q: 2}), events=events)
    first = await run_question(services, Q, checkpointer=saver)
    calls = len(events)
    second = await run_question(services, Q, checkpointer=saver)
    assert len(events) == calls
    assert second["answers"] == first["answers"]


class BuggyBrain(ScriptedBrain):
    def judge_coherence(self, question: str, answer: str) -> str:
        raise ZeroDivisionError("a bug, not an outage")


async def test_bugs_are_raised_not_recorded() -> None:
    with pytest.raises(ZeroDivisionError):
        await run_question(brain_services(BuggyBrain({Q: 2})), Q)


async def test_empty_question_is_rejected() -> None:
    with pytest.raises(ValueError, match="question"):
        await run_question(brain_services(ScriptedBrain()), "  ")


async def test_custom_events_stream() -> None:
    graph = build_question_graph(brain_services(ScriptedBrain({Q: 2}))).compile()
    events = [
        e async for e in graph.astream({"question": Q}, context=Settings(), stream_mode="custom")
    ]
    assert [(e["event"], e["index"], e["valid"]) for e in events] == [
        ("answer", 1, True),
        ("answer", 2, True),
        ("answer", 3, False),
    ]
    assert events[-1]["stop_reason"] == "novelty"


async def test_interrupt_on_reject_then_resume() -> None:
    from langgraph.types import Command

    events: list[tuple[str, float, float]] = []
    saver = InMemorySaver()
    graph = build_question_graph(brain_services(ScriptedBrain({Q: 2}), events=events)).compile(
        checkpointer=saver
    )
    config = {"configurable": {"thread_id": "hitl"}}
    settings = Settings(interrupt_on_reject=True, interrupt_every=2)
    paused = await graph.ainvoke({"question": Q}, config, context=settings)
    assert paused["__interrupt__"][0].value["answer"]["index"] == 2
    calls = len(events)
    paused = await graph.ainvoke(Command(resume="ok"), config, context=settings)
    assert paused["__interrupt__"][0].value["answer"]["valid"] is False
    assert len(events) > calls
    calls = len(events)
    out = await graph.ainvoke(Command(resume="ok"), config, context=settings)
    assert len(events) == calls, "resuming repeats no API call"
    assert out["score"] == 2 and out["stop_reason"] == "novelty"
    assert [a["index"] for a in out["answers"]] == [1, 2, 3]
