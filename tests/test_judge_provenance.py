"""Who judged: the served model of every judge call recorded, shown and priced, and where
a run's coherence threshold came from.

A provider may answer a request for one model with another (``model`` in the reply).
OpenAI names the dated snapshot behind an alias (``o1-mini`` served as
``o1-mini-2024-09-12``): that is the model asked for, priced as it. Any other name is a
substitution: warned about in ``report`` (text and JSON) and the HTML report, and priced
as the model that served.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from aidanbench.analysis.view import load_source, view_data
from aidanbench.cli.main import main
from aidanbench.services.pricing import BATCH_DISCOUNT, Price, price_table, same_model
from aidanbench.testing import Kind, OpenAIStub, Reply, ScriptedBrain
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags
from tests.judging import write_calibration

from .browser import Page, chromium, chromium_path

QUESTIONS = 3


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_VARIABLE, "sk-test-not-a-key")


class ServedAs:
    """``ScriptedBrain``'s answers; its judge's replies say ``served`` served them."""

    def __init__(self, served: str | None) -> None:
        self.inner = ScriptedBrain(default_length=3)
        self.served = served

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        reply = self.inner.chat(kind, model, prompt, body)
        if kind in ("coherence", "similarity"):
            return Reply(
                reply.text, served_model=self.served, prompt_tokens=1000, completion_tokens=100
            )
        return reply

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed(model, texts)


def run(run_dir: Path, served: str | None, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    with OpenAIStub(ServedAs(served), models=LISTED) as server:
        argv = ["run", "-m", "m", "--questions", str(QUESTIONS), "--judge-model", "o1-mini"]
        argv += [*stub_flags(server.base_url), "--run-dir", str(run_dir), *extra]
        assert main(argv) == 0
    capsys.readouterr()


LISTED = ("m", "o1-mini", "text-embedding-3-large")
"""What the stubs list on ``GET /v1/models``: the preflight then sends no request of its
own, and every judge line below is a question's."""


def judge_lines(run_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (run_dir / "usage.jsonl").read_text().splitlines()]
    return [line for line in lines if line["event"] == "usage" and line["role"] == "judge"]


@pytest.fixture(scope="module")
def substituted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose judge (o1-mini asked) was served by gpt-4.1-mini."""
    run_dir = tmp_path_factory.mktemp("substituted") / "run"
    with OpenAIStub(ServedAs("gpt-4.1-mini"), models=LISTED) as server:
        argv = ["run", "-m", "m", "--questions", str(QUESTIONS), "--judge-model", "o1-mini"]
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(TEST_KEY_VARIABLE, "sk-test-not-a-key")
            assert main([*argv, *stub_flags(server.base_url), "--run-dir", str(run_dir)]) == 0
    return run_dir


SUBSTITUTION = "the judge asked for was o1-mini, but the provider says gpt-4.1-mini"


def test_a_substituted_judge_is_recorded_warned_about_and_priced_as_what_served(
    substituted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    served_price = price_table().price("gpt-4.1-mini")
    assert served_price is not None
    for line in judge_lines(substituted):
        assert line["model"] == "o1-mini" and line["served_model"] == "gpt-4.1-mini"
        assert line["cost_usd"] == pytest.approx(served_price.dollars(1000, 0, 100))
    answers = [json.loads(a) for a in (substituted / "answers.jsonl").read_text().splitlines()]
    judged = answers[0]["calls"]["judge"]
    assert judged["served_model"] == "gpt-4.1-mini"
    assert judged["cost_usd"] == pytest.approx(served_price.dollars(1000, 0, 100))
    meta = json.loads((substituted / "metadata.json").read_text())
    assert meta["usage"]["served_models"]["judge:o1-mini"] == {"gpt-4.1-mini": len(answers)}
    assert meta["judging"]["m"]["served"] == {"gpt-4.1-mini": len(answers)}
    assert main(["report", str(substituted)]) == 0
    text = capsys.readouterr().out
    assert f"judge of m @ 0.7: o1-mini; served by gpt-4.1-mini ({len(answers)} answers)" in text
    assert f"warning: m @ 0.7: {SUBSTITUTION}" in " ".join(text.split())
    assert main(["report", "--json", str(substituted)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["runs"][0]["judge_served"] == {"gpt-4.1-mini": len(answers)}
    assert any(SUBSTITUTION in w for w in payload["warnings"])
    data, _ = view_data([load_source(substituted)])
    assert any(SUBSTITUTION in w for w in data["warnings"])
    assert data["groups"][0]["judge_served"] == f"gpt-4.1-mini ({len(answers)})"


def test_a_dated_snapshot_of_the_judge_is_the_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """o1-mini-2024-09-12 is not in the price table: priced as o1-mini, no warning."""
    run(tmp_path / "run", "o1-mini-2024-09-12", capsys)
    price = price_table().price("o1-mini")
    assert price is not None
    for line in judge_lines(tmp_path / "run"):
        assert line["served_model"] == "o1-mini-2024-09-12"
        assert line["cost_usd"] == pytest.approx(price.dollars(1000, 0, 100))
    assert main(["report", "--json", str(tmp_path / "run")]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["runs"][0]["judge_served"] == {"o1-mini-2024-09-12": QUESTIONS * 4}
    assert not any("served its judgments" in w for w in payload["warnings"])


def test_same_model_and_served_prices() -> None:
    assert same_model("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert same_model("openai/gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert same_model("claude-3-5-sonnet", "anthropic/claude-3-5-sonnet-20241022")
    assert same_model("gpt-4", "gpt-4-0613") and same_model("o1-mini", None)
    assert not same_model("o1-mini", "gpt-4.1-mini")
    assert not same_model("gpt-4o", "gpt-4o-mini-2024-07-18")
    table = price_table()
    assert table.served_price("o1-mini", "o1-mini-2024-09-12") == table.price("o1-mini")
    assert table.served_price("gpt-4o-mini", "gpt-4o-mini-2024-07-18") == table.price(
        "gpt-4o-mini-2024-07-18"
    )
    assert table.served_price("o1-mini", "gpt-4.1-mini") == table.price("gpt-4.1-mini")
    assert table.served_price("o1-mini", "a-model-nobody-prices") is None
    assert table.served_price("o1-mini", None) == table.price("o1-mini")
    price = Price(1.0, 0.5, 4.0)
    assert price.batch() == Price(BATCH_DISCOUNT, 0.5 * BATCH_DISCOUNT, 4.0 * BATCH_DISCOUNT)
    assert Price(1.0, None, 2.0).batch().cached_input is None


def test_the_run_records_where_its_threshold_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = write_calibration(tmp_path / "calibration-judge-j.json", "j", 47.25)
    calibrated, given, default = tmp_path / "calibrated", tmp_path / "given", tmp_path / "default"
    with OpenAIStub(ScriptedBrain(default_length=2)) as server:
        base = ["run", "-m", "m", "--questions", "2", *stub_flags(server.base_url)]
        assert (
            main(
                [
                    *base,
                    "--run-dir",
                    str(calibrated),
                    "--judge-model",
                    "j",
                    "--coherence-threshold",
                    str(calibration),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    *base,
                    "--run-dir",
                    str(given),
                    "--judge-model",
                    "j",
                    "--coherence-threshold",
                    "47.25",
                ]
            )
            == 0
        )
        assert main([*base, "--run-dir", str(default), "--judge-model", "j"]) == 0
    capsys.readouterr()
    record = json.loads((calibrated / "metadata.json").read_text())["judging"]["m"]
    source = record["coherence_threshold_source"]
    assert record["coherence_threshold"] == 47.25 and record["judge_model"] == "j"
    assert source["kind"] == "calibration" and source["file"] == str(calibration.resolve())
    assert source["sha256"] == hashlib.sha256(calibration.read_bytes()).hexdigest()
    given_source = json.loads((given / "metadata.json").read_text())["judging"]["m"]
    assert given_source["coherence_threshold_source"] == {"kind": "given"}
    assert main(["report", str(calibrated)]) == 0
    text = capsys.readouterr().out
    assert (
        f"coherence threshold from calibration {calibration.name} (sha256 {source['sha256'][:12]})"
        in text
    )
    assert main(["report", "--json", str(default)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["runs"][0]["threshold_source"] == "benchmark"
    assert any(
        "judged by j at coherence > 15, o1-mini's threshold, uncalibrated" in w
        for w in payload["warnings"]
    )
    assert main(["report", "--json", str(calibrated), str(given)]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("coherence thresholds from different places" in w for w in warnings)


CHROMIUM = chromium_path()


@pytest.mark.e2e
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_the_html_report_shows_the_substitution(substituted: Path, tmp_path: Path) -> None:
    from aidanbench.analysis.view import write_view

    assert CHROMIUM is not None
    out = write_view([substituted], tmp_path / "report.html")
    with chromium(CHROMIUM) as browser:
        page: Page = browser.new_page()
        page.open(out.as_uri())
        warnings = page.evaluate(
            "[...document.querySelectorAll('#warnings li')].map((li) => li.textContent)"
        )
        settings = page.evaluate("document.getElementById('settings').textContent")
        assert page.blocked == [] and page.errors == []
    assert any(SUBSTITUTION in w for w in warnings)
    assert "gpt-4.1-mini" in settings


def test_a_rescore_labels_the_threshold_it_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run at the benchmark's 15, rescored by another judge at a calibration file's
    threshold or a given number: each row says the source the rescore used, and the
    warning about an uncalibrated 15 is given only when 15 is what it used."""
    source = tmp_path / "source"
    with OpenAIStub(ScriptedBrain(default_length=2)) as server:
        base = ["run", "-m", "m", "--questions", "2", *stub_flags(server.base_url)]
        assert main([*base, "--run-dir", str(source), "--judge-model", "j"]) == 0
        calibration = write_calibration(tmp_path / "calibration-judge-k.json", "k", 3.0)
        judge = ["--judge-model", "k", "--judge-base-url", server.base_url]
        judge += ["--judge-api-key-env", TEST_KEY_VARIABLE, "--cache", str(tmp_path / "c.sqlite")]

        def rescored(threshold: str, *extra: str) -> dict[str, Any]:
            argv = ["rescore", str(source), "--coherence-threshold", threshold]
            assert main([*argv, "--novelty-threshold", "0.15", "--json", *extra]) == 0
            payload: dict[str, Any] = json.loads(capsys.readouterr().out)
            return payload

        capsys.readouterr()
        uncalibrated = "judged by k at coherence > 15, o1-mini's threshold, uncalibrated"
        by_file = rescored(str(calibration), *judge)
        digest = hashlib.sha256(calibration.read_bytes()).hexdigest()[:12]
        assert by_file["runs"][0]["threshold_source"] == (
            f"calibration {calibration.name} (sha256 {digest})"
        )
        assert by_file["runs"][0]["thresholds"]["coherence"] == 3.0
        assert not any("uncalibrated" in w for w in by_file["warnings"])
        given = rescored("10", *judge)
        assert given["runs"][0]["threshold_source"] == "given"
        assert given["judge"]["coherence_threshold_source"] == {"kind": "given"}
        assert not any("uncalibrated" in w for w in given["warnings"])
        at_15 = rescored("15", *judge)
        assert at_15["runs"][0]["threshold_source"] == "benchmark"
        assert any(uncalibrated in w for w in at_15["warnings"])
        assert rescored("10")["runs"][0]["threshold_source"] == "given"
        argv = ["rescore", str(source), "--coherence-threshold", "10"]
        assert main([*argv, "--novelty-threshold", "0.15", *judge]) == 0
        text = capsys.readouterr().out
        assert "coherence threshold from given" in text and "uncalibrated" not in text
