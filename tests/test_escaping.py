"""Nothing from outside reaches a terminal raw: escape sequences, newlines and rich markup
in a question, a model name or a provider's error are shown escaped, as text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aidanbench.cli.main import main
from aidanbench.core.errors import printable
from aidanbench.testing import Fault, OpenAIStub, RequestInfo, ScriptedBrain
from tests.commands import stub_run

OSC_LINK = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07"
QUESTION = f"What is {OSC_LINK} \x1b[2J[bold red]loud[/bold red]\nforged: line?"
ERRORED = "Why \x9b31m does this fail?"
MODEL = "m\x1b[31mred[link=https://evil.example]x[/link]"
PROVIDER_ERROR = "bad request \x1b]0;pwned\x07\x1b[1A\rforged line"
RAW = ("\x1b", "\x07", "\x9b", "\r")


def refuse_errored(info: RequestInfo) -> Fault | None:
    if info.kind == "generate" and ERRORED in info.prompt:
        return Fault(status=400, body={"error": {"message": PROVIDER_ERROR, "type": "x"}})
    return None


def raw_in(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def test_printable_escapes_every_control_that_moves_or_styles_a_terminal() -> None:
    for text in (QUESTION, MODEL, PROVIDER_ERROR, "a\u202eb", "a\u2028b", "x\ud800y"):
        shown = printable(text)
        assert not raw_in(shown) and "\n" not in shown
        assert not any(c in shown for c in "\u202e\u2028\ud800")
    assert printable("[bold]x[/bold] é ✓") == "[bold]x[/bold] é ✓", "plain text unchanged"


def test_run_report_and_rescore_print_outside_text_escaped(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([QUESTION, ERRORED]))
    run_dir = tmp_path / "run"
    brain = ScriptedBrain({QUESTION: 2, ERRORED: 2})
    with OpenAIStub(brain, faults=refuse_errored) as stub:
        command = stub_run(stub.base_url, run_dir, "--questions-file", str(questions), model=MODEL)
        assert main(command) == 1, "one question stopped on the provider's error"
    ran = capsys.readouterr()
    outputs = {"run": ran.out + ran.err}
    assert main(["report", str(run_dir)]) == 0
    outputs["report"] = capsys.readouterr().out
    rescore = ["rescore", str(run_dir), "--coherence-threshold", "20", "--novelty-threshold", "0.2"]
    assert main(rescore) == 0
    outputs["rescore"] = capsys.readouterr().out
    for name, text in outputs.items():
        assert not raw_in(text), (name, raw_in(text))
        assert "\\x1b" in text, f"{name} shows the sequences escaped"
        assert not any(
            "forged" in line and "Why" not in line and "What" not in line
            for line in text.splitlines()
        ), f"{name}: a newline forged a line"
    assert "[link=https://evil.example]x[/link]" in outputs["report"], "markup shown as text"
    assert "\\x1b]0;pwned" in outputs["run"], "the provider's error, escaped"
