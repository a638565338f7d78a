"""What the judging says of itself: the judge's noise, from answers judged several times
(``judge_samples`` K > 1); a judge panel's decisions; the replies that could not be read.

A judge asked the same prompt twice need not answer the same (o1-mini could not be given a
temperature; today's reasoning judges sample too). With K judgments of each answer this
measures, for one (model, temperature):

* the **spread** of each answer's judgments, averaged over the answers judged more than once;
* the **flips**: answers whose judgments fall on both sides of the coherence threshold, so
  that which judgment decides changes whether the answer is valid;
* the **score under re-judging**, from a noise model fitted to the K judgments
  (``NoiseModel``). An answer's level is its judgments' median (a mean would follow a wild
  judgment, as a reply that inverts the scale). How far a judgment strays depends on the level
  (a reply inverting 14 lands far above it; one inverting 56 close below), so answers are
  binned by level, about ``PER_BIN`` each, and each bin pools its judgments' distances from
  their medians (the median's own 0 left out). A re-judging draws each answer's deciding
  judgment as its level plus a distance from its bin's pool, rounded and clipped to 0-100 as
  a reply is, and walks each chain again (recorded novelty kept). With a judge panel each
  judge draws from its own model and the panel's rule decides (``seats``). The interval's
  coverage of actual re-judgings is measured by ``bench.judge_coverage`` (docs/judge.md);
* the **interval of the score** with both: each bootstrap replicate draws the questions (with
  their repeats, as ``summary``'s does) and a re-judging; beside it, question resampling alone.

The score itself stays the benchmark's: the first judgment decides (``nodes.judge_calls``).
A drawn judgment can pass a chain's recorded terminal answer; what would have followed was
never generated, so such a chain counts up to its recorded end, a lower bound (``open_chains``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from aidanbench.core.calls import known_sum
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult
from aidanbench.services.pricing import same_model

BOOTSTRAP_RESAMPLES = 10_000
"""Replicates per interval of every report; enough for stable 2.5 % and 97.5 % percentiles."""

BOOTSTRAP_SEED = 20241
"""Seed of the bootstrap generator, fixed so reports are reproducible; ``summary.bootstrap_sum``
draws its questions with it as ``judge_noise`` does (judgments: the next seed)."""


def judgments(answer: AnswerLine) -> list[float]:
    """Every coherence judgment of an answer, the deciding one first."""
    samples = answer.coherence_samples
    if samples:
        return [float(s) for s in samples]
    return [] if answer.coherence is None else [float(answer.coherence)]


@dataclass(frozen=True)
class JudgeNoise:
    """The judge's noise over one row's answers, and what it does to the row's score."""

    samples: int
    """The most judgments any answer had (K)."""
    answers: int
    """Answers judged more than once."""
    mean_spread: float
    """Mean over those answers of the largest minus the smallest judgment."""
    mean_sd: float
    """Mean over those answers of the judgments' standard deviation (ddof 1)."""
    varied: int
    """Answers whose judgments were not all equal."""
    flips: int
    """Answers with judgments on both sides of the coherence threshold."""
    threshold: float | None
    """The threshold flips are counted at; None when lines differ (each counted at its own)."""
    score: float
    """The row's score from the deciding judgments (per repeat)."""
    rejudged_interval: tuple[float, float]
    """95% interval of the score under re-judging the same answers (module docstring)."""
    rejudged_sd: float
    """The standard deviation of the score under re-judging."""
    question_interval: tuple[float, float]
    """95% percentile bootstrap interval, resampling questions only."""
    judge_interval: tuple[float, float]
    """The same replicates, each also a re-judging."""
    open_chains: int
    """Chains that some draw walks past their recorded end (counted up to it there)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        data = asdict(self)
        for name in ("rejudged_interval", "question_interval", "judge_interval"):
            data[name] = list(data[name])
        return data


def seats(answer: AnswerLine, rule: Thresholds) -> list[tuple[list[float], float]]:
    """Each judge's judgments of an answer and its threshold: a panel's every judge, or one
    (none for a judge that gave no score)."""
    panel = answer.judges
    if not panel:
        return [(judgments(answer), rule.coherence)]
    return [(_judged(seat), float(seat["threshold"])) for seat in panel]


def _judged(seat: Mapping[str, Any]) -> list[float]:
    samples, score = seat.get("samples"), seat["score"]
    return [float(x) for x in samples] if samples else [] if score is None else [float(score)]


def _other_pass(answer: AnswerLine, rule: Thresholds) -> bool:
    """The answer passes every criterion but coherence."""
    others = {name: limit for name, limit in rule.on.items() if name != "coherence"}
    values = {name: getattr(answer, name, None) for name in others}
    return all(v is not None and v > others[name] for name, v in values.items())


def _walk(passes: np.ndarray) -> np.ndarray:
    """Valid answers before the first failure, per row of a (draws x answers) array."""
    if passes.shape[1] == 0:
        return np.zeros(passes.shape[0], dtype=np.int64)
    failed = ~passes
    return np.where(failed.any(axis=1), failed.argmax(axis=1), passes.shape[1])


def percentile_interval(totals: np.ndarray) -> tuple[float, float]:
    """The 2.5th to the 97.5th percentile of bootstrap totals."""
    low, high = np.percentile(totals, [2.5, 97.5])
    return float(low), float(high)


PER_BIN = 50
"""Answers (judged more than once) per level bin of the noise model."""


class NoiseModel:
    """How a judge's judgments stray from an answer's level (module docstring)."""

    def __init__(self, judged: Sequence[Sequence[float]]) -> None:
        levels = np.asarray([np.median(s) for s in judged])
        bins = max(1, len(judged) // PER_BIN)
        ranked = np.sort(levels)
        self.edges = ranked[[len(ranked) * k // bins for k in range(1, bins)]]
        strays: list[list[np.ndarray]] = [[] for _ in range(bins)]
        for level, s in zip(levels, judged, strict=True):
            away = np.asarray(s, dtype=np.float64) - level
            if len(away) % 2:  # the median's own distance, 0
                away = np.delete(away, np.argmin(np.abs(away)))
            # sorted: the draws depend on the judgments, not on the order they came back in
            away = np.sort(away)
            strays[int(np.searchsorted(self.edges, level, side="right"))].append(away)
        # a judge asked once per answer shows no noise: its judgments are drawn as they are
        self.pools = [np.concatenate(found) if found else np.zeros(1) for found in strays]

    def draw(
        self, judged: Sequence[Sequence[float]], count: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``count`` re-judgings of answers with these judgments: (count x answers)."""
        levels = np.asarray([np.median(s) for s in judged], dtype=np.float64)
        drawn = np.empty((count, len(levels)))
        for i, level in enumerate(levels):
            pool = self.pools[int(np.searchsorted(self.edges, level, side="right"))]
            drawn[:, i] = level + pool[rng.integers(0, len(pool), size=count)]
        return np.clip(np.rint(drawn), 0, 100)


def judge_noise(
    lines: Sequence[QuestionResult],
    default: Thresholds | None = None,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> JudgeNoise | None:
    """The noise of one row's lines, or None when no answer was judged more than once; each
    line is walked under its own thresholds (``default`` when unrecorded)."""
    rule_of = {id(line): line.thresholds or default or Thresholds() for line in lines}
    multi = [
        (judgments(a), rule_of[id(line)].coherence)
        for line in lines
        for a in line.answers
        if len(judgments(a)) > 1
    ]
    if not multi:
        return None
    spreads = [max(s) - min(s) for s, _ in multi]
    thresholds = {t for _, t in multi}
    threshold = thresholds.pop() if len(thresholds) == 1 else None
    seats_of = {id(a): seats(a, rule_of[id(line)]) for line in lines for a in line.answers}
    panel_size = max(len(found) for found in seats_of.values())
    models = [
        NoiseModel([found[j][0] for found in seats_of.values() if len(found[j][0]) > 1])
        for j in range(panel_size)
    ]
    judge_rng = np.random.default_rng(seed + 1)
    questions = list(dict.fromkeys(line.question for line in lines))
    column = {q: i for i, q in enumerate(questions)}
    repeats = len({line.repeat for line in lines})
    drawn = np.zeros((resamples, len(questions)))
    deciding = np.zeros(len(questions))
    open_chains = 0
    for line in lines:
        rule = rule_of[id(line)]
        rows = [seats_of[id(a)] for a in line.answers]
        if any(not all(seat[0] for seat in r) for r in rows):  # an unscored answer ends it
            rows = rows[: next(i for i, r in enumerate(rows) if not all(seat[0] for seat in r))]
        other = np.asarray([_other_pass(a, rule) for a in line.answers[: len(rows)]], dtype=bool)
        votes = np.zeros((1, len(rows)))
        drawn_votes = np.zeros((resamples, len(rows)))
        for j, model in enumerate(models):
            judged = [r[j][0] for r in rows]
            cut = np.asarray([r[j][1] for r in rows])
            votes += np.asarray([s[0] for s in judged]) > cut
            drawn_votes += model.draw(judged, resamples, judge_rng) > cut
        first = _walk((2 * votes > len(models)) & other)[0]
        walked = _walk((2 * drawn_votes > len(models)) & other[None, :])
        open_chains += int(first < len(rows) and bool((walked == len(rows)).any()))
        drawn[:, column[line.question]] += walked / repeats
        deciding[column[line.question]] += first / repeats
    rejudged = drawn.sum(axis=1)
    # drawn as summary.bootstrap_sum draws them: the question-only interval is its interval
    pick = np.random.default_rng(seed).integers(0, len(questions), size=(resamples, len(questions)))
    with_judge = np.take_along_axis(drawn, pick, axis=1).sum(axis=1)
    without = deciding[pick].sum(axis=1)
    return JudgeNoise(
        samples=max(len(s) for s, _ in multi),
        answers=len(multi),
        mean_spread=float(np.mean(spreads)),
        mean_sd=float(np.mean([np.std(s, ddof=1) for s, _ in multi])),
        varied=sum(1 for spread in spreads if spread > 0),
        flips=sum(1 for s, t in multi if min(s) <= t < max(s)),
        threshold=threshold,
        score=float(deciding.sum()),
        rejudged_interval=percentile_interval(rejudged),
        rejudged_sd=float(np.std(rejudged)),
        question_interval=percentile_interval(without),
        judge_interval=percentile_interval(with_judge),
        open_chains=open_chains,
    )


def noise_text(noise: JudgeNoise) -> str:
    """One paragraph for text reports."""
    low, high = noise.question_interval
    jlow, jhigh = noise.judge_interval
    rlow, rhigh = noise.rejudged_interval
    share = noise.flips / noise.answers
    at = "their threshold" if noise.threshold is None else f"{noise.threshold:g}"
    return (
        f"judge noise ({noise.samples} judgments per answer, {noise.answers} answers): mean "
        f"spread {noise.mean_spread:.1f} points (sd {noise.mean_sd:.1f}), {noise.varied} "
        f"answers judged differently, {noise.flips} ({share:.1%}) with judgments on both "
        f"sides of {at}; the score {noise.score:g} judged again: 95% interval "
        f"[{rlow:.1f}, {rhigh:.1f}] (sd {noise.rejudged_sd:.1f}, from a model of the "
        f"judge's noise); 95% interval [{low:.1f}, {high:.1f}] resampling questions, "
        f"[{jlow:.1f}, {jhigh:.1f}] resampling questions and judging again"
        + (
            f" ({noise.open_chains} chains can pass their recorded end under resampling: "
            "counted up to it, a lower bound)"
            if noise.open_chains
            else ""
        )
    )


@dataclass(frozen=True)
class JudgePanel:
    """What a judge panel's judges decided of one row's answers, each judge its own record."""

    judges: tuple[str, ...]
    """The judge models, the first (the recorded coherence) first."""
    thresholds: tuple[float, ...]
    """Each judge's coherence threshold."""
    answers: int
    """Answers the panel decided."""
    passed: tuple[int, ...]
    """Per judge, the answers it passed."""
    disagreed: int
    """Answers on which the judges' decisions differ (a judge without one left out)."""
    dollars: tuple[float | None, ...]
    """Per judge, what its judgments cost (None: unknown for at least one answer)."""
    unscored: tuple[int, ...]
    """Per judge, the answers it gave no score: the others' majority decided them, or (an
    ``undecided`` question's) left them undecided."""
    undecided: int
    """Questions stopped on an answer the judges who answered left undecided."""
    unreadable: tuple[dict[str, int], ...]
    """Per judge, its replies without a readable score, by why (``unreadable_of``)."""
    served: tuple[dict[str, int], ...]
    """Per judge, the models its provider said served its judgments, with how many answers."""

    @property
    def disagreement(self) -> float:
        """Share of the answers on which the judges' decisions differ."""
        return self.disagreed / self.answers if self.answers else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {**asdict(self), "disagreement": self.disagreement}


def judge_panel(lines: Sequence[QuestionResult]) -> JudgePanel | None:
    """The panel's decisions over ``lines``; None when no answer was judged by a panel. A
    question a judge's failure stopped (its error names the judge) counts for that judge."""
    judged = [a.judges for line in lines for a in line.answers if a.judges]
    if not judged:
        return None
    names = tuple(j["judge"] for j in judged[0])
    stopped = [
        line.error_record
        for line in lines
        if line.error_record and line.error_record.get("judge") in names
    ]
    votes = [[j["passes"] for j in seats] for seats in judged]
    unreadable: list[dict[str, int]] = [{} for _ in names]
    served: list[dict[str, int]] = [{} for _ in names]
    for seats in judged:
        for i, seat in enumerate(seats):
            _add(unreadable[i], seat.get("unreadable"))
            if seat.get("served_model"):
                _add(served[i], {str(seat["served_model"]): 1})
    for error in stopped:
        _add(unreadable[names.index(error["judge"])], error.get("unreadable"))
    return JudgePanel(
        judges=names,
        thresholds=tuple(float(j["threshold"]) for j in judged[0]),
        answers=len(judged),
        passed=tuple(sum(1 for vote in votes if vote[i] is True) for i in range(len(names))),
        disagreed=sum(1 for vote in votes if True in vote and False in vote),
        dollars=tuple(
            known_sum(seats[i].get("cost_usd") for seats in judged) for i in range(len(names))
        ),
        unscored=tuple(
            sum(1 for vote in votes if vote[i] is None)
            + sum(1 for error in stopped if error["judge"] == name)
            for i, name in enumerate(names)
        ),
        undecided=len(stopped),
        unreadable=tuple(dict(sorted(found.items())) for found in unreadable),
        served=tuple(dict(sorted(found.items())) for found in served),
    )


def _add(total: dict[str, int], more: Mapping[str, int] | None) -> None:
    for key, count in (more or {}).items():
        total[key] = total.get(key, 0) + count


def panel_text(panel: JudgePanel) -> str:
    """One line for text reports: each judge's threshold, passes and dollars, and only when
    there are any, the answers it gave no score, its unreadable replies and the other models
    its provider said served it."""
    parts = []
    for i, name in enumerate(panel.judges):
        dollars = panel.dollars[i]
        figures = [
            f"passed {panel.passed[i]} of {panel.answers}",
            "unknown dollars" if dollars is None else f"${dollars:.4f}",
        ]
        if panel.unscored[i]:
            figures.append(f"no score for {panel.unscored[i]}")
        if panel.unreadable[i]:
            figures.append(_replies_text(panel.unreadable[i]))
        others = {n: c for n, c in panel.served[i].items() if not same_model(name, n)}
        if others:
            named = ", ".join(f"{n} ({c} answers)" for n, c in others.items())
            figures.append(f"served by {named}")
        parts.append(f"{name} at > {panel.thresholds[i]:g} ({', '.join(figures)})")
    undecided = (
        f"; {panel.undecided} question(s) stopped on an answer the judges who answered "
        "left undecided"
        if panel.undecided
        else ""
    )
    return (
        f"judge panel, an answer coherent when more than half its judges pass it: "
        f"{', '.join(parts)}; they disagreed on {panel.disagreed} of {panel.answers} answers "
        f"({panel.disagreement:.1%}){undecided}"
    )


UNREADABLE_WORDS = {
    "missing": "without a score (refused)",
    "empty": "empty",
    "out_of_range": "out of range",
    "not_integer": "not a whole number",
    "multiple": "with several scores",
}
"""How a report names each kind of unreadable judge reply (``CallStats.unreadable``)."""


def unreadable_of(lines: Sequence[QuestionResult]) -> dict[str, int]:
    """The judge replies of these lines that could not be read, by why: those of the recorded
    answers (asked again, then read) and those of the judgment a question stopped on
    (``judge_error``: unreadable in every try). A panel's are every judge's
    (``JudgePanel.unreadable`` has them per judge)."""
    found: dict[str, int] = {}
    for line in lines:
        for answer in line.answers:
            calls: Mapping[str, Any] = answer.calls or {}
            _add(found, (calls.get("judge") or {}).get("unreadable"))
        if line.error_record:
            _add(found, line.error_record.get("unreadable"))
    return dict(sorted(found.items()))


def unreadable_words(found: Mapping[str, int]) -> str | None:
    """Unreadable replies by why, in words (``2 without a score (refused), 1 empty``); None
    when there were none."""
    parts = [f"{count} {UNREADABLE_WORDS.get(why, why)}" for why, count in found.items()]
    return ", ".join(parts) or None


def _replies_text(found: Mapping[str, int]) -> str:
    return f"unreadable replies: {unreadable_words(found)}"


def unreadable_text(found: dict[str, int]) -> str:
    """The replies a judge gave that held no readable score, in words."""
    return f"judge replies unreadable: {unreadable_words(found)}"
