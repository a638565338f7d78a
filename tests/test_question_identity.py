"""One question, one identity: spellings that differ only in surrounding whitespace or
Unicode form are one question in a question set, a run, a resumed run and a report."""

from __future__ import annotations

import asyncio
import json
import unicodedata
from pathlib import Path

import pytest

from aidanbench.cli.main import main
from aidanbench.core.errors import printable
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.lines import thread_id
from aidanbench.runner.engine import Prepared, execute
from aidanbench.runner.session import model_fields
from aidanbench.runner.spec import RunSpec, build_tasks
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE
from tests.commands import stub_run

QUESTION = bundled_questions(1)[0]
TRAILING = QUESTION + " "
CAFE = "What could a caf\u00e9 offer that no other does?"
CAFE_DECOMPOSED = unicodedata.normalize("NFD", CAFE)
TWINS = {
    "surrounding whitespace": TRAILING,
    "a double space": QUESTION.replace(" ", "  ", 1),
    "a tab": QUESTION.replace(" ", "\t", 1),
    "a no-break space": QUESTION.replace(" ", "\u00a0", 1),
    "a zero-width space": QUESTION.replace(" ", " \u200b", 1),
    "a line end inside": QUESTION.replace(" ", "\r\n", 1),
}


def endpoints(url: str) -> dict[str, str]:
    fields = {}
    for role in ("", "judge_", "embedding_"):
        fields[f"{role}base_url"] = url
        fields[f"{role}api_key_env"] = TEST_KEY_VARIABLE
    return fields


def run_as_spelled(stub: OpenAIStub, run_dir: Path, spellings: list[str]) -> None:
    """A run whose threads ask the questions exactly as spelled, as every run did before
    questions were normalised: the same tasks, thread ids and lines that code wrote."""
    settings = {**endpoints(stub.base_url), "judge_model": "j", "embedding_model": "e"}
    spec = RunSpec(
        models=["m1"],
        questions=list(dict.fromkeys(q.strip() for q in spellings)),
        run_dir=run_dir,
        settings=settings,
    )
    tasks = build_tasks(spec, model_fields(spec, None), spellings)
    asyncio.run(execute(Prepared(spec, tasks, None)))


def command(
    stub: OpenAIStub, run_dir: Path, questions: Path, *extra: str, model: str = "m1"
) -> list[str]:
    return stub_run(stub.base_url, run_dir, "--questions-file", str(questions), *extra, model=model)


def questions_file(tmp_path: Path, questions: list[str]) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(questions, ensure_ascii=False), "utf-8")
    return path


def jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("first", "second"),
    [(QUESTION, twin) for twin in TWINS.values()] + [(CAFE, CAFE_DECOMPOSED)],
    ids=[*TWINS, "Unicode form"],
)
def test_two_spellings_of_one_question_are_refused_naming_both(
    first: str,
    second: str,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = questions_file(tmp_path, ["another question?", first, second])
    with OpenAIStub() as stub:
        code = main(command(stub, tmp_path / "run", path, "--dry-run"))
        assert stub.count() == 0
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "question 3 repeats question 2" in err
    assert printable(repr(first)) in err and printable(repr(second)) in err, "both, escaped"
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="question 2 repeats question 1"):
        RunSpec(models=["m"], questions=[first, second], run_dir=tmp_path / "api")


def test_questions_are_asked_in_their_normal_form(api_key: str, tmp_path: Path) -> None:
    path = questions_file(tmp_path, [CAFE_DECOMPOSED + "\n"])
    with OpenAIStub(ScriptedBrain({CAFE: 2})) as stub:
        assert main(command(stub, tmp_path / "run", path)) == 0
        prompts = [r.prompt for r in stub.of_kind("generate")]
    assert prompts and all(f"<question>{CAFE}</question>" in p for p in prompts)
    (line,) = jsonl(tmp_path / "run" / "questions.jsonl")
    assert line["question"] == CAFE and line["score"] == 2


def fail_third_answer_once(info: RequestInfo) -> Fault | None:
    """The third generation of the question fails once with a 400 (not retried): the
    question stops with an error, and the next session continues it."""
    if (
        info.kind == "generate"
        and info.attempt == 1
        and info.prompt.count("<previous_answer ") == 2
    ):
        return Fault(status=400)
    return None


@pytest.mark.parametrize("spelled", [TRAILING, unicodedata.normalize("NFD", CAFE)])
def test_a_run_made_before_normalisation_resumes_its_threads(
    spelled: str, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    normal = unicodedata.normalize("NFC", spelled).strip()
    run_dir = tmp_path / "run"
    brain = ScriptedBrain({spelled: 5, normal: 5})
    with OpenAIStub(brain, faults=fail_third_answer_once) as stub:
        run_as_spelled(stub, run_dir, [spelled])
        (before,) = jsonl(run_dir / "questions.jsonl")
        assert before["stop_reason"] == "error" and before["score"] == 2
        old_id = thread_id("m1", 0.7, 1, spelled)
        assert before["thread_id"] == old_id != thread_id("m1", 0.7, 1, normal)
        asked = len(stub.of_kind("generate"))

        capsys.readouterr()
        assert main(command(stub, run_dir, questions_file(tmp_path, [spelled]))) == 0
        again = stub.of_kind("generate")[asked:]
    (after,) = jsonl(run_dir / "questions.jsonl")
    assert after["thread_id"] == old_id, "the old thread was found"
    assert after["score"] == 5 and after["stop_reason"] != "error"
    assert all(r.prompt.count("<previous_answer ") >= 2 for r in again), "nothing asked again"
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert [(q["question"], q["score"]) for q in run["questions"]] == [(normal, 5)]


def test_a_run_holding_both_spellings_counts_the_question_once(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain({QUESTION: 4, TRAILING: 6})) as stub:
        run_as_spelled(stub, run_dir, [QUESTION, TRAILING])
        assert len(jsonl(run_dir / "questions.jsonl")) == 2, "the old code asked it twice"
        capsys.readouterr()
        assert main(command(stub, run_dir, questions_file(tmp_path, [TRAILING]))) == 0
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["totals"]["score"] == 4 and meta["questions"] == 1
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    (run,) = payload["runs"]
    assert run["score"] == 4 and run["question_count"] == 1
    assert any("counted once" in w for w in payload["warnings"])
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "headline (count): m1 @ 0.7: 4" in text and "counted once" in text


def test_reports_pair_spellings_across_inputs(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    with OpenAIStub(ScriptedBrain({TRAILING: 3, QUESTION: 3})) as stub:
        run_as_spelled(stub, old, [TRAILING])
        capsys.readouterr()
        path = questions_file(tmp_path, [QUESTION])
        assert main(command(stub, new, path, model="m2")) == 0
    capsys.readouterr()
    assert main(["report", str(old), str(new), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [[q["question"] for q in run["questions"]] for run in payload["runs"]] == [
        [QUESTION],
        [QUESTION],
    ]
    assert main(["report", str(old), str(new), "--compare", "m1", "m2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["comparison"]["pairs"] == 1


def test_a_csv_field_holding_a_line_end_is_one_question(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "questions.csv"
    path.write_bytes(b'question\r\n"What can\r\na lantern light?"\r\nWhat can a lantern light?\r\n')
    with OpenAIStub() as stub:
        assert main(command(stub, tmp_path / "run", path, "--dry-run")) == 2
        assert stub.count() == 0
    assert "question 2 repeats question 1" in capsys.readouterr().err


def test_resuming_with_another_spelling_asks_nothing_again(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain({QUESTION: 3})) as stub:
        assert main(command(stub, run_dir, questions_file(tmp_path, [QUESTION]))) == 0
        asked = stub.count("generate")
        for twin in TWINS.values():
            assert main(command(stub, run_dir, questions_file(tmp_path, [twin]))) == 0
        assert stub.count("generate") == asked, "every spelling found the finished thread"
    (line,) = jsonl(run_dir / "questions.jsonl")
    assert line["question"] == QUESTION and line["score"] == 3


NOT_ONE_SPELLING = {
    "a record separator": "m\x1e1",
    "a lone carriage return": "m\r1",
    "a paragraph separator": "m\u20291",
    "surrounding whitespace": "\tm1 ",
    "a zero-width space": "m1\u200b",
    "Unicode form": unicodedata.normalize("NFD", "model@caf\u00e9"),
}
"""Model names their normal form would change, so the provider would be sent another."""


@pytest.mark.parametrize("name", NOT_ONE_SPELLING.values(), ids=NOT_ONE_SPELLING)
def test_a_model_name_the_normal_form_would_change_is_refused_in_one_line(
    name: str, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused as a variant label holding such a character is, before anything is sent or
    written: folded, the name sent would not be the one given."""
    with pytest.raises(ValueError, match="is not written in its normal form"):
        RunSpec(models=[name], questions=1, run_dir=tmp_path / "spec")
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        assert main([*stub_run(stub.base_url, run_dir, "--questions", "1", model=name)]) == 2
        assert stub.count() == 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--model {printable(ascii(name))} is not written in its normal form" in line
    assert not run_dir.exists()


def test_a_model_name_is_one_spelling_everywhere(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What is sent, recorded, reported and forgotten is the name as given."""
    name, composed = "my model@caf\u00e9", "model@caf\u00e9"
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain({QUESTION: 2})) as stub:
        for model in (name, composed):
            assert main([*stub_run(stub.base_url, run_dir, "--questions", "1", model=model)]) == 0
        sent = {r.model for r in stub.of_kind("generate")}
    assert sent == {name, composed}
    assert {line["model"] for line in jsonl(run_dir / "questions.jsonl")} == {name, composed}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    assert {run["model"] for run in json.loads(capsys.readouterr().out)["runs"]} == sent
    assert main(["forget", str(run_dir), "-m", name]) == 0
    assert {line["model"] for line in jsonl(run_dir / "questions.jsonl")} == {composed}
    with pytest.raises(ValueError, match="a model is given twice"):
        RunSpec(models=[composed, composed], questions=1, run_dir=tmp_path)
