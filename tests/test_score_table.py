"""A score added as docs/development.md says: a node and one entry in ``core.scores``.

The toy score ``decay`` (1 / the answer's index) is declared here with its node, and the
table is given that one entry more (``SCORES`` as the entry would make it). Nothing
shipped names it: the graph runs its node, its threshold ends the chain for good (a rerun
skips the thread, as after a published score's stop), ``answers.jsonl`` records it, and
every view carries it from the declaration: the line's thresholds and means, ``report``
(text and JSON), the HTML page, ``rescore`` (its own flag), the three exports and the
verifiers environments' metric names. A real score puts its node in ``nodes/``, its entry
in ``core/scores.py`` and, to be set per run, its threshold field in ``core/settings.py``
and that field's kind in ``core/setting_kinds.py``: four files (``ADDING_A_SCORE``; lexical
novelty is that diff), the settings field stood in for here by a subclass.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from langgraph.runtime import Runtime

from aidanbench.analysis.summary import describe_thresholds
from aidanbench.analysis.view import failure, load_source, view_data
from aidanbench.cli.main import main
from aidanbench.core import scores
from aidanbench.core.metric_names import rubric
from aidanbench.core.scores import Score
from aidanbench.core.settings import Settings
from aidanbench.core.state import AnswerRecord, QuestionState, ScoreOutcome
from aidanbench.graph.question import build_question_graph
from aidanbench.nodes.context import NodeContext, candidate_answer, no_calls, scored
from aidanbench.record.lines import AnswerLine, QuestionLine, read_lines, write_lines
from aidanbench.record.results import question_result
from aidanbench.runner import Progress, RunSpec, run_sync
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


def test_an_answer_is_the_same_record_in_the_graph_and_on_disk() -> None:
    """``AnswerRecord`` (the graph's state) and ``AnswerLine`` (a run directory's) hold the
    same fields: a field added to one is written or read by the other too."""
    assert set(get_type_hints(AnswerRecord)) == set(AnswerLine.model_fields)


def test_no_shipped_module_names_the_toy_score() -> None:
    """What the toy gets above comes from its entry: no shipped module knows its name."""
    named = [
        path
        for folder in SHIPPED
        for path in (REPO / folder).rglob("*.py")
        if "decay_result" in path.read_text() or "decay_threshold" in path.read_text()
    ]
    assert named == []


# --- a declared score through every view ----------------------------------------------------

DECAY_ONLY = Score("decay", "decay", None, 0.4, function=f"{__name__}:decay", short="dec.")
"""The toy without a setting (its threshold is always 0.4) and without API calls: the two
shipped files a score needs at least, its node and its entry, stood in for here."""

QUESTIONS = ("What is a good name for a cat?", "What is a good name for a dog?")


@pytest.fixture
def decay_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_key: str) -> Path:
    """Two questions run by the engine with the toy declared; each chain ends at its third
    answer (1/3 <= 0.4), before the scripted repeat."""
    monkeypatch.setattr(scores, "SCORES", (*scores.SCORES, DECAY_ONLY))
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain(dict.fromkeys(QUESTIONS, 5))) as stub:
        chosen = stub_settings(stub.base_url)
        fields = chosen.model_dump(include=set(chosen.model_fields_set) - {"model"})
        spec = RunSpec(
            models=[chosen.model],
            questions=list(QUESTIONS),
            run_dir=run_dir,
            settings=fields,
            preflight=False,
        )
        result = run_sync(spec, progress=Progress(out=io.StringIO(), live=False))
    assert not result.failed
    return run_dir


def test_a_declared_score_reaches_every_view(
    decay_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run, record, report (text and JSON), the page, rescore and the verifiers names: each
    carries the toy from its entry alone, and fails here if it ignores it."""
    answers = [json.loads(line) for line in (decay_run / "answers.jsonl").read_text().splitlines()]
    assert [a["decay"] for a in answers] == [1.0, 0.5, pytest.approx(1 / 3)] * 2
    assert {a["stop_reason"] for a in answers} == {None, "decay"}
    assert all("lexical_novelty" not in a for a in answers), "a score left off: no key"
    lines = [json.loads(line) for line in (decay_run / "questions.jsonl").read_text().splitlines()]
    for line in lines:
        assert line["thresholds"]["decay"] == 0.4 and line["stop_reason"] == "decay"
        assert line["mean_decay"] == 0.75 and line["avg_decay"] == 0.75, "its mean, both names"
        assert "mean_lexical_novelty" not in line, "a score the run did not measure: absent"

    assert main(["report", "--json", str(decay_run)]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["runs"]
    assert row["mean_decay"] == 0.75 and row["thresholds"]["decay"] == 0.4
    assert row["rollout_means"]["avg_decay"] == 0.75
    assert {q["stop_reason"] for q in row["questions"]} == {"decay"}
    assert main(["report", str(decay_run)]) == 0
    text = capsys.readouterr().out
    assert "dec." in text and "decay > 0.4" in text and "decay 2" in text

    data, chains = view_data([load_source(decay_run)])
    names = [s["name"] for s in data["scores"]]
    assert "decay" in names and all(line["t"]["decay"] == 0.4 for line in data["lines"])
    column = 5 + names.index("decay")
    assert [a[column] for a in chains[0][0]] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert {line["fail"]["criterion"] for line in data["lines"]} == {"decay"}
    assert data["groups"][0]["row"]["mean_decay"] == 0.75

    base = ["rescore", "--json", str(decay_run), "--coherence-threshold", "15"]
    base += ["--novelty-threshold", "0.15"]
    assert main([*base, "--decay-threshold", "0.5"]) == 0
    stricter = json.loads(capsys.readouterr().out)
    assert [run["score"] for run in stricter["runs"]] == [2] and stricter["truncated"] == 0
    assert stricter["thresholds"]["decay"] == 0.5
    assert main([*base, "--decay-threshold", "0.3"]) == 0
    looser = json.loads(capsys.readouterr().out)
    assert looser["truncated"] == 2, "the recorded stop passes now: lower bounds"
    with pytest.raises(SystemExit) as refused:  # always on: required, as the others'
        main(base)
    assert refused.value.code == 2 and "--decay-threshold" in capsys.readouterr().err

    assert rubric()["avg_decay"] == "mean_decay"


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("inspect_ai", "huggingface_hub")),
    reason="needs the [export] extra",
)
def test_a_declared_score_reaches_every_export(decay_run: Path, tmp_path: Path) -> None:
    from inspect_ai.log import read_eval_log

    out = tmp_path / "out"
    for fmt, more in (("inspect", []), ("every-eval-ever", []), ("hf", ["--hf-dataset", "a/b"])):
        assert main(["export", "--format", fmt, "-o", str(out / fmt), *more, str(decay_run)]) == 0
    (log,) = (out / "inspect").rglob("*.eval")
    read = read_eval_log(str(log))
    assert read.results is not None and read.results.metadata["mean_decay"] == 0.75
    sample = read.samples[0]  # type: ignore[index]
    assert [a["decay"] for a in sample.metadata["answers"]] == [1.0, 0.5, pytest.approx(1 / 3)]
    (aggregate,) = [p for p in (out / "every-eval-ever").rglob("*.json")]
    document = json.loads(aggregate.read_text())
    config = document["evaluation_results"][0]["metric_config"]["additional_details"]
    assert json.loads(config["thresholds"])["decay"] == 0.4
    assert document["evaluation_results"][0]["score_details"]["details"]["mean_decay"] == "0.75"
    (chains,) = (out / "every-eval-ever").rglob("*.jsonl")
    first = json.loads(chains.read_text().splitlines()[0])
    assert (
        "'decay': 1.0" in first["metadata"]["answers"]
        or '"decay": 1.0' in first["metadata"]["answers"]
    )
    (card,) = (out / "hf").rglob("*.yaml")
    assert "decay > 0.4" in card.read_text() and "mean decay 0.75" in card.read_text()
