"""Calibrating the novelty threshold for another embedding model.

Why: the novelty threshold 0.15 is a cut on text-embedding-3-large cosines; other models spread
cosines differently (all-MiniLM-L6-v2 rates unrelated texts far less similar), so 0.15 on their
scale would give different decisions and scores. Calibration replays a reference run: it embeds
every recorded answer with the other model, recomputes each novelty against the earlier answers
of its chain as the benchmark would, and picks the cut whose pass/fail decisions agree best with
the reference's ``novelty > 0.15``. Coherence is kept as recorded; ``CENSORING_NOTE`` says why
some scores are lower bounds. The embedding model is a plain function ``list[str] -> array``, so
tests and any client library can supply it; no I/O here besides the optional plot.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

import numpy as np

from aidanbench.analysis.cost import score_text
from aidanbench.analysis.plots import save_figure
from aidanbench.core.thresholds import COHERENCE_THRESHOLD, NOVELTY_THRESHOLD, Thresholds
from aidanbench.nodes.novelty import cosine_novelty
from aidanbench.record.results import AnswerScores, QuestionResult, chain_validity

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

EmbedFn = Callable[[list[str]], np.ndarray]
"""Embeds a batch of texts: one row per text, in order (any length, need not be unit)."""

CENSORING_NOTE = (
    "Reference chains stop at their first invalid answer, so a rule looser than the "
    "reference is only judged up to where the recorded chain ends; a question it passes "
    "entirely (censored) has a score that is a lower bound."
)


@dataclass(frozen=True)
class ScoredAnswer:
    """One recorded answer with its novelty on both scales."""

    coherence: float | None
    reference_novelty: float | None
    """As recorded (text-embedding-3-large)."""
    novelty: float
    """Recomputed with the calibrated model, against the earlier answers of the chain."""


@dataclass(frozen=True)
class QuestionKey:
    """One chain of the reference and its score under the reference rule."""

    model: str
    temperature: float
    question: str
    reference_score: int


class Scored(Protocol):
    """An answer as a rule scores it: its coherence and novelty (either may be missing)."""

    @property
    def coherence(self) -> float | None: ...

    @property
    def novelty(self) -> float | None: ...


def coherence_and_novelty(answer: Scored) -> AnswerScores:
    """An answer as the published rule reads it: its coherence and embedding novelty, no
    panel (calibration measures one judge or one embedding model at a time)."""
    return {"coherence": answer.coherence, "novelty": answer.novelty}, None


@dataclass(frozen=True)
class ReferenceChains:
    """The reference run's chains as every rule's scores are compared with them."""

    questions: tuple[QuestionKey, ...]
    labels: tuple[str, ...]
    """Each chain's model (with its temperature when the reference has several)."""
    models: tuple[str, ...]
    """Every label once, in order."""
    reference_totals: dict[str, int]
    """Per label: the sum of its chains' scores under the reference rule."""

    @classmethod
    def of(cls, questions: Sequence[QuestionResult], rule: Thresholds) -> ReferenceChains:
        """``questions`` keyed, labelled and scored under the reference ``rule``."""
        several_temperatures = len({q.temperature for q in questions}) > 1
        keys: list[QuestionKey] = []
        labels: list[str] = []
        for question in questions:
            flags, _ = chain_validity(map(coherence_and_novelty, question.answers), rule)
            keys.append(
                QuestionKey(question.model, question.temperature, question.question, sum(flags))
            )
            labels.append(_model_label(question, several_temperatures))
        models = tuple(dict.fromkeys(labels))
        totals = dict.fromkeys(models, 0)
        for label, key in zip(labels, keys, strict=True):
            totals[label] += key.reference_score
        return cls(tuple(keys), tuple(labels), models, totals)


@dataclass(frozen=True)
class RuleFigures:
    """How well a cut ``> threshold`` on the calibrated scale matches the reference, answer by
    answer and chain by chain. The embedding calibration's; ``JudgeRule`` names the judge's."""

    threshold: float
    decisions: tuple[bool, ...]
    """Decision per compared answer (aligned with the reference decisions)."""
    agreeing: int
    decision_agreement: float
    false_pass: int
    """Answers the reference rejects but this rule accepts."""
    false_fail: int
    """Answers the reference accepts but this rule rejects."""
    scores: tuple[int, ...]
    """Score per question under this rule (aligned with ``ReferenceChains.questions``)."""
    equal_scores: int
    mean_abs_score_diff: float
    censored_by_model: dict[str, int]
    """Per model, questions whose every recorded answer passes or that reach an ``unscored``
    answer: their score, and so the model's total, is a lower bound."""
    model_totals: dict[str, int]
    kendall_tau: float | None
    """Tau-b between reference and rule model totals; None when undefined (all tied)."""

    @property
    def censored(self) -> int:
        """Questions whose score is a lower bound."""
        return sum(self.censored_by_model.values())

    def total_text(self, model: str) -> str:
        """A model's total, ``≥`` when it is a lower bound."""
        return score_text(self.model_totals[model], self.censored_by_model[model] > 0)

    @property
    def score_agreement(self) -> float:
        """Share of questions whose score under this rule equals the reference's."""
        return self.equal_scores / len(self.scores)

    @classmethod
    def measure(
        cls,
        threshold: float,
        decisions: np.ndarray,
        reference: np.ndarray,
        chains: Iterable[Iterable[Scored]],
        rule: Thresholds,
        against: ReferenceChains,
    ) -> Self:
        """The figures of ``rule`` (cut ``threshold``) over the reference's rescored ``chains``."""
        agreeing = int(np.sum(decisions == reference))
        scores: list[int] = []
        censored = dict.fromkeys(against.models, 0)
        totals = dict.fromkeys(against.models, 0)
        for chain, label in zip(chains, against.labels, strict=True):
            flags, why = chain_validity(map(coherence_and_novelty, chain), rule)
            scores.append(sum(flags))
            totals[label] += sum(flags)
            censored[label] += all(flags) or why == "unscored"
        diffs = [abs(s - q.reference_score) for s, q in zip(scores, against.questions, strict=True)]
        return cls(
            threshold=float(threshold),
            decisions=tuple(bool(d) for d in decisions),
            agreeing=agreeing,
            decision_agreement=agreeing / len(decisions),
            false_pass=int(np.sum(decisions & ~reference)),
            false_fail=int(np.sum(~decisions & reference)),
            scores=tuple(scores),
            equal_scores=sum(d == 0 for d in diffs),
            mean_abs_score_diff=sum(diffs) / len(diffs),
            censored_by_model=censored,
            model_totals=totals,
            kendall_tau=kendall_tau_b(
                [against.reference_totals[m] for m in against.models],
                [totals[m] for m in against.models],
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The figures (not the per-answer decisions) as JSON-ready values."""
        return {
            "threshold": self.threshold,
            "decision_agreement": self.decision_agreement,
            "agreeing_decisions": self.agreeing,
            "false_pass": self.false_pass,
            "false_fail": self.false_fail,
            "score_agreement": self.score_agreement,
            "equal_scores": self.equal_scores,
            "mean_abs_score_diff": self.mean_abs_score_diff,
            "censored_questions": self.censored,
            "model_totals": dict(self.model_totals),
            "lower_bound_totals": [m for m, n in self.censored_by_model.items() if n],
            "kendall_tau": self.kendall_tau,
        }


def question_scores(
    questions: Sequence[QuestionKey], rules: Mapping[str, RuleFigures]
) -> list[dict[str, Any]]:
    """Per reference chain: its key, its reference score and its score under each named rule."""
    return [
        {
            "model": q.model,
            "temperature": q.temperature,
            "question": q.question,
            "reference": q.reference_score,
            **{name: rule.scores[i] for name, rule in rules.items()},
        }
        for i, q in enumerate(questions)
    ]


@dataclass(frozen=True)
class Calibration:
    """Result of calibrating one embedding model against one reference run."""

    embedding_model: str
    reference_threshold: float
    coherence_threshold: float
    questions: tuple[QuestionKey, ...]
    answers: tuple[ScoredAnswer, ...]
    """Every recorded answer, chain after chain."""
    compared: tuple[ScoredAnswer, ...]
    """Answers compared: not first in a chain (novelty 1 on every scale), reference novelty set."""
    reference_decisions: tuple[bool, ...]
    """``reference_novelty > reference_threshold`` per compared answer."""
    reference_totals: dict[str, int]
    calibrated: RuleFigures
    uncalibrated: RuleFigures
    """The reference threshold applied unchanged on the calibrated model's scale."""
    setting_value: float
    """The calibrated threshold rounded (3 decimals or more) without changing a decision."""
    unique_texts: int
    embed_seconds: float

    @property
    def reference_pass_rate(self) -> float:
        """Share of compared answers the reference accepts: the agreement a rule accepting
        everything would reach, the baseline agreement must beat."""
        return sum(self.reference_decisions) / len(self.reference_decisions)

    @property
    def threshold(self) -> float:
        """The calibrated threshold (a midpoint between two observed novelties)."""
        return self.calibrated.threshold

    def to_dict(self) -> dict[str, Any]:
        """Every reported figure as JSON-ready values."""
        return {
            "embedding_model": self.embedding_model,
            "reference_threshold": self.reference_threshold,
            "coherence_threshold": self.coherence_threshold,
            "threshold": self.threshold,
            "setting_value": self.setting_value,
            "questions": len(self.questions),
            "answers": len(self.answers),
            "compared_answers": len(self.compared),
            "reference_novelty_failures": sum(not d for d in self.reference_decisions),
            "reference_pass_rate": self.reference_pass_rate,
            "unique_texts": self.unique_texts,
            "embed_seconds": self.embed_seconds,
            "reference_totals": dict(self.reference_totals),
            "calibrated": self.calibrated.to_dict(),
            "uncalibrated": self.uncalibrated.to_dict(),
            "question_scores": question_scores(
                self.questions,
                {"calibrated": self.calibrated, "uncalibrated": self.uncalibrated},
            ),
            "note": CENSORING_NOTE,
        }


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two equally long sequences; None when undefined (fewer than two
    items, or one side all tied). Pairwise O(n²), meant for a handful of models."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("kendall_tau_b needs two 1-d sequences of the same length")
    i, j = np.triu_indices(len(a), k=1)
    sa = np.sign(a[i] - a[j])
    sb = np.sign(b[i] - b[j])
    pairs = len(i)
    untied_a = pairs - int(np.sum(sa == 0))
    untied_b = pairs - int(np.sum(sb == 0))
    if untied_a == 0 or untied_b == 0:
        return None
    return float(np.sum(sa * sb) / math.sqrt(untied_a * untied_b))


def _model_label(question: QuestionResult, several_temperatures: bool) -> str:
    if several_temperatures:
        return f"{question.model} T={question.temperature:g}"
    return question.model


def _embed_unique(
    questions: Sequence[QuestionResult], embed: EmbedFn
) -> tuple[dict[str, np.ndarray], float]:
    """One vector per distinct answer text, from a single call (the whole file at once)."""
    texts = list(dict.fromkeys(a.answer for q in questions for a in q.answers))
    started = time.perf_counter()
    matrix = np.asarray(embed(texts), dtype=np.float64)
    seconds = time.perf_counter() - started
    if matrix.ndim != 2 or matrix.shape[0] != len(texts):
        raise ValueError(f"embedding function returned shape {matrix.shape} for {len(texts)} texts")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("embedding function returned non-finite values")
    return dict(zip(texts, matrix, strict=True)), seconds


@dataclass(frozen=True)
class Replay:
    """The reference chains scored on another scale: both calibrations measure their cuts here."""

    against: ReferenceChains
    chains: tuple[Sequence[Scored], ...]
    """The reference chains with the other scale's scores in place of the reference's."""
    values: np.ndarray
    """The other scale's score of each compared answer."""
    reference: np.ndarray
    """The reference's decision on each compared answer."""
    rule: Callable[[float], Thresholds]
    """The rule a cut on the other scale makes."""
    kind: type[RuleFigures] = RuleFigures

    def figures(self, threshold: float) -> RuleFigures:
        """How well ``> threshold`` on the other scale matches the reference."""
        return self.kind.measure(
            threshold,
            self.values > threshold,
            self.reference,
            self.chains,
            self.rule(threshold),
            self.against,
        )

    def best(
        self,
        intervals: Sequence[tuple[float, float]],
        at: Callable[[tuple[float, float]], float],
        last: Callable[[tuple[float, float]], float],
    ) -> tuple[float, float]:
        """Of ``intervals`` of equivalent cuts, one with the most agreeing decisions; ties go to
        the best question scores at ``at`` (more equal, then smaller mean absolute difference),
        then to the smallest ``last``."""
        agree = [int(np.sum((self.values > low) == self.reference)) for low, _ in intervals]
        best = [c for c, a in zip(intervals, agree, strict=True) if a == max(agree)]
        if len(best) == 1:
            return best[0]

        def rank(interval: tuple[float, float]) -> tuple[float, float, float]:
            figures = self.figures(at(interval))
            return -figures.equal_scores, figures.mean_abs_score_diff, last(interval)

        return min(best, key=rank)


def _midpoint(interval: tuple[float, float]) -> float:
    return (interval[0] + interval[1]) / 2.0


def _best_threshold(replay: Replay) -> float:
    """The midpoint cut with the most agreeing decisions (``Replay.best``; last ties: smaller)."""
    distinct = np.unique(replay.values)
    if len(distinct) < 2:
        raise ValueError("need at least two distinct novelties on the model's scale")
    intervals = [(float(a), float(b)) for a, b in itertools.pairwise(distinct)]
    return _midpoint(replay.best(intervals, _midpoint, _midpoint))


def round_threshold(
    threshold: float, values: Sequence[float] | np.ndarray, digits: int = 3
) -> float:
    """``threshold`` rounded to ``digits`` decimals, or more if a decision would change."""
    observed = np.asarray(values, dtype=np.float64)
    exact = observed > threshold
    for places in range(digits, 16):
        rounded = round(threshold, places)
        if np.array_equal(observed > rounded, exact):
            return rounded
    return threshold


def calibrate(
    questions: Sequence[QuestionResult],
    embed: EmbedFn,
    *,
    embedding_model: str = "model",
    reference_threshold: float = NOVELTY_THRESHOLD,
    coherence_threshold: float = COHERENCE_THRESHOLD,
) -> Calibration:
    """Calibrate ``embed``'s novelty threshold against reference chains (``read_aidanbench_file``),
    each with its recorded coherence and text-embedding-3-large novelty. ``embed`` is called once,
    with every distinct answer text. Raises ``ValueError`` when there is nothing to compare or the
    embedding function misbehaves."""
    if not questions:
        raise ValueError("the reference has no questions")
    vectors, embed_seconds = _embed_unique(questions, embed)
    reference_rule = Thresholds(coherence=coherence_threshold, novelty=reference_threshold)
    reference = ReferenceChains.of(questions, reference_rule)
    chains: list[tuple[ScoredAnswer, ...]] = []
    for question in questions:
        seen = [vectors[a.answer] for a in question.answers]
        chains.append(
            tuple(
                ScoredAnswer(a.coherence, a.novelty, cosine_novelty(seen[k], seen[:k]))
                for k, a in enumerate(question.answers)
            )
        )
    compared = tuple(a for chain in chains for a in chain[1:] if a.reference_novelty is not None)
    if not compared:
        raise ValueError("the reference has no answer with an earlier answer and a novelty")
    reference_decisions = tuple(
        bool(a.reference_novelty is not None and a.reference_novelty > reference_threshold)
        for a in compared
    )
    replay = Replay(
        against=reference,
        chains=tuple(chains),
        values=np.asarray([a.novelty for a in compared], dtype=np.float64),
        reference=np.asarray(reference_decisions, dtype=bool),
        rule=lambda cut: Thresholds(coherence=coherence_threshold, novelty=cut),
    )
    threshold = _best_threshold(replay)
    return Calibration(
        embedding_model=embedding_model,
        reference_threshold=reference_threshold,
        coherence_threshold=coherence_threshold,
        questions=reference.questions,
        answers=tuple(a for chain in chains for a in chain),
        compared=compared,
        reference_decisions=reference_decisions,
        reference_totals=reference.reference_totals,
        calibrated=replay.figures(threshold),
        uncalibrated=replay.figures(reference_threshold),
        setting_value=round_threshold(threshold, replay.values),
        unique_texts=len(vectors),
        embed_seconds=embed_seconds,
    )


def plot_calibration(calibration: Calibration, path: Path) -> Path:
    """Scatter of reference vs. model novelty of compared answers, by agreement, with the cuts."""
    from aidanbench.analysis.plots import new_figure

    x = np.asarray([a.reference_novelty for a in calibration.compared], dtype=np.float64)
    y = np.asarray([a.novelty for a in calibration.compared], dtype=np.float64)
    ref = np.asarray(calibration.reference_decisions, dtype=bool)
    got = np.asarray(calibration.calibrated.decisions, dtype=bool)
    groups = [
        (ref & got, "both pass", "#9aa5b1", 10),
        (~ref & ~got, "both fail", "#1f5fbf", 22),
        (~ref & got, "passes here, fails in reference", "#d62728", 28),
        (ref & ~got, "fails here, passes in reference", "#ff9f1c", 28),
    ]
    t = calibration.threshold
    r = calibration.reference_threshold
    fig = new_figure((7.5, 6.2), dpi=120)
    ax = fig.add_subplot()
    for mask, label, colour, size in groups:
        if mask.any():
            ax.scatter(
                x[mask],
                y[mask],
                s=size,
                c=colour,
                alpha=0.75,
                linewidths=0,
                label=f"{label} ({int(mask.sum())})",
            )
    draw_cuts(
        ax,
        (r, f"reference cut {r:g} (x)", f"uncalibrated {r:g} on this model (y)"),
        (t, f"calibrated {calibration.setting_value:g} on this model (y)"),
    )
    ax.set_xlim(-0.02, max(1.0, float(x.max()) + 0.02))
    ax.set_ylim(-0.02, max(1.0, float(y.max()) + 0.02))
    ax.set_xlabel("novelty, reference (text-embedding-3-large)")
    ax.set_ylabel(f"novelty, {calibration.embedding_model}")
    cal, unc = calibration.calibrated, calibration.uncalibrated
    ax.set_title(
        f"Novelty calibration: {calibration.embedding_model}, "
        f"{len(calibration.compared)} non-first answers\n"
        f"decision agreement {cal.decision_agreement:.1%} calibrated vs "
        f"{unc.decision_agreement:.1%} at {r:g}; "
        f"equal question scores {cal.score_agreement:.0%} vs {unc.score_agreement:.0%}",
        fontsize=10,
    )
    return save_scatter(fig, ax, path)


def draw_cuts(ax: Axes, reference: tuple[float, str, str], calibrated: tuple[float, str]) -> None:
    """A calibration scatter's cuts: the reference's on x and, unchanged, on y; the calibrated."""
    cut, on_x, on_y = reference
    ax.axvline(cut, color="black", linewidth=1, label=on_x)
    ax.axhline(cut, color="black", linestyle=":", linewidth=1.2, label=on_y)
    threshold, label = calibrated
    ax.axhline(threshold, color="#2ca02c", linestyle="--", linewidth=1.6, label=label)


def save_scatter(fig: Figure, ax: Axes, path: Path) -> Path:
    """Grid and legend on a calibration scatter, written to ``path`` (returned)."""
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    return save_figure(fig, path, dpi=None)
