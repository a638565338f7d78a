"""Reasoning models, first-class (issue #25): what every answer records, answers cut by the
token limit, empty replies that name their cause, model variants, and the estimate.

The local server answers as reasoning models do (``testing.ReasoningBrain``): hidden
reasoning tokens by effort, the request's token limit (``finish_reason: "length"`` with
cut or empty content), the content filter, text only in ``message.reasoning`` or in
thinking blocks. Where the graph is run directly, both chat clients are used (the
``services`` fixture: ``ChatOpenAI`` and the command line's ``OpenAIChat``).
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner.session import model_fields
from aidanbench.runner.spec import RunSpec, build_tasks
from aidanbench.services import ServicesFactory
from aidanbench.testing import (
    Kind,
    OpenAIStub,
    ReasoningBrain,
    Reply,
    ScriptedBrain,
    question_id,
)
from aidanbench.testing.settings import stub_flags

from .graphs import run_question
from .test_http import stub_settings

QUESTIONS = bundled_questions(2)
FIRST, SECOND = QUESTIONS
CUT = f"Idea 2 for {question_id(FIRST)}:"
"""The second answer to the first question: the one the server cuts at the token limit."""


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_args(stub: OpenAIStub, run_dir: Path, *models: str, extra: tuple[str, ...] = ()) -> list:
    args = ["run", "--questions", "2", "--run-dir", str(run_dir), *stub_flags(stub.base_url)]
    for model in models:
        args += ["-m", model]
    return [*args, "--judge-model", "judge-model", "--embedding-model", "embedding-model", *extra]


# --- every answer records finish_reason, the served model and reasoning tokens -------------


async def test_every_answer_records_its_finish_served_model_and_reasoning(
    services: ServicesFactory, stub: OpenAIStub, api_key: str
) -> None:
    stub.brain = ReasoningBrain(ScriptedBrain({FIRST: 3}), models={"model-under-test"}, cut=[CUT])
    out = await run_question(services, FIRST, stub_settings(stub))
    answers = out["answers"]
    assert [a["finish_reason"] for a in answers] == ["stop", "length", "stop", "stop"]
    assert [a["truncated"] for a in answers] == [False, True, False, False]
    assert {a["served_model"] for a in answers} == {"model-under-test"}
    assert {a["reasoning_tokens"] for a in answers} == {32}, "medium effort, as reported"
    cut = answers[1]
    assert cut["valid"] and out["score"] == 3, "a cut answer is scored as it came"
    assert not cut["raw_reply"].endswith("</answer>") and not cut["used_answer_tag"]


async def test_reasoning_tokens_a_provider_does_not_report_are_unknown_not_zero(
    services: ServicesFactory, stub: OpenAIStub, api_key: str
) -> None:
    stub.brain = ReasoningBrain(ScriptedBrain({FIRST: 1}), report_reasoning=False)
    out = await run_question(services, FIRST, stub_settings(stub))
    assert [a["reasoning_tokens"] for a in out["answers"]] == [None, None]
    assert [a["finish_reason"] for a in out["answers"]] == ["stop", "stop"]


# --- an empty reply names its cause ---------------------------------------------------------

FIRST_ANSWER = f"Idea 1 for {question_id(FIRST)}:"


class Refusing(ScriptedBrain):
    """Refuses the first answer as OpenAI does: empty content, ``message.refusal``."""

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        reply = super().chat(kind, model, prompt, body)
        if kind == "generate" and FIRST_ANSWER in reply.text:
            return Reply("", refusal="I can't help with\nthat.")
        return reply


class EmptyTag(ScriptedBrain):
    """Answers the first time with an empty ``<answer>`` tag."""

    def generate(self, question: str, previous: Any) -> str:
        return "<answer> </answer>" if not previous else super().generate(question, previous)


EMPTY_CAUSES = {
    "token limit": (
        lambda: ReasoningBrain(ScriptedBrain(), models={"model-under-test"}),
        {"model_kwargs": {"max_completion_tokens": 20}},
        "empty answer: cut by the token limit before any answer text (finish_reason length, "
        "20 reasoning tokens); raise max_completion_tokens (--model-kwargs, or the model's "
        "--variant)",
    ),
    "token limit, max_tokens": (
        lambda: ReasoningBrain(ScriptedBrain(), models={"model-under-test"}),
        {"model_kwargs": {"max_tokens": 20}},
        "raise max_tokens",
    ),
    "content filter": (
        lambda: ReasoningBrain(ScriptedBrain(), filtered=[FIRST_ANSWER]),
        {},
        "empty answer: stopped by the provider's content filter (finish_reason content_filter)",
    ),
    "reasoning field": (
        lambda: ReasoningBrain(ScriptedBrain(), style="field", reasoning_only=[FIRST_ANSWER]),
        {},
        "empty answer: the reply's text is only in its reasoning",
    ),
    "reasoning blocks": (
        lambda: ReasoningBrain(ScriptedBrain(), style="blocks", reasoning_only=[FIRST_ANSWER]),
        {},
        "empty answer: the reply's text is only in its reasoning",
    ),
    "refusal": (Refusing, {}, "empty answer: the model refused: I can't help with that."),
    "empty tag": (EmptyTag, {}, "empty answer: an empty <answer> tag (finish_reason stop)"),
}


@pytest.mark.parametrize("cause", list(EMPTY_CAUSES))
async def test_an_empty_reply_names_its_cause_and_stays_a_retryable_error(
    cause: str, services: ServicesFactory, stub: OpenAIStub, api_key: str
) -> None:
    make, settings, expected = EMPTY_CAUSES[cause]
    stub.brain = make()
    out = await run_question(services, FIRST, stub_settings(stub, pipeline=False, **settings))
    assert out["stop_reason"] == "error" and out["answers"] == [] and out["score"] == 0
    error = out["error"]
    assert error["role"] == "model" and error["retryable"] is True
    assert error["message"].startswith(f"model at 127.0.0.1:{stub.port}: empty answer: ")
    assert expected in error["message"]
    assert stub.count("embed") == 0 and stub.count("coherence") == 0, "never scored"


# --- through the command: answers.jsonl, questions.jsonl, report, HTML -----------------------


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of ``r`` (one answer cut by the token limit) and ``plain`` (none cut)."""
    run_dir = tmp_path_factory.mktemp("cut") / "run"
    brain = ReasoningBrain(ScriptedBrain({q: 3 for q in QUESTIONS}), models={"r"}, cut=[CUT])
    with pytest.MonkeyPatch.context() as patch, OpenAIStub(brain) as stub:
        patch.setenv("AIDANBENCH_TEST_KEY", "sk-test-0000-not-a-real-key")
        patch.setattr("sys.stdout", io.StringIO())
        assert main(run_args(stub, run_dir, "r", "plain")) == 0
        printed = sys.stdout.getvalue()
    assert "Answers cut by the token limit:\n  r: 1 of 8 answers cut" in printed, "the run says so"
    return run_dir


def test_finish_reason_is_in_every_answer_line_and_the_cut_one_is_flagged(cut_run: Path) -> None:
    answers = jsonl(cut_run / "answers.jsonl")
    assert answers and all(
        a["finish_reason"] == ("length" if a["model"] == "r" and CUT in a["answer"] else "stop")
        for a in answers
    )
    cut = [a for a in answers if a["truncated"]]
    assert [(a["model"], a["question"], a["index"]) for a in cut] == [("r", FIRST, 2)]
    assert cut[0]["valid"] and cut[0]["served_model"] == "r" and cut[0]["reasoning_tokens"] == 32
    plain = [a for a in answers if a["model"] == "plain"]
    assert {a["reasoning_tokens"] for a in plain} == {None}, "no usage details: unknown"
    lines = {(q["model"], q["question"]): q for q in jsonl(cut_run / "questions.jsonl")}
    assert lines[("r", FIRST)]["truncated_answers"] == 1
    assert lines[("r", SECOND)]["truncated_answers"] == 0
    assert lines[("plain", FIRST)]["truncated_answers"] == 0


def test_the_report_counts_cut_answers_and_names_the_field_that_raises_the_limit(
    cut_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["report", str(cut_run)]) == 0
    text = capsys.readouterr().out
    found = re.findall(
        r"^  (\S+): (\d+) of (\d+) answers cut by the token limit.*raise (\w+)", text, re.MULTILINE
    )
    assert found == [("r", "1", "8", "max_tokens")], text
    assert "cut by" in text and "limit" in text, "the summary's column"
    assert main(["report", "--json", str(cut_run)]) == 0
    runs = {run["model"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["r"]["truncated_answers"] == 1 and runs["plain"]["truncated_answers"] == 0
    assert runs["r"]["token_limit_field"] == "max_tokens"
    assert [q["truncated_answers"] for q in runs["r"]["questions"]] == [1, 0]


def page_data(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The summary document and chain blocks of a written HTML report."""
    html = path.read_text("utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert found is not None
    chains = re.findall(r'<script type="application/json" id="chains-\d+">(.*?)</script>', html)
    return json.loads(found.group(1)), [json.loads(c) for c in chains]


def test_the_html_report_carries_the_cut_answer(cut_run: Path) -> None:
    data, chains = page_data(cut_run / "report.html")
    rows = {g["row"]["model"]: g["row"] for g in data["groups"]}
    assert rows["r"]["truncated_answers"] == 1 and rows["plain"]["truncated_answers"] == 0
    assert len(data["truncation"]) == 1 and data["truncation"][0].startswith("r: 1 of 8")
    assert "raise max_tokens" in data["truncation"][0]
    flagged = [
        (g, answer[0])
        for g, group in enumerate(chains)
        for chain in group
        for answer in chain
        if answer[4]
    ]
    assert flagged == [(0, 2)]
    assert sum(line["cut"] for line in data["lines"]) == 1


# --- model variants -------------------------------------------------------------------------

LOW = '{"reasoning_effort": "low", "max_completion_tokens": 400}'
HIGH = '{"reasoning_effort": "high", "max_completion_tokens": 400}'


def test_two_variants_of_one_model_are_two_rows_of_one_run_directory(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    brain = ReasoningBrain(ScriptedBrain({q: 2 for q in QUESTIONS}), models={"r"})
    variants = ("--variant", f"low={LOW}", "--variant", f"high={HIGH}")
    with OpenAIStub(brain) as stub:
        assert main(run_args(stub, run_dir, "r@low", "r@high", extra=variants)) == 0
        sent = {
            (r.model, r.body.get("reasoning_effort"), r.body.get("max_completion_tokens"))
            for r in stub.of_kind("generate")
        }
        assert sent == {("r", "low", 400), ("r", "high", 400)}, "each variant's own fields"
        assert {r.model for r in stub.requests if r.kind in ("coherence", "embed")} == {
            "judge-model",
            "embedding-model",
        }
        capsys.readouterr()
        changed = ("--variant", f"low={LOW}", "--variant", 'high={"reasoning_effort": "low"}')
        calls = stub.count()
        assert main(run_args(stub, run_dir, "r@low", "r@high", extra=changed)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "r@high" in err and "--variant high=JSON" in err
        assert stub.count() == calls, "refused before any request"

    answers = jsonl(run_dir / "answers.jsonl")
    by_model = {m: [a for a in answers if a["model"] == m] for m in ("r@low", "r@high")}
    assert {a["reasoning_tokens"] for a in by_model["r@low"]} == {8}
    assert {a["reasoning_tokens"] for a in by_model["r@high"]} == {128}
    assert {a["served_model"] for a in answers} == {"r"}
    threads = [q["thread_id"] for q in jsonl(run_dir / "questions.jsonl")]
    assert [t.split("|")[0] for t in threads] == ["r@low", "r@low", "r@high", "r@high"]
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["spec"]["models"] == ["r@low", "r@high"]
    assert meta["spec"]["variants"] == {"low": json.loads(LOW), "high": json.loads(HIGH)}
    assert meta["scoring_settings"]["r@high"]["variant_fields"] == json.loads(HIGH)
    assert "variant_fields" not in meta["spec"]["settings"]
    usage = meta["usage"]["by_role_model"]
    assert "model:r@low" in usage and "model:r@high" in usage

    assert main(["report", "--json", str(run_dir)]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [run["model"] for run in runs] == ["r@low", "r@high"]
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"│ r@low\s+│", text) and re.search(r"│ r@high\s+│", text)
    data, _ = page_data(run_dir / "report.html")
    assert [g["label"] for g in data["groups"]] == ["r@low", "r@high"]


def test_a_name_with_an_at_sign_and_no_variant_is_sent_as_it_is(
    api_key: str, tmp_path: Path
) -> None:
    with OpenAIStub(ScriptedBrain({q: 1 for q in QUESTIONS})) as stub:
        assert main(run_args(stub, tmp_path / "run", "claude-3-5-sonnet@20240620")) == 0
        assert {r.model for r in stub.of_kind("generate")} == {"claude-3-5-sonnet@20240620"}


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        (("--variant", "typo={}"), "--variant typo is defined but no -m names NAME@typo"),
        (("--variant", "low={}", "--variant", "low={}"), "--variant low is given twice"),
        (("--variant", 'low={"model": "x"}'), "--variant low: must not set 'model'"),
        (("--variant", 'low={"api_key": "sk-abcdefghijklmnopqrstuv"}'), "credentials"),
        (("--variant", "lo|w={}"), "label 'lo|w' must start with a letter or digit"),
    ],
)
def test_bad_variants_are_one_line_before_anything_is_written(
    variants: tuple[str, ...],
    message: str,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    with OpenAIStub(ScriptedBrain()) as stub:
        assert main(run_args(stub, run_dir, "r@low", extra=variants)) == 2
        assert stub.count() == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert "sk-abcdefghijklmnopqrstuv" not in err
    assert not run_dir.exists()


def test_the_python_api_expresses_variants(tmp_path: Path) -> None:
    spec = RunSpec(
        models=["o3-mini@high", "o3-mini@low", "vertex@2024"],
        questions=["Q?"],
        run_dir=tmp_path,
        settings={"model_kwargs": {"max_completion_tokens": 900, "reasoning_effort": "medium"}},
        variants={"high": {"reasoning_effort": "high"}, "low": {"reasoning_effort": "low"}},
    )
    tasks = build_tasks(spec, model_fields(spec, None), spec.questions_list)
    settings = {t.settings.model: t.settings for t in tasks}
    assert settings["o3-mini@high"].provider_model == "o3-mini"
    assert settings["o3-mini@high"].request_fields == {
        "max_completion_tokens": 900,
        "reasoning_effort": "high",
    }
    assert settings["vertex@2024"].provider_model == "vertex@2024"
    assert settings["vertex@2024"].variant_fields is None
    assert [t.thread_id.split("|")[0] for t in tasks] == [
        "o3-mini@high",
        "o3-mini@low",
        "vertex@2024",
    ]
    with pytest.raises(ValueError, match="no model is named NAME@typo"):
        RunSpec(models=["m@low"], questions=["Q?"], run_dir=tmp_path, variants={"typo": {}})
    with pytest.raises(ValueError, match="must not set 'temperature'"):
        RunSpec(
            models=["m@low"],
            questions=["Q?"],
            run_dir=tmp_path,
            variants={"low": {"temperature": 0}},
        )
    with pytest.raises(ValueError, match="set by the run"):
        RunSpec(models=["m"], questions=["Q?"], run_dir=tmp_path, settings={"variant_fields": {}})
    with pytest.raises(ValueError, match="names no variant"):
        Settings(model="m", variant_fields={})


# --- the estimate counts reasoning tokens ------------------------------------------------


def estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    judge = () if "--judge-model" in args else ("--judge-model", "judge-model")
    assert main(["estimate", "--questions", "2", *judge, "--json", *args]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_the_estimate_counts_reasoning_measured_given_or_assumed(
    cut_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured = estimate_json(capsys, "-m", "r", "-m", "plain", "--answers-from", str(cut_run))
    r, plain = measured["models"]
    generate = {
        model: [
            a["calls"]["generate"] for a in jsonl(cut_run / "answers.jsonl") if a["model"] == model
        ]
        for model in ("r", "plain")
    }
    generation = r["per_request"]["model"]
    assert generation["output_tokens"]["expected"] == (
        sum(c["output_tokens"] for c in generate["r"]) / 8
    ), "as the run recorded them, reasoning included"
    assert generation["reasoning_tokens"] == {"low": 32.0, "expected": 32.0, "high": 32.0}
    assert generation["output_basis"] == "measured: 8 replies"
    unsplit = plain["per_request"]["model"]
    assert (
        unsplit["output_tokens"]["expected"]
        == sum(c["output_tokens"] for c in generate["plain"]) / 8
    )
    assert unsplit["reasoning_tokens"] is None, "not reported: unknown, never 0"
    assert (
        unsplit["output_basis"]
        == "measured: 8 replies, their reasoning included but not reported apart"
    )
    for column in ("low", "expected", "high"):
        assert plain[column]["reasoning_tokens"] is None and r[column]["reasoning_tokens"] is None
        assert r[column]["calls"] == plain[column]["calls"]
        assert r[column]["output_tokens"] > plain[column]["output_tokens"], "r reasons"

    variants = ("--variant", 'high={"reasoning_effort": "high"}', "--variant", "low={}")
    priced = ("--judge-model", "gpt-4.1-mini")
    assumed = estimate_json(capsys, "-m", "o3-mini@high", "-m", "o3-mini@low", *variants, *priced)
    high, low = assumed["models"]
    assert high["sent_as"] == low["sent_as"] == "o3-mini"
    band = high["per_request"]["model"]
    assert band["reasoning_tokens"] == {"low": 8_192, "expected": 20_480, "high": 32_768}
    answer = high["chains"]["answer_bytes"] / 4
    assert band["output_tokens"] == {k: v + answer for k, v in band["reasoning_tokens"].items()}
    assert band["output_basis"] == (
        f"assumed: the answers' {answer:,.0f} tokens; reasoning assumed: effort high's "
        "published budget band"
    )
    band = low["per_request"]["model"]["reasoning_tokens"]
    assert band == {"low": 1_024, "expected": 4_608, "high": 8_192}, "medium"
    assert high["expected"]["dollars"] > low["expected"]["dollars"] > 0, "priced as o3-mini"
    assert "reasoning tokens per request" in assumed["assumptions"]

    capped = estimate_json(
        capsys, "-m", "o3-mini", "--model-kwargs", '{"max_completion_tokens": 2000}'
    )["models"][0]["per_request"]["model"]
    assert capped["reasoning_tokens"]["low"] == 1_024 and capped["reasoning_tokens"]["high"] < 2_000
    assert "capped by max_completion_tokens 2,000" in capped["output_basis"]
    given = estimate_json(capsys, "-m", "plain", "--reasoning-tokens", "100")["models"][0]
    assert given["per_request"]["model"]["reasoning_tokens"]["expected"] == 100.0
    assert given["per_request"]["model"]["output_basis"].endswith(
        "; reasoning given (--reasoning-tokens)"
    )


def test_a_dry_run_with_variants_estimates_each_row(
    api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variants = ("--variant", 'high={"reasoning_effort": "high"}', "--variant", "low={}")
    with OpenAIStub(ScriptedBrain()) as stub:
        command = run_args(stub, tmp_path / "run", "o3-mini@high", "o3-mini@low", extra=variants)
        capsys.readouterr()
        assert main([*command, "--dry-run"]) == 0
        assert stub.count() == 0 and not (tmp_path / "run").exists()
    text = capsys.readouterr().out
    assert "o3-mini@high (sent as o3-mini): chains of " in text
    assert "o3-mini@low (sent as o3-mini): chains of " in text
    high, low = text.split("o3-mini@high (sent as o3-mini): chains of ")[1].split("o3-mini@low")[:2]
    assert "of which reasoning 8,192 / 20,480 / 32,768 (assumed: " in high
    assert "of which reasoning 1,024 / 4,608 / 8,192 (assumed: " in low
