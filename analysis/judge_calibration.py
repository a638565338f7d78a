"""Calibrating a successor judge against the published run's o1-mini scores.

Every published score rests on o1-mini's coherence judgments, and o1-mini is no longer served.
Another judge scores on its own scale, where 15 need not mean what it meant for o1-mini.
Calibration compares, answer by answer of a reference run (the bundled published one by
default), the recorded o1-mini score with the successor's judgment under the same prompt, and
reports how the scales relate (Spearman, mean absolute difference, a least-squares line), the
cut whose decisions agree best with o1-mini's ``> 15``, and every chain walked again under the
successor's judgments (models' totals, Kendall's tau against the published ones).

The cut is searched over the intervals between successive distinct successor scores (each
makes one set of decisions): the most agreeing decisions, then the best matching question
scores, then nearest the line's image of 15 (the cut when inside, else the midpoint). Why the
image: the published run holds one coherence failure in 1,161 answers, so agreement alone
leaves a wide interval (docs/judge.md, "What the published run can tell"). Chains whose
recorded terminal answer passes are *censored* (lower bounds), as in ``analysis.calibrate``.
``calibrate_judge`` makes no call; ``calibrate_one`` asks the judge (``analysis.rejudge``).
"""

from __future__ import annotations

import glob
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aidanbench.analysis.calibrate import (
    QuestionKey,
    ReferenceChains,
    Replay,
    RuleFigures,
    draw_cuts,
    question_scores,
    round_threshold,
    save_scatter,
)
from aidanbench.analysis.judge_noise import JudgeNoise, judge_noise
from aidanbench.analysis.rejudge import (
    Unjudged,
    coherence_prompt,
    cost_summary,
    judge_all,
    ledger_path,
)
from aidanbench.core.calibration import KIND
from aidanbench.core.errors import UsageError
from aidanbench.core.settings import REFERENCE_JUDGE, Settings
from aidanbench.core.thresholds import (
    COHERENCE_THRESHOLD,
    NOVELTY_THRESHOLD,
    Thresholds,
    panel_verdict,
)
from aidanbench.record import files
from aidanbench.record.recorder import now
from aidanbench.record.results import QuestionResult
from aidanbench.record.usage import UsageLedger

FEW_FAILURES = 20
"""Below this many failures in the reference, the calibrated threshold is fitted on
passes: too few failures to test where it cuts (the published run holds one)."""

AnswerKey = tuple[str, str]
"""(question, answer text): what a judgment is of."""


JUDGE_NAMES = {"decision_agreement": "agreement", "equal_scores": "equal_question_scores"}
"""``RuleFigures.to_dict`` keys the judge's figures are written under instead."""


@dataclass(frozen=True)
class JudgeRule(RuleFigures):
    """What ``coherence > threshold`` on the successor's scale gives on the reference."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (without the score agreement, which the judge's omit)."""
        figures = super().to_dict()
        del figures["score_agreement"]
        return {JUDGE_NAMES.get(key, key): value for key, value in figures.items()}


@dataclass(frozen=True)
class JudgeCalibration:
    """A successor judge measured against a reference run's o1-mini judgments."""

    judge_model: str
    reference_threshold: float
    novelty_threshold: float
    questions: tuple[QuestionKey, ...]
    recorded: np.ndarray
    """o1-mini's score of every answer, chain after chain."""
    judged: np.ndarray
    """The successor's deciding judgment of the same answers."""
    samples: tuple[tuple[int, ...], ...]
    """Every judgment of each answer (the deciding one first)."""
    reference_totals: dict[str, int]
    spearman: float | None
    mean_abs_diff: float
    fit: tuple[float, float] | None
    """(intercept, slope) of successor ≈ a + b · o1-mini; None when undefined."""
    image: float | None
    """The line's value at the reference threshold: where 15 falls on this scale."""
    calibrated: RuleFigures
    """A ``JudgeRule``, as each of the figures."""
    at_reference: RuleFigures
    """The reference threshold (15) applied unchanged on the successor's scale."""
    setting_value: float
    """The threshold rounded (3 decimals or more) without changing a decision."""
    interval: tuple[float, float]
    """The successor scores between which every cut decides as ``threshold`` does."""
    noise: dict[str, JudgeNoise]
    """Per model, with several judgments per answer: the judge's noise there."""
    agreement_by_sample: tuple[float, ...]
    """Decision agreement at ``threshold`` when judgment j decides instead of the first."""
    undecided: int = 0
    """Answers never given a readable score, left out; their chains count up to them (lower
    bounds)."""
    decided: tuple[bool, ...] = ()
    """Per answer of the reference, chain after chain: whether the judge decided it (the
    answers of ``recorded`` and ``judged`` are those)."""

    @property
    def threshold(self) -> float:
        """The calibrated threshold."""
        return self.calibrated.threshold

    @property
    def reference_pass_rate(self) -> float:
        """Share of answers o1-mini passed: the agreement of a judge passing everything."""
        return float(np.mean(self.recorded > self.reference_threshold))

    @property
    def reference_failures(self) -> int:
        """Answers o1-mini failed (coherence ≤ its threshold) in the reference."""
        return int(np.sum(self.recorded <= self.reference_threshold))

    @property
    def note(self) -> str | None:
        """What the calibration could not test, shown beside its threshold wherever it is
        (``ThresholdSource.note``)."""
        failures = self.reference_failures
        if failures >= FEW_FAILURES:
            return None
        return (
            f"fitted on passes only ({failures} failure{'s' * (failures != 1)} of "
            f"{REFERENCE_JUDGE}'s rule in {self.recorded.size:,} answers, fewer than "
            f"{FEW_FAILURES})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``judge`` object of ``calibrate --json`` (and of the calibration file)."""
        return {
            "model": self.judge_model,
            "reference_judge": REFERENCE_JUDGE,
            "reference_threshold": self.reference_threshold,
            "novelty_threshold": self.novelty_threshold,
            "threshold": self.threshold,
            "setting_value": self.setting_value,
            "agreement": self.calibrated.decision_agreement,
            "agreement_at_reference_threshold": self.at_reference.decision_agreement,
            "reference_pass_rate": self.reference_pass_rate,
            "equivalent_interval": list(self.interval),
            "answers": int(self.recorded.size),
            "questions": len(self.questions),
            "reference_failures": self.reference_failures,
            "note": self.note,
            "spearman": self.spearman,
            "mean_abs_diff": self.mean_abs_diff,
            "fit": None if self.fit is None else {"intercept": self.fit[0], "slope": self.fit[1]},
            "image_of_reference_threshold": self.image,
            "reference_totals": dict(self.reference_totals),
            "calibrated": self.calibrated.to_dict(),
            "at_reference_threshold": self.at_reference.to_dict(),
            "samples": max(len(s) for s in self.samples),
            "agreement_by_sample": list(self.agreement_by_sample),
            "undecided": self.undecided,
            "noise": {model: noise.to_dict() for model, noise in self.noise.items()},
            "question_scores": question_scores(
                self.questions,
                {"calibrated": self.calibrated, "at_reference_threshold": self.at_reference},
            ),
        }


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho (Pearson on average ranks); None when either side is constant."""
    rx, ry = _ranks(x), _ranks(y)
    if np.all(rx == rx[0]) or np.all(ry == ry[0]):
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=np.float64)
    distinct, inverse = np.unique(values, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks, minlength=len(distinct))
    counts = np.bincount(inverse, minlength=len(distinct))
    return (sums / counts)[inverse]


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """(intercept, slope) of y ≈ a + b x; None when x is constant."""
    if np.all(x == x[0]):
        return None
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def _intervals(values: np.ndarray) -> list[tuple[float, float]]:
    """Every interval [low, high) of cuts making the same decisions on ``values``, from 0."""
    distinct = np.unique(values)
    found = [(0.0, float(distinct[0]))] if distinct[0] > 0 else []
    found += [(float(a), float(b)) for a, b in itertools.pairwise(distinct)]
    return found


def _choose(replay: Replay, image: float | None) -> tuple[float, tuple[float, float]]:
    """The calibrated threshold and its interval (module docstring)."""
    candidates = _intervals(replay.values)
    if not candidates:
        raise ValueError("every answer got the same judgment of 0: nothing to calibrate")

    def distance(interval: tuple[float, float]) -> float:
        low, high = interval
        if image is None or low <= image < high:
            return 0.0
        return min(abs(image - low), abs(image - high))

    low, high = replay.best(candidates, lambda interval: interval[0], distance)
    inside = image is not None and low <= image < high
    return (float(image) if inside and image is not None else (low + high) / 2.0), (low, high)


def calibrate_judge(
    questions: Sequence[QuestionResult],
    scores: Mapping[AnswerKey, Sequence[int]],
    *,
    judge_model: str,
    reference_threshold: float = COHERENCE_THRESHOLD,
    novelty_threshold: float = NOVELTY_THRESHOLD,
) -> JudgeCalibration:
    """Calibrate the judge whose judgments (deciding one first) are ``scores``; an answer without
    one is ``undecided``. Raises ``ValueError`` when an answer has no recorded score."""
    if not questions:
        raise ValueError("the reference has no questions")
    reference_rule = Thresholds(coherence=reference_threshold, novelty=novelty_threshold)
    against = ReferenceChains.of(questions, reference_rule)
    chains: list[QuestionResult] = []
    recorded: list[float] = []
    samples: list[tuple[int, ...]] = []
    decided: list[bool] = []
    undecided = 0
    for question in questions:
        rows = []
        for a in question.answers:
            if a.coherence is None:
                raise ValueError(f"answer {a.index} of {question.question[:60]!r} has no score")
            judged = tuple(scores.get((question.question, a.answer), ()))
            decided.append(bool(judged))
            if not judged:
                undecided += 1
                rows.append(a.model_copy(update={"coherence": None}))
                continue
            recorded.append(a.coherence)
            samples.append(judged)
            scored = [float(s) for s in judged]
            rows.append(a.model_copy(update={"coherence": scored[0], "coherence_samples": scored}))
        chains.append(replace(question, answers=tuple(rows), thresholds=None))
    if not recorded:
        raise ValueError(
            f"the judge {judge_model} decided none of the {undecided} answers (it gave no "
            "readable score for any of them in every try), so it cannot be calibrated"
        )
    x = np.asarray(recorded, dtype=np.float64)
    y = np.asarray([s[0] for s in samples], dtype=np.float64)
    reference = x > reference_threshold
    replay = Replay(
        against,
        tuple(chain.answers for chain in chains),
        y,
        reference,
        lambda cut: Thresholds(coherence=cut, novelty=novelty_threshold),
        JudgeRule,
    )
    fit = least_squares(x, y)
    image = None if fit is None or fit[1] <= 0 else fit[0] + fit[1] * reference_threshold
    threshold, interval = _choose(replay, image)
    calibrated = replay.figures(threshold)
    width = max(len(s) for s in samples)
    by_sample = tuple(
        float(
            np.mean((np.asarray([s[min(j, len(s) - 1)] for s in samples]) > threshold) == reference)
        )
        for j in range(width)
    )
    rule = Thresholds(coherence=threshold, novelty=novelty_threshold)
    noise: dict[str, JudgeNoise] = {}
    if width > 1:
        for model in against.models:
            lines = [c for c, label in zip(chains, against.labels, strict=True) if label == model]
            found = judge_noise(lines, rule)
            if found is not None:
                noise[model] = found
    return JudgeCalibration(
        judge_model=judge_model,
        reference_threshold=reference_threshold,
        novelty_threshold=novelty_threshold,
        questions=against.questions,
        recorded=x,
        judged=y,
        samples=tuple(samples),
        reference_totals=against.reference_totals,
        spearman=rank_correlation(x, y),
        mean_abs_diff=float(np.mean(np.abs(y - x))),
        fit=fit,
        image=image,
        calibrated=calibrated,
        at_reference=replay.figures(reference_threshold),
        setting_value=round_threshold(threshold, y),
        interval=interval,
        noise=noise,
        agreement_by_sample=by_sample,
        undecided=undecided,
        decided=tuple(decided),
    )


def plot_judge_calibration(calibration: JudgeCalibration, path: Path) -> Path:
    """Scatter of o1-mini's score against the successor's, one point per distinct pair (its
    area grows with its answers), coloured by agreement, with both cuts and the fitted line."""
    from aidanbench.analysis.plots import new_figure

    x, y = calibration.recorded, calibration.judged
    t, r = calibration.threshold, calibration.reference_threshold
    ref, got = x > r, y > t
    fig = new_figure((7.5, 6.2), dpi=120)
    ax = fig.add_subplot()
    groups = [
        (ref & got, "both pass", "#9aa5b1"),
        (~ref & ~got, "both fail", "#1f5fbf"),
        (~ref & got, "passes here, fails for o1-mini", "#d62728"),
        (ref & ~got, "fails here, passes for o1-mini", "#ff9f1c"),
    ]
    for mask, label, colour in groups:
        if not mask.any():
            continue
        pairs, counts = np.unique(np.stack([x[mask], y[mask]], axis=1), axis=0, return_counts=True)
        ax.scatter(
            pairs[:, 0],
            pairs[:, 1],
            s=10 + 12 * np.sqrt(counts),
            c=colour,
            alpha=0.7,
            linewidths=0,
            label=f"{label} ({int(mask.sum())})",
        )
    draw_cuts(
        ax,
        (r, f"o1-mini's cut {r:g} (x)", f"{r:g} unchanged (y)"),
        (t, f"calibrated {calibration.setting_value:g} (y)"),
    )
    if calibration.fit is not None:
        a, b = calibration.fit
        xs = np.asarray([0.0, 100.0])
        ax.plot(xs, a + b * xs, color="#8e44ad", linewidth=1, label=f"fit {a:.1f} + {b:.2f}·x")
    ax.set_xlim(-2, 102)
    ax.set_ylim(-2, 102)
    ax.set_xlabel(f"coherence, {REFERENCE_JUDGE} (recorded)")
    ax.set_ylabel(f"coherence, {calibration.judge_model}")
    cal, unc = calibration.calibrated, calibration.at_reference
    rho = "undefined" if calibration.spearman is None else f"{calibration.spearman:.3f}"
    ax.set_title(
        f"Judge calibration: {calibration.judge_model}, {calibration.recorded.size} answers\n"
        f"Spearman {rho}, mean |diff| {calibration.mean_abs_diff:.1f}; decision agreement "
        f"{cal.decision_agreement:.1%} at {calibration.setting_value:g} vs "
        f"{unc.decision_agreement:.1%} at {r:g}",
        fontsize=10,
    )
    return save_scatter(fig, ax, path)


def panel_agreement(calibrations: Sequence[JudgeCalibration]) -> dict[str, Any] | None:
    """How the calibrated judges' majority decides o1-mini's answers; None for one judge. An
    answer a judge left undecided counts for the others: the majority of those who decided it
    decides it when it already can (``panel_verdict``), else it is ``undecided``."""
    if len(calibrations) < 2:
        return None
    size = len(calibrations[0].decided)
    votes: list[list[bool | None]] = [[None] * size for _ in calibrations]
    reference: list[bool | None] = [None] * size
    for vote, calibration in zip(votes, calibrations, strict=True):
        where = [k for k, known in enumerate(calibration.decided) if known]
        cut, recorded = calibration.threshold, calibration.recorded
        for k, judged, was in zip(where, calibration.judged, recorded, strict=True):
            vote[k] = bool(judged > cut)
            reference[k] = bool(was > calibration.reference_threshold)
    verdicts = [panel_verdict([vote[k] for vote in votes]) for k in range(size)]
    decided = [k for k, verdict in enumerate(verdicts) if verdict is not None]
    known = [[vote[k] for vote in votes] for k in decided]
    return {
        "judges": [c.judge_model for c in calibrations],
        "agreement": (
            float(np.mean([verdicts[k] == reference[k] for k in decided])) if decided else None
        ),
        "answers": len(decided),
        "undecided": size - len(decided),
        "disagreed": sum(1 for seats in known if True in seats and False in seats),
    }


def file_stem(judge_model: str) -> str:
    """``calibration-judge-<model>`` with characters unsafe in file names replaced."""
    return f"calibration-judge-{re.sub(r'[^A-Za-z0-9._-]+', '_', judge_model)}"


def clear_killed_writes(*targets: Path) -> None:
    """Remove what a write of ``targets`` killed before its rename left (``files.atomic_write``'s
    hidden ``.NAME.XXXXXXXX``): nothing reads it and no later write replaces it."""
    for target in targets:
        for left in target.parent.glob(f".{glob.escape(target.name)}.*"):
            if re.fullmatch(r"[A-Za-z0-9_]{8}", left.name[len(target.name) + 2 :]):
                left.unlink(missing_ok=True)


def calibrate_one(
    settings: Settings,
    questions: list[QuestionResult],
    reference: Path,
    out: Path,
    **judging: Any,
) -> tuple[JudgeCalibration, dict[str, Any], Path]:
    """Judge every answer of ``reference`` (``rejudge.judge_all``, given ``judging``, cached in
    ``settings.cache_path``), calibrate, and write the scatter plot and the calibration file (with
    the reference's sha256, the served models and the cost) to ``out``. Raises ``Unjudged`` when
    answers could not be judged and ``UsageError`` when the reference cannot be calibrated
    against."""
    cache = Path(str(settings.cache_path))
    stem = file_stem(settings.judge_model)
    clear_killed_writes(out / f"{stem}.json", out / f"{stem}.png")
    prompt_of = {
        (q.question, a.answer): coherence_prompt(q.question, a.answer)
        for q in questions
        for a in q.answers
    }
    ledger = UsageLedger(ledger_path(cache))
    judged = judge_all(list(prompt_of.values()), settings, ledger, **judging)
    if judged.failures:
        raise Unjudged(judged)
    scores = {
        key: judged.judgments[prompt].scores
        for key, prompt in prompt_of.items()
        if prompt in judged.judgments
    }
    try:
        calibration = calibrate_judge(questions, scores, judge_model=settings.judge_model)
    except ValueError as exc:
        raise UsageError(
            f"cannot calibrate {settings.judge_model} against {reference}: "
            f"{' '.join(str(exc).split())}"
        ) from exc
    plot = plot_judge_calibration(calibration, out / f"{stem}.png")
    document = {
        "kind": KIND,
        "created": now(),
        "reference": str(reference),
        "reference_sha256": files.digest(reference.read_bytes()),
        "judge": {
            **calibration.to_dict(),
            "endpoint": settings.endpoint("judge").host,
            "temperature": settings.judge_temperature,
            "served_models": judged.served_counts(),
        },
        "judging": {
            "answers": len(prompt_of),
            "distinct_answers": judged.answers,
            **judged.figures(),
            "cache": str(cache),
        },
        "cost": cost_summary(ledger),
        "plot": str(plot),
    }
    target = out / f"{stem}.json"
    files.atomic_write(target, json.dumps(document, indent=2) + "\n")
    return calibration, document, target
