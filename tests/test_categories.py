"""Question categories: read from every kind of question file (and a dataset's column),
recorded with the run, and reported per category beside the totals in every view, with
the same lower-bound marks, never changing what is asked or scored."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.view import load_source, view_data
from aidanbench.cli.main import main
from aidanbench.core.errors import QuestionSourceError
from aidanbench.graph.questions import load_question_set
from aidanbench.record.lines import thread_id
from aidanbench.runner import Progress, RunSpec, run_sync
from aidanbench.testing import OpenAIStub, ScriptedBrain, http_error, when
from aidanbench.testing.settings import stub_settings

QUESTIONS = {
    "What could a city do with empty parking garages?": "cities",
    "How might a library stay relevant?": "cities",
    "What is a good name for a lighthouse keeper's cat?": "names",
}
"""Three questions in two categories; the cat's will end on an error for one model."""
FAILING = "What is a good name for a lighthouse keeper's cat?"


def test_every_file_kind_gives_categories(tmp_path: Path) -> None:
    objects = [{"question": q, "category": c} for q, c in QUESTIONS.items()]
    files = {
        "set.json": json.dumps([*objects[:2], FAILING]),  # a plain string: no category
        "set.jsonl": "\n".join(json.dumps(o) for o in objects),
        "set.csv": "question,category\n"
        + "\n".join(f'"{q}",{c}' for q, c in QUESTIONS.items())
        + "\nA question with an empty cell?,\n",
    }
    found = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text, "utf-8")
        found[name] = load_question_set(tmp_path / name).categories
    assert found["set.json"] == {q: c for q, c in QUESTIONS.items() if q != FAILING}
    assert found["set.jsonl"] == QUESTIONS
    assert found["set.csv"] == QUESTIONS, "an empty cell is no category"
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text(json.dumps({"question": " Q? ", "category": " cities\u200b "}), "utf-8")
    assert load_question_set(spaced).categories == {"Q?": "cities"}, "both in their normal form"


@pytest.mark.parametrize("category", [3, ["a"], {"name": "a"}, True])
def test_a_category_that_is_not_a_name_is_one_line(tmp_path: Path, category: Any) -> None:
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"question": "Q?", "category": category}]), "utf-8")
    with pytest.raises(QuestionSourceError) as caught:
        load_question_set(path)
    assert "the category of question 1" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_a_limit_keeps_the_categories_of_the_questions_kept(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(
        "\n".join(json.dumps({"question": q, "category": c}) for q, c in QUESTIONS.items())
    )
    assert load_question_set(path, limit=1).categories == {next(iter(QUESTIONS)): "cities"}


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs the [hf] extra")
def test_a_dataset_category_column_gives_categories(tmp_path: Path) -> None:
    data = tmp_path / "questions.jsonl"
    data.write_text(
        "\n".join(json.dumps({"question": q, "category": c}) for q, c in QUESTIONS.items())
    )
    found = load_question_set(str(data), dataset=True)
    assert found.categories == QUESTIONS


def test_categories_name_only_questions_asked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="categories name a question not asked"):
        RunSpec(models=["m"], questions=["Q?"], run_dir=tmp_path, categories={"Other?": "x"})


@pytest.fixture
def categorised_run(tmp_path: Path, api_key: str) -> Path:
    """Two models over the three questions; model ``b`` errors on the cat's name."""
    fault = when("generate", http_error(400, "refused"), match=FAILING)
    run_dir = tmp_path / "run"

    def only_b(info: Any) -> Any:
        return fault(info) if info.model == "b" else None

    with OpenAIStub(ScriptedBrain(dict.fromkeys(QUESTIONS, 3)), faults=only_b) as stub:
        chosen = stub_settings(stub.base_url)
        fields = chosen.model_dump(include=set(chosen.model_fields_set) - {"model"})
        spec = RunSpec(
            models=["a", "b"],
            questions=list(QUESTIONS),
            categories=QUESTIONS,
            run_dir=run_dir,
            settings={**fields, "max_retries": 0},
            preflight=False,
        )
        run_sync(spec, progress=Progress(out=io.StringIO(), live=False))
    return run_dir


def test_a_categorised_run_reports_per_category_everywhere(
    categorised_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = json.loads((categorised_run / "metadata.json").read_text())
    assert metadata["categories"] == QUESTIONS
    lines = [json.loads(x) for x in (categorised_run / "questions.jsonl").read_text().splitlines()]
    assert {x["thread_id"] for x in lines} == {
        thread_id(m, 0.7, 1, q) for m in ("a", "b") for q in QUESTIONS
    }, "a category changes no thread"

    assert main(["report", "--json", str(categorised_run)]) == 0
    runs = {run["model"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["a"]["categories"] == [
        {
            "category": "cities",
            "questions": 2,
            "score": 6,
            "lower_bound": False,
            "score_interval": None,
        },
        {
            "category": "names",
            "questions": 1,
            "score": 3,
            "lower_bound": False,
            "score_interval": None,
        },
    ]
    assert runs["b"]["categories"][1] == {
        "category": "names",
        "questions": 1,
        "score": 0,
        "lower_bound": True,
        "score_interval": None,
    }
    assert sum(c["score"] for c in runs["a"]["categories"]) == runs["a"]["score"]

    assert main(["report", str(categorised_run)]) == 0
    text = capsys.readouterr().out
    assert "Valid answers per category" in text
    assert "cities (2)" in text and "≥ 0" in text

    data, _ = view_data([load_source(categorised_run)])
    rows = {g["row"]["model"]: g["row"] for g in data["groups"]}
    assert rows["b"]["categories"] == runs["b"]["categories"], "one number everywhere"

    base = ["rescore", "--json", str(categorised_run), "--coherence-threshold", "15"]
    assert main([*base, "--novelty-threshold", "0.15"]) == 0
    rescored = {r["model"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rescored["a"]["categories"] == runs["a"]["categories"]


def test_runs_without_categories_report_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference_run: Path
) -> None:
    assert main(["report", "--json", str(reference_run)]) == 0
    assert all("categories" not in run for run in json.loads(capsys.readouterr().out)["runs"])
    assert main(["report", str(reference_run)]) == 0
    assert "question category" not in capsys.readouterr().out


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("inspect_ai", "huggingface_hub")),
    reason="needs the [export] extra",
)
def test_the_exports_carry_each_category(categorised_run: Path, tmp_path: Path) -> None:
    from inspect_ai.log import read_eval_log

    out = tmp_path / "out"
    for fmt, more in (("inspect", []), ("every-eval-ever", []), ("hf", ["--hf-dataset", "a/b"])):
        assert (
            main(["export", "--format", fmt, "-o", str(out / fmt), *more, str(categorised_run)])
            == 0
        )
    for aggregate in (out / "every-eval-ever").rglob("*.json"):
        document = json.loads(aggregate.read_text())
        if document["model_info"]["name"] != "b":
            continue
        found = {
            r["metric_config"].get("metric_parameters", {}).get("category"): r["score_details"]
            for r in document["evaluation_results"]
        }
        assert found["names"]["score"] == 0
        assert found["names"]["details"]["score_is_lower_bound"] == "true"
        assert found["cities"]["score"] == 6
    logs = {
        read_eval_log(str(p)).eval.model: read_eval_log(str(p))
        for p in (out / "inspect").rglob("*.eval")
    }
    assert [c["score"] for c in logs["b"].results.metadata["categories"]] == [6, 0]  # type: ignore[union-attr]
    cards = [p.read_text() for p in (out / "hf").rglob("*.yaml")]
    assert any("category names: score ≥ 0" in card for card in cards)
