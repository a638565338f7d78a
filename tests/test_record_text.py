"""Any text a model or a dataset writes reads back exactly: every Unicode line and
paragraph separator, NEL, form feed, vertical tab and NUL in an answer, through every
command that reads a run directory; a question holding one is asked and read back in its
normal form (``record.lines.normal_text``), where each is a space."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import read_questions_file
from aidanbench.record.lines import normal_text, read_lines
from aidanbench.testing import OpenAIStub, ScriptedBrain
from tests.commands import stub_run

BREAKS = "\u2028\u2029\x85\x0c\x0b\x1c\x1d\x1e\x00\r"
"""Every character ``str.splitlines`` splits on besides ``\\n``, and NUL."""

QUESTIONS = [f"What is a name{BREAKS[0]}for a river?", "What can a lantern light?"]


class Separating(ScriptedBrain):
    """The scripted answers with every separator inside each one."""

    def answer_text(self, question: str, k: int, previous: Sequence[str] = ()) -> str:
        text = super().answer_text(question, k, previous)
        if previous and text == previous[0]:
            return text  # the repeat that ends the chain stays a repeat
        return f"{text[:12]}{BREAKS}{text[12:]}"


@pytest.fixture
def run_dir(api_key: str, tmp_path: Path) -> Path:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS), "utf-8")
    run_dir = tmp_path / "run"
    with OpenAIStub(Separating({q: 3 for q in QUESTIONS})) as stub:
        command = stub_run(stub.base_url, run_dir, "--questions-file", str(questions))
        assert main(command) == 0
    return run_dir


def test_answers_and_questions_read_back_exactly(run_dir: Path) -> None:
    lines = read_lines(run_dir)
    assert [line.question for line in lines] == [normal_text(q) for q in QUESTIONS]
    assert lines[0].question == "What is a name for a river?", (
        "a separator in a question is a space"
    )
    assert [line.score for line in lines] == [3, 3]
    for line in lines:
        for answer in line.answers[:-1]:
            assert BREAKS in answer.answer, "every separator kept, in place"
    raw = (run_dir / "answers.jsonl").read_bytes()
    assert raw.count(b"\n") == sum(len(line.answers) for line in lines), "one line per answer"


def test_every_command_reads_the_run(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = [
        ["report", str(run_dir)],
        ["view", str(run_dir), "-o", str(tmp_path / "view.html")],
        ["rescore", str(run_dir), "--coherence-threshold", "20", "--novelty-threshold", "0.2"],
        ["export", str(run_dir), "--format", "every-eval-ever", "-o", str(tmp_path / "eee")],
        ["forget", "-m", "m1", str(run_dir)],
    ]
    for command in commands:
        assert main(command) == 0, (command, capsys.readouterr().err)


def test_a_plain_text_file_splits_on_line_ends_only(tmp_path: Path) -> None:
    path = tmp_path / "questions.txt"
    path.write_bytes("One\u2028question?\r\nTwo\x0cquestion\x85here?\nThree?\n".encode())
    questions, categories = read_questions_file(path)
    assert questions == ["One\u2028question?", "Two\x0cquestion\x85here?", "Three?"]
    assert categories == [None] * 3
