"""A score added as docs/development.md says: a node and one entry in ``core.scores``.

The toy score ``decay`` (1 / the answer's index) is declared here with its node, and the
table is given that one entry more (``SCORES`` as the entry would make it). Nothing
shipped names it: the graph runs its node, its threshold ends the chain for good (a rerun
skips the thread, as after a published score's stop), ``answers.jsonl``
records it, and the thresholds, the text that describes them in reports and exports and
the report page's failing answer carry it, all from the declaration. A real score would
put its node in ``nodes/``, its entry in ``core/scores.py`` and, to be set per run, its
threshold field in ``core/settings.py`` and that field's kind in
``core/setting_kinds.py``: four files (``ADDING_A_SCORE``), the settings field stood in
for here by a subclass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from aidanbench.analysis.summary import describe_thresholds
from aidanbench.analysis.view import failure
from aidanbench.core import scores
from aidanbench.core.scores import Score
from aidanbench.core.settings import Settings
from aidanbench.core.state import QuestionState, ScoreOutcome
from aidanbench.graph.question import build_question_graph
from aidanbench.nodes.context import NodeContext, candidate_answer, no_calls, scored
from aidanbench.record.lines import QuestionLine, read_lines, write_lines
from aidanbench.record.results import question_result
from aidanbench.runner.tasks import is_finished
from aidanbench.services import ServicesFactory
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_settings

Q = "What is a good name for a cat?"
REPO = Path(__file__).resolve().parent.parent
SHIPPED = ("core", "record", "graph", "nodes", "services", "analysis", "cli", "runner")

ADDING_A_SCORE = ("nodes/<name>.py", "core/scores.py", "core/settings.py", "core/setting_kinds.py")
"""The shipped files a real score touches (docs/development.md, "Adding a score")."""


async def decay(
    state: QuestionState, runtime: Runtime[Settings], *, services: ServicesFactory
) -> dict[str, Any]:
    """The toy score's node: 1 / the candidate's index, fading with each answer."""
    ctx = NodeContext(runtime, services)
    _, index = candidate_answer(state)

    async def ask() -> float:
        return 1 / index

    def outcome(value: float) -> ScoreOutcome:
        return ScoreOutcome(index=index, value=value, call=no_calls())

    return {"decay_result": await scored(ctx, state, "decay", "model", ask, outcome)}


DECAY = Score("decay", "decay", "decay", 0.4, "decay_threshold", function=f"{__name__}:decay")


class DecaySettings(Settings):
    """``Settings`` with the toy's threshold field, as ``core/settings.py`` would hold it."""

    decay_threshold: float = 0.4


@pytest.fixture
def with_decay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scores, "SCORES", (*scores.SCORES, DECAY))


@pytest.mark.usefixtures("with_decay", "api_key")
async def test_a_declared_score_runs_ends_the_chain_and_is_recorded(tmp_path: Path) -> None:
    with OpenAIStub(ScriptedBrain({Q: 5})) as stub:
        settings = DecaySettings(**dict(stub_settings(stub.base_url)))
        graph = build_question_graph().compile()
        out = await graph.ainvoke({"question": Q}, context=settings)
    answers = out["answers"]
    assert [a["decay"] for a in answers] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert [a["valid"] for a in answers] == [True, True, False]
    assert (out["stop_reason"], answers[-1]["stop_reason"], out["score"]) == ("decay",) * 2 + (2,)
    assert out["measured"]["decay_threshold"] == 0.4
    assert settings.thresholds["decay"] == 0.4

    line = QuestionLine.from_output(out, measured=out["measured"], question=Q)
    write_lines(tmp_path, [line])
    recorded = [json.loads(text) for text in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [a["decay"] for a in recorded] == [a["decay"] for a in answers]
    [read] = read_lines(tmp_path)
    assert [DECAY.value(a) for a in read.answers] == [a["decay"] for a in answers]
    reported = question_result(read).answers
    assert is_finished(out, pending=False) and read.finished and question_result(read).finished
    assert [DECAY.value(a) for a in reported] == [a["decay"] for a in answers]
    assert failure(read.answers, "decay", settings.thresholds) == {  # type: ignore[arg-type]
        "index": 3,
        "criterion": "decay",
        "value": pytest.approx(1 / 3),
        "threshold": 0.4,
    }
    assert describe_thresholds(settings.thresholds) == (
        "coherence > 15, novelty > 0.15, decay > 0.4"
    )


@pytest.mark.usefixtures("with_decay", "api_key")
async def test_the_threshold_comes_from_the_setting_the_score_names() -> None:
    with OpenAIStub(ScriptedBrain({Q: 5})) as stub:
        settings = DecaySettings(**dict(stub_settings(stub.base_url)), decay_threshold=0.3)
        out = await build_question_graph().compile().ainvoke({"question": Q}, context=settings)
    assert [a["valid"] for a in out["answers"]] == [True, True, True, False]
    assert out["stop_reason"] == "decay"


def test_the_graph_draws_the_declared_score_between_generate_and_decide(with_decay: None) -> None:
    edges = {(e.source, e.target) for e in build_question_graph().compile().get_graph().edges}
    assert {("generate", "decay"), ("decay", "decide"), ("decide", "decay")} <= edges


def test_no_shipped_module_names_the_toy_score() -> None:
    """What the toy gets above comes from its entry: no shipped module knows its name."""
    named = [
        path
        for folder in SHIPPED
        for path in (REPO / folder).rglob("*.py")
        if "decay_result" in path.read_text() or "decay_threshold" in path.read_text()
    ]
    assert named == []
