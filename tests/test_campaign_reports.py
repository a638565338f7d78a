"""Reports over a campaign: several runs side by side, repeats, reward mode, one set of totals.

The run directories are written by the real ``aidanbench run`` against the local server
(a scripted brain: 3, 5 and 7 valid answers on the three questions, 15 per repeat), once
per module, and every test reads them through the real commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.summary import BOOTSTRAP_RESAMPLES, bootstrap_sum, summarise, warnings
from aidanbench.cli.main import main
from aidanbench.graph.benchmark import summarize_results
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.lines import QuestionLine
from aidanbench.record.results import question_result, totals
from aidanbench.record.results import read_results as read_run_dir
from aidanbench.testing import OpenAIStub, Reply, ScriptedBrain
from aidanbench.testing.settings import stub_flags

from .conftest import KEY_VARIABLES, TEST_KEY

QUESTIONS = bundled_questions(3)
LENGTHS = {q: n for q, n in zip(QUESTIONS, (3, 5, 7), strict=True)}
PER_REPEAT = sum(LENGTHS.values())


class PerModelBrain(ScriptedBrain):
    """The scripted brain, each model's fresh ideas named after it.

    Models then share no answer text, so no run's embeddings or judgements are cache hits
    of another model's: a model's calls are the same whichever runs it shared a directory
    with.
    """

    def chat(self, kind: Any, model: str, prompt: str, body: Any) -> Reply:
        reply = super().chat(kind, model, prompt, body)
        if kind == "generate" and reply.text.startswith("<answer>Idea "):
            return dataclasses.replace(reply, text=f"<answer>{model}: {reply.text[8:]}")
        return reply


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Run directories: ``both`` (m1 and m2), ``a`` (m1), ``b`` (m2), ``b_other`` (m2 with
    another judge and novelty threshold), ``repeats`` (m1, 3 repeats), ``novelty`` (m1,
    reward mode novelty_sum)."""
    root = tmp_path_factory.mktemp("campaign")
    listed = ("m1", "m2", "o1-mini", "other-judge", "text-embedding-3-large")
    with (
        pytest.MonkeyPatch.context() as patch,
        OpenAIStub(PerModelBrain(LENGTHS), models=listed) as stub,
    ):
        for name in KEY_VARIABLES:
            patch.setenv(name, TEST_KEY)
        plans = {
            "both": ["-m", "m1", "-m", "m2"],
            "a": ["-m", "m1"],
            "b": ["-m", "m2"],
            "b_other": ["-m", "m2", "--judge-model", "other-judge", "--novelty-threshold", "0.2"],
            "repeats": ["-m", "m1", "--repeats", "3"],
            "novelty": ["-m", "m1", "--reward-mode", "novelty_sum"],
        }
        dirs = {}
        for name, extra in plans.items():
            dirs[name] = root / name
            argv = ["run", *extra, "--questions", str(len(QUESTIONS)), "--no-pipeline"]
            argv += [*stub_flags(stub.base_url), "--run-dir", str(dirs[name])]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert main(argv) == 0, name
            (dirs[name] / "printed.txt").write_text(printed.getvalue(), "utf-8")
        yield dirs


def output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def report_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(output(capsys, "report", *argv, "--json"))
    return data


# --- several runs side by side -----------------------------------------------------------


def scored(payload: dict[str, Any]) -> dict[str, Any]:
    """A report without what was sent: two runs batch their embeddings apart, so they send
    a few more requests than one run holding both (everything scored is the same)."""
    sent = ("sent", "dollars", "dollars_bound")
    cost = {k: v for k, v in payload["cost"].items() if k not in sent}
    return payload | {"cost": cost}


def scored_text(text: str) -> str:
    """The text report without its lines of what was sent (see ``scored``)."""
    return "\n".join(
        x
        for x in text.splitlines()
        if not x.startswith(("Run total as sent", "  sent ", "  of these, "))
    )


def test_report_of_two_run_dirs_equals_report_of_one_holding_both(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, both = str(runs["a"]), str(runs["b"]), str(runs["both"])
    assert scored(report_json(capsys, a, b)) == scored(report_json(capsys, both))
    assert scored_text(output(capsys, "report", a, b)) == scored_text(
        output(capsys, "report", both)
    )
    compared = ("--compare", "m1", "m2")
    assert scored(report_json(capsys, a, b, *compared)) == scored(
        report_json(capsys, both, *compared)
    )
    data = report_json(capsys, a, b)
    assert [run["model"] for run in data["runs"]] == ["m1", "m2"]
    assert [run["score"] for run in data["runs"]] == [PER_REPEAT, PER_REPEAT]
    assert data["warnings"] == []


def test_questions_are_paired_by_text_across_inputs(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["a"]), str(runs["b"]))
    for run in data["runs"]:
        assert [(q["index"], q["question"]) for q in run["questions"]] == list(
            enumerate(QUESTIONS, 1)
        )
    text = output(capsys, "report", str(runs["a"]), str(runs["b"]))
    rows = [line for line in text.splitlines() if line.lstrip("│ ").startswith("Q")]
    assert len(rows) == len(QUESTIONS), "one row per question, both models in it"


def test_the_same_model_in_two_inputs_stays_two_rows(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["a"]), str(runs["both"]))
    assert [run["model"] for run in data["runs"]] == ["m1 [a]", "m1 [both]", "m2"]


def test_inputs_with_another_judge_and_thresholds_warn_one_line_each(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["a"]), str(runs["b_other"]))
    found = data["warnings"]
    judge = [w for w in found if "different judge models" in w]
    thresholds = [w for w in found if "different thresholds" in w]
    assert len(judge) == 1 and "other-judge: m2 @ 0.7" in judge[0]
    assert len(thresholds) == 1 and "novelty > 0.2: m2 @ 0.7" in thresholds[0]
    assert not [w for w in found if "embedding" in w or "prompt" in w]
    uncalibrated = [w for w in found if "o1-mini's threshold, uncalibrated" in w]
    assert len(uncalibrated) == 1 and uncalibrated[0].startswith("m2 @ 0.7: judged by other-judge")
    text = output(capsys, "report", str(runs["a"]), str(runs["b_other"]))
    starts = [line for line in text.splitlines() if line.startswith("warning: ")]
    assert len(starts) == len(found) == 3, "one warning each (folded to the terminal's width)"
    flat = " ".join(text.split())
    assert all(" ".join(w.split()) in flat for w in found)


def test_different_prompts_warn(runs: dict[str, Path]) -> None:
    first = read_run_dir(runs["a"])
    other = [dataclasses.replace(r, prompts_sha256="0" * 64) for r in read_run_dir(runs["b"])]
    assert first[0].prompts_sha256 is not None and len(first[0].prompts_sha256) == 64
    (found,) = warnings([*first, *other])
    assert "different prompt texts" in found and "prompts 000000000000: m2 @ 0.7" in found


def test_plot_and_rescore_take_several_inputs(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    printed = output(capsys, "plot", str(runs["a"]), str(runs["b"]), "-o", str(tmp_path))
    assert len(printed.split()) == 4 and (tmp_path / "scores.png").stat().st_size > 0
    rescore = ("--coherence-threshold", "15", "--novelty-threshold", "0.15", "--json")
    data = json.loads(output(capsys, "rescore", str(runs["a"]), str(runs["b"]), *rescore))
    assert [run["score"] for run in data["runs"]] == [PER_REPEAT, PER_REPEAT]


def test_an_unreadable_second_input_is_one_line_before_any_output(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["report", str(runs["a"]), str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "missing" in captured.err


def test_an_input_given_twice_is_refused(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    same = str(runs["a"] / ".." / "a")
    assert main(["report", str(runs["a"]), same]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "given twice" in captured.err


# --- repeats ----------------------------------------------------------------------------


def test_repeats_headline_is_the_mean_not_the_sum(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (run,) = report_json(capsys, str(runs["repeats"]))["runs"]
    assert run["score"] == PER_REPEAT, "3 repeats of a 15-point model score 15, not 45"
    assert run["reward"] == PER_REPEAT
    assert run["repeat_scores"] == [PER_REPEAT] * 3
    assert run["repeats"] == 3 and run["lines"] == 3 * len(QUESTIONS)
    expected = bootstrap_sum([float(n) for n in LENGTHS.values()])
    assert expected is not None and run["score_interval"] == list(expected), (
        "identical repeats: the one repeat's questions resampled"
    )
    text = output(capsys, "report", str(runs["repeats"]))
    row = next(line for line in text.splitlines() if line.startswith("│ m1"))
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:5] == ["m1", "0.7", f"{PER_REPEAT}.0", "3", "15/15/15"]
    assert f"headline (count): m1 @ 0.7: {PER_REPEAT} (mean of 3 repeats" in text
    page = (runs["repeats"] / "report.html").read_text("utf-8")
    assert '"score":15,' in page, "the HTML report's row shows the mean too"
    printed = (runs["repeats"] / "printed.txt").read_text("utf-8")
    headline = f"headline (count): m1 @ 0.7: {PER_REPEAT} (mean of 3 repeats"
    assert headline in printed, "run's own headline is report's"


def test_rescore_of_repeats_is_per_repeat(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("rescore", str(runs["repeats"]), "--coherence-threshold", "15")
    data = json.loads(output(capsys, *argv, "--novelty-threshold", "0.15", "--json"))
    (run,) = data["runs"]
    assert run["score"] == run["original_score"] == PER_REPEAT
    text = output(capsys, *argv, "--novelty-threshold", "0.15")
    assert f"│ m1    │  0.7 │     {PER_REPEAT}.0 │     {PER_REPEAT}.0 │" in text


def test_repeats_compare_with_a_one_repeat_run(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["repeats"]), str(runs["b"]))
    assert [run["score"] for run in data["runs"]] == [PER_REPEAT, PER_REPEAT]


def test_interval_method_is_stated(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["repeats"]))
    assert data["interval"]["resamples"] == BOOTSTRAP_RESAMPLES
    assert data["interval"]["level"] == 0.95
    assert "resampling questions" in data["interval"]["method"]
    text = " ".join(output(capsys, "report", str(runs["repeats"])).split())
    assert f"{BOOTSTRAP_RESAMPLES:,} resamples" in text and "95% CI" in text


def test_one_repeat_report_is_unchanged(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (run,) = report_json(capsys, str(runs["a"]))["runs"]
    assert run["score"] == PER_REPEAT and isinstance(run["score"], int)
    assert run["mean_repeat_score"] is None and run["score_interval"] is None
    text = output(capsys, "report", str(runs["a"]))
    assert "per" not in text.split("stop reasons")[0].split("model")[1], "no repeat columns"


# --- reward mode ------------------------------------------------------------------------


def test_reward_mode_of_the_run_carries_through_report_compare_and_rescore(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    novelty = str(runs["novelty"])
    data = report_json(capsys, novelty)
    (run,) = data["runs"]
    assert data["reward_mode"] == run["reward_mode"] == "novelty_sum"
    assert run["reward"] == run["novelty_sum"] != run["score"]
    assert run["rollout_means"]["reward"] == pytest.approx(run["novelty_sum"] / len(QUESTIONS))
    text = output(capsys, "report", novelty)
    assert f"headline (novelty_sum): m1 @ 0.7: {run['novelty_sum']:.2f}" in text
    assert "reward mode novelty_sum" in " ".join(text.split())

    rescore = ("--coherence-threshold", "15", "--novelty-threshold", "0.15")
    rescored = json.loads(output(capsys, "rescore", novelty, *rescore, "--json"))
    assert rescored["reward_mode"] == "novelty_sum"
    assert rescored["runs"][0]["reward"] == pytest.approx(run["novelty_sum"])
    assert "headline (novelty_sum)" in output(capsys, "rescore", novelty, *rescore)


def test_inputs_with_different_reward_modes_warn_and_report_count(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, str(runs["novelty"]), str(runs["a"]))
    assert data["reward_mode"] == "count"
    (found,) = [w for w in data["warnings"] if "reward modes" in w]
    assert "novelty_sum: novelty" in found and "count: a" in found
    chosen = report_json(
        capsys, str(runs["novelty"]), str(runs["a"]), "--reward-mode", "novelty_sum"
    )
    assert chosen["reward_mode"] == "novelty_sum"
    assert not [w for w in chosen["warnings"] if "reward modes" in w]


def test_compare_under_novelty_sum_compares_novelty_sums(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = (str(runs["both"]), "--compare", "m1", "m2", "--reward-mode", "novelty_sum")
    comparison = report_json(capsys, *argv)["comparison"]
    rows = {run["model"]: run for run in report_json(capsys, *argv)["runs"]}
    assert comparison["reward_mode"] == "novelty_sum"
    assert comparison["score_a"] == pytest.approx(rows["m1"]["novelty_sum"])
    text = output(capsys, "report", *argv)
    assert "Paired comparison m1 − m2 in novelty sum" in text


def test_plot_draws_the_reward(runs: dict[str, Path], tmp_path: Path) -> None:
    from aidanbench.analysis import plots

    drawn: list[float] = []
    real = plots.plot_scores

    def spy(rows: Any, path: Path) -> Path:
        drawn.extend(float(row.reward) for row in rows)
        return real(rows, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "plot_scores", spy)
        assert main(["plot", str(runs["novelty"]), "-o", str(tmp_path)]) == 0
    (row,) = summarise(read_run_dir(runs["novelty"]), "novelty_sum")
    assert drawn == [pytest.approx(row.novelty_sum)] and row.novelty_sum != row.score


# --- one set of totals ------------------------------------------------------------------


def test_metadata_report_and_benchmark_totals_agree(runs: dict[str, Path]) -> None:
    results = read_run_dir(runs["repeats"])
    counted = totals(results)
    metadata = json.loads((runs["repeats"] / "metadata.json").read_text("utf-8"))
    recorded = {key: metadata["totals"][key] for key in ("questions", "answers", "score")}
    recorded |= {
        "api_calls": metadata["totals"]["recorded_api_calls"],
        "tokens": metadata["totals"]["recorded_tokens"],
        "errored": metadata["totals"]["errored"],
    }
    # metadata's own api_calls and tokens are the usage ledger's: what was sent
    assert recorded == {
        "questions": counted.lines,
        "answers": counted.answers,
        "score": counted.score,
        "api_calls": counted.api_calls,
        "tokens": counted.tokens,
        "errored": counted.errored,
    }
    assert counted.answers < counted.api_calls < 3 * counted.answers, (
        "a generation per answer, judge and embedding calls once per distinct text (cached)"
    )
    (row,) = summarise(results)
    assert (row.api_calls, row.tokens, row.answers) == (
        counted.api_calls,
        counted.tokens,
        counted.answers,
    )
    lines = [json.loads(x) for x in (runs["repeats"] / "questions.jsonl").read_text().splitlines()]
    answers = [json.loads(x) for x in (runs["repeats"] / "answers.jsonl").read_text().splitlines()]
    outputs = []
    for line in lines:
        mine = [
            a for a in answers if (a["question"], a["repeat"]) == (line["question"], line["repeat"])
        ]
        outputs.append({**line, "answers": mine})
    summary = summarize_results(outputs)  # type: ignore[arg-type]
    assert summary["score"] == counted.score and summary["questions"] == counted.lines
    assert summary["stop_reasons"] == counted.stop_reasons == {"novelty": 9}
    assert totals(question_result(QuestionLine.model_validate(o)) for o in outputs) == counted
