"""What the judging says of itself: the judge's noise, from answers judged several times
(``judge_samples`` K > 1); a judge panel's decisions; the replies that could not be read.

A judge asked the same prompt twice need not answer the same (o1-mini could not be given a
temperature; today's reasoning judges sample too). With K judgments of each answer this
measures, for one (model, temperature):

* the **spread** of each answer's judgments, averaged over the answers judged more than once;
* the **flips**: answers whose judgments fall on both sides of the coherence threshold, so
  that which judgment decides changes whether the answer is valid;
* the **score under re-judging**: the score of a *fresh re-judging* of the same answers (each
  judged once more, that judgment deciding, every chain walked again with its recorded novelty),
  not the score a judge without noise would give. A re-judging depends on each answer only
  through its chance of passing a fresh judgment, and the distribution of the re-judged score
  is a polynomial of degree one in each of those chances (an answer passes or fails once per
  re-judging; chains are walked independently). So the share of an answer's K judgments that
  pass, an unbiased estimate of its chance whatever shape the judge's noise has, makes the
  walk's expected length an unbiased estimate of the mean re-judged score
  (``rejudged_mean``), for any judge. Its spread cannot be read off the same way: K judgments
  show no failure of most answers that fail one fresh judgment in thirty, and the estimate
  itself strays. The interval is that mean plus how far a re-judging strays from its mean less
  how far the estimate strays from it, both simulated from ``NoiseModel``, pooled over the
  answers, with each pooled rate's uncertainty drawn once per replicate for every answer.
  Where noise differs between answers (their length, their topic) the pooled model spreads
  failures over answers that never fail, which widens the interval; it does not move its
  centre. With a judge panel each judge has its own model and the panel's rule decides
  (``seats``). How often the interval holds a fresh re-judging is measured by
  ``bench.judge_coverage`` (docs/judge.md), for several shapes of noise;
* whether K judgments **support** that interval: the pooled rates rest on the answers judged
  on both sides of their threshold; with fewer than ``SUPPORT`` of them the interval says so
  and names the K that would give that many (``needed_samples``);
* the **interval of the score** with both: each bootstrap replicate draws the questions (with
  their repeats, as ``summary``'s does) and a re-judging; beside it, question resampling alone.

The score itself stays the benchmark's: the first judgment decides (``nodes.judge_calls``).
A re-judging can pass a chain's recorded terminal answer; what would have followed was never
generated, so such a chain counts up to its recorded end, a lower bound (``open_chains``).
"""

from __future__ import annotations

import math
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

REJUDGED_COVERS = (
    "a fresh re-judging's score (the same answers judged once more, that judgment deciding), "
    "not the score of a judge without noise"
)
"""What the interval under re-judging covers, said beside it wherever it is shown."""

PRIOR = 0.5
"""Jeffreys' pseudo-count added to each pooled rate's passes and to its failures: a rate no
held-out judgment contradicted stays uncertain, since K judgments of n answers cannot show
failures rarer than about one in K·n."""

SUPPORT = 10
"""Answers judged on both sides of their threshold that the interval needs: the pooled rates
rest on them, and with ten a rate's relative uncertainty is about a third (one over the root
of the count)."""


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
    rejudged_mean: float
    """Unbiased estimate of the mean score of a fresh re-judging (module docstring)."""
    rejudged_interval: tuple[float, float]
    """95% interval of the score of a fresh re-judging of the same answers (``REJUDGED_COVERS``)."""
    rejudged_sd: float
    """The standard deviation of that score, as the interval's replicates give it."""
    crossings: int
    """Answers judged on both sides of their threshold, each judge of a panel counted apart
    (``flips`` for a single judge): what the interval's pooled rates rest on."""
    needed_samples: int | None
    """None when ``crossings`` reaches ``SUPPORT``; else the judgments per answer that would
    give about that many (crossings grow with K while a crossing is rare), at least this many
    when nothing crossed."""
    question_interval: tuple[float, float]
    """95% percentile bootstrap interval, resampling questions only."""
    judge_interval: tuple[float, float]
    """The same replicates, each also a re-judging."""
    open_chains: int
    """Chains that some draw walks past their recorded end (counted up to it there)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values, with what the interval under re-judging covers."""
        data = asdict(self)
        for name in ("rejudged_interval", "question_interval", "judge_interval"):
            data[name] = list(data[name])
        data["rejudged_covers"] = REJUDGED_COVERS
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


def _expected_walk(chances: np.ndarray) -> np.ndarray:
    """Expected valid answers before the first failure, per row of (draws x answers) chances
    of passing, the answers independent: the sum over j of the chance that the first j pass."""
    return np.cumprod(chances, axis=1).sum(axis=1)


def _majority(chances: Sequence[np.ndarray]) -> np.ndarray:
    """The chance that more than half of independent judges pass, from each one's chance."""
    if len(chances) == 1:
        return chances[0]
    held = [np.ones_like(chances[0])]  # held[m]: the chance that m judges so far pass
    for chance in chances:
        grown = [np.zeros_like(chance) for _ in range(len(held) + 1)]
        for m, part in enumerate(held):
            grown[m] += part * (1 - chance)
            grown[m + 1] += part * chance
        held = grown
    return np.sum([part for m, part in enumerate(held) if 2 * m > len(chances)], axis=0)


def percentile_interval(totals: np.ndarray) -> tuple[float, float]:
    """The 2.5th to the 97.5th percentile of bootstrap totals."""
    low, high = np.percentile(totals, [2.5, 97.5])
    return float(low), float(high)


_SHARE = 2.0**20
"""Orders a held-out judgment's description by the share of the others that pass before
their margin (margins are clipped to within ``_MARGIN`` points, far less than one step of
share)."""
_MARGIN = 1000.0


def _views(scores: Sequence[float], threshold: float) -> np.ndarray:
    """Each judgment held out in turn, described by the others: the share of them that pass,
    then how far the lowest lies above the threshold (negative: at or below it); a single
    judgment is described by itself."""
    s = np.asarray(scores, dtype=np.float64)
    passing = s > threshold
    if len(s) == 1:
        share, lowest = passing.astype(np.float64), s
    else:
        share = (passing.sum() - passing) / (len(s) - 1)
        ranked = np.sort(s)
        alone = (s == ranked[0]) & (np.count_nonzero(s == ranked[0]) == 1)
        lowest = np.where(alone, ranked[1], ranked[0])
    return share * _SHARE + np.clip(lowest - threshold, -_MARGIN, _MARGIN)


class NoiseModel:
    """How often a fresh judgment of an answer passes, pooled over a judge's answers.

    Each judgment of an answer judged more than once is held out in turn and described by
    the others (``_views``). Ordered by that description, the held-out judgments get the rate
    of passing that never falls as the description improves and fits them best (isotonic
    regression, pool-adjacent-violators; equal rates pooled), a block of views per rate
    keeping its passes and failures. An answer's chance is the mean of its views' rates:
    each view holds K - 1 judgments, a little less than the answer's K, which errs towards
    uncertainty. No assumption about the noise's shape enters, only that answers described
    alike fail alike; a judge asked once per answer shows no noise and leaves no blocks
    (``exact``: its judgments are drawn as they are)."""

    def __init__(self, judged: Sequence[tuple[Sequence[float], float]]) -> None:
        several = [(s, t) for s, t in judged if len(s) > 1]
        keys = np.concatenate([_views(s, t) for s, t in several] or [np.zeros(0)])
        passed = np.concatenate([np.asarray(s) > t for s, t in several] or [np.zeros(0, bool)])
        found, where = np.unique(keys, return_inverse=True)
        trials = np.bincount(where, minlength=len(found)).astype(np.float64)
        wins = np.bincount(where, weights=passed.astype(np.float64), minlength=len(found))
        starts: list[float] = []
        won: list[float] = []
        tried: list[float] = []
        for key, w, t in zip(found, wins, trials, strict=True):
            starts.append(float(key))
            won.append(float(w))
            tried.append(float(t))
            while len(tried) > 1 and won[-2] * tried[-1] >= won[-1] * tried[-2]:
                last_won, last_tried = won.pop(), tried.pop()
                won[-1] += last_won
                tried[-1] += last_tried
                starts.pop()
        self.starts = np.asarray(starts)
        self.passes = np.asarray(won)
        self.fails = np.asarray(tried) - self.passes

    @property
    def exact(self) -> bool:
        """No answer was judged twice: nothing to pool."""
        return len(self.starts) == 0

    def blocks(self, scores: Sequence[float], threshold: float) -> np.ndarray:
        """The block of each of an answer's views."""
        found = np.searchsorted(self.starts, _views(scores, threshold), side="right") - 1
        return np.clip(found, 0, None)

    def rates(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` draws of every block's rate from its Beta posterior (count x blocks)."""
        return rng.beta(self.passes + PRIOR, self.fails + PRIOR, size=(count, len(self.starts)))

    def chances(
        self,
        judged: Sequence[Sequence[float]],
        thresholds: np.ndarray,
        rates: np.ndarray,
    ) -> np.ndarray:
        """Each answer's chance of passing a fresh judgment under each row of ``rates``
        (draws x answers)."""
        views = [self.blocks(s, t) for s, t in zip(judged, thresholds, strict=True)]
        width = max((len(v) for v in views), default=1)
        ids = np.zeros((len(views), width), dtype=np.int64)
        weights = np.zeros((len(views), width))
        for i, found in enumerate(views):
            ids[i, : len(found)] = found
            weights[i, : len(found)] = 1 / len(found)
        return np.einsum("rnk,nk->rn", rates[:, ids], weights)


def needed_samples(crossings: int, samples: int) -> int | None:
    """None when ``crossings`` support the interval; else the judgments per answer that would
    give about ``SUPPORT`` crossings (``JudgeNoise.needed_samples``)."""
    if crossings >= SUPPORT:
        return None
    return math.ceil(samples * SUPPORT / max(crossings, 1))


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
        NoiseModel([found[j] for found in seats_of.values() if len(found[j][0]) > 1])
        for j in range(panel_size)
    ]
    crossings = sum(
        1 for found in seats_of.values() for s, t in found if len(s) > 1 and min(s) <= t < max(s)
    )
    judge_rng = np.random.default_rng(seed + 1)
    # one draw of every pooled rate per replicate, shared by all answers: a rate's
    # uncertainty moves every answer it describes together
    rates = [model.rates(resamples, judge_rng) for model in models]
    questions = list(dict.fromkeys(line.question for line in lines))
    column = {q: i for i, q in enumerate(questions)}
    repeats = len({line.repeat for line in lines})
    drawn = np.zeros((resamples, len(questions)))
    deciding = np.zeros(len(questions))
    centre = np.zeros(len(questions))
    top = np.zeros(len(questions))
    open_chains = 0
    for line in lines:
        rule = rule_of[id(line)]
        rows = [seats_of[id(a)] for a in line.answers]
        if any(not all(seat[0] for seat in r) for r in rows):  # an unscored answer ends it
            rows = rows[: next(i for i, r in enumerate(rows) if not all(seat[0] for seat in r))]
        other = np.asarray([_other_pass(a, rule) for a in line.answers[: len(rows)]], dtype=bool)
        votes = np.zeros((1, len(rows)))
        fresh_votes = np.zeros((resamples, len(rows)))
        shares: list[np.ndarray] = []
        restated: list[np.ndarray] = []
        for j, model in enumerate(models):
            judged = [r[j][0] for r in rows]
            cut = np.asarray([r[j][1] for r in rows])
            counts = np.asarray([len(s) for s in judged])
            share = np.asarray(
                [np.mean(np.asarray(s) > c) for s, c in zip(judged, cut, strict=True)]
            )
            votes += np.asarray([s[0] for s in judged]) > cut
            if model.exact or not rows:
                chance = np.broadcast_to(share, (resamples, len(rows)))
            else:
                chance = model.chances(judged, cut, rates[j])
            fresh_votes += judge_rng.random(chance.shape) < chance
            shares.append(share[None, :])
            restated.append(judge_rng.binomial(counts, chance) / counts)
        first = _walk((2 * votes > len(models)) & other)[0]
        walked = _walk((2 * fresh_votes > len(models)) & other[None, :])
        mean = _expected_walk(_majority(shares) * other)[0]
        estimates = _expected_walk(_majority(restated) * other)
        open_chains += int(first < len(rows) and bool((walked == len(rows)).any()))
        at = column[line.question]
        drawn[:, at] += (mean + walked - estimates) / repeats
        deciding[at] += first / repeats
        centre[at] += mean / repeats
        top[at] += _walk(other[None, :])[0] / repeats
    # a re-judged score lies between 0 and every chain walked to its recorded end
    rejudged = np.clip(drawn.sum(axis=1), 0, top.sum())
    # drawn as summary.bootstrap_sum draws them: the question-only interval is its interval
    pick = np.random.default_rng(seed).integers(0, len(questions), size=(resamples, len(questions)))
    with_judge = np.clip(
        np.take_along_axis(drawn, pick, axis=1).sum(axis=1), 0, top[pick].sum(axis=1)
    )
    without = deciding[pick].sum(axis=1)
    samples = max(len(s) for s, _ in multi)
    return JudgeNoise(
        samples=samples,
        answers=len(multi),
        mean_spread=float(np.mean(spreads)),
        mean_sd=float(np.mean([np.std(s, ddof=1) for s, _ in multi])),
        varied=sum(1 for spread in spreads if spread > 0),
        flips=sum(1 for s, t in multi if min(s) <= t < max(s)),
        threshold=threshold,
        score=float(deciding.sum()),
        rejudged_mean=float(centre.sum()),
        rejudged_interval=percentile_interval(rejudged),
        rejudged_sd=float(np.std(rejudged)),
        crossings=crossings,
        needed_samples=needed_samples(crossings, samples),
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
    support = ""
    if noise.needed_samples is not None and noise.crossings:
        support = (
            f"; {noise.samples} judgments per answer cannot support that interval: only "
            f"{noise.crossings} answers were judged on both sides of the threshold, {SUPPORT} "
            f"are needed, about {noise.needed_samples} judgments per answer would give them"
        )
    elif noise.needed_samples is not None:
        support = (
            f"; {noise.samples} judgments per answer cannot support that interval: no answer "
            "was judged on both sides of the threshold, so its spread is only what crossings "
            f"too rare for {noise.samples} judgments to show could do; at least "
            f"{noise.needed_samples} judgments per answer would be needed to see {SUPPORT}"
        )
    return (
        f"judge noise ({noise.samples} judgments per answer, {noise.answers} answers): mean "
        f"spread {noise.mean_spread:.1f} points (sd {noise.mean_sd:.1f}), {noise.varied} "
        f"answers judged differently, {noise.flips} ({share:.1%}) with judgments on both "
        f"sides of {at}; the score {noise.score:g} judged again: mean {noise.rejudged_mean:.1f}, "
        f"95% interval [{rlow:.1f}, {rhigh:.1f}] (sd {noise.rejudged_sd:.1f}) of "
        f"{REJUDGED_COVERS}{support}; 95% interval [{low:.1f}, {high:.1f}] resampling "
        f"questions, [{jlow:.1f}, {jhigh:.1f}] resampling questions and judging again"
        + (
            f" ({noise.open_chains} chains can pass their recorded end when judged again: "
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
