"""Per-model summaries of results, a paired comparison of two models, and the table.

Everything here reads ``QuestionResult`` values only, so run directories and results files in
the original schema are summarised alike; the counting itself is ``record.results.totals``.
A question's score is its valid answers (the failing answer is recorded, not counted); the
published leaderboard counted that answer too, as ``COUNTING`` says wherever a score is shown.

A row's score and novelty sum are per repeat (summed over questions, averaged over repeats), so
rows with different numbers of repeats compare directly. Their interval (``INTERVAL_METHOD``,
fixed seed) resamples *questions*, each with all its repeats: repeats share their questions, so
resampling each repeat independently would treat one question set as R fresh ones and make the
interval about sqrt(R) times too narrow. The paired comparison resamples questions alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from aidanbench.analysis.environment_metrics import answer_means
from aidanbench.analysis.judge_noise import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    JudgeNoise,
    JudgePanel,
    judge_noise,
    judge_panel,
    percentile_interval,
    unreadable_of,
)
from aidanbench.core.settings import REFERENCE_JUDGE
from aidanbench.core.thresholds import COHERENCE_THRESHOLD, Thresholds
from aidanbench.record.results import UNFINISHED as UNFINISHED
from aidanbench.record.results import QuestionResult, measured_scores, totals
from aidanbench.services.pricing import same_model

COUNTING = (
    "score = valid answers (every score strictly above its threshold), summed over "
    "questions; the published leaderboard counted the terminal answer too (about one point "
    "more per question)"
)
"""How scores are counted, printed with every table and JSON report."""

INTERVAL_LEVEL = 0.95
"""Coverage of every interval: the 2.5th to the 97.5th percentile of the replicates."""

INTERVAL_METHOD = {
    "method": "percentile bootstrap resampling questions, each with all its repeats",
    "level": INTERVAL_LEVEL,
    "resamples": BOOTSTRAP_RESAMPLES,
    "seed": BOOTSTRAP_SEED,
}
"""How intervals are computed, printed with every report that shows one."""

REWARD_MODES = ("count", "novelty_sum")
"""Headline of a row: its score (valid answers) or its novelty sum."""

HEADLINE = {
    "count": "score (reward mode count)",
    "novelty_sum": "novelty sum of valid answers (reward mode novelty_sum)",
}
"""What each reward mode makes the headline, as reports say it."""

REPEATS_NOTE = (
    "With repeats, figures are per repeat: summed over questions, then averaged over "
    f"repeats; 95% CI: percentile bootstrap resampling questions with their repeats "
    f"({BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED})"
)
"""How repeats are combined and their interval computed, printed under the table."""

Interval = tuple[float, float]
"""Lower and upper bound of a 95 % interval."""

GroupKey = tuple[str, float]
"""(model, temperature): one row of the summary."""


UNCATEGORISED = "(no category)"
"""The category of a question the question set gave none, where others have one."""


@dataclass(frozen=True)
class CategoryRow:
    """One category's figures in a row: counted as the row counts (per repeat), with its
    lower-bound mark and, with repeats, its interval."""

    category: str
    questions: int
    """Distinct questions of the category the row answered."""
    score: float
    """Valid answers summed over the category's questions, mean over repeats."""
    lower_bound: bool
    """A line of the category did not finish: ``score`` is a lower bound."""
    score_interval: Interval | None = None
    """Bootstrap 95 % interval of ``score`` with several repeats (resampling its questions)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, as the row's own."""
        return {
            "category": self.category,
            "questions": self.questions,
            "score": _whole(self.score),
            "lower_bound": self.lower_bound,
            "score_interval": list(self.score_interval) if self.score_interval else None,
        }


@dataclass(frozen=True)
class SummaryRow:
    """Figures of one model at one temperature; ``score`` and ``novelty_sum`` are per repeat."""

    model: str
    temperature: float
    score: float
    """Valid answers summed over questions, mean over repeats (an int with one repeat)."""
    novelty_sum: float
    """Embedding novelty summed over valid answers and questions, mean over repeats."""
    question_count: int
    """Distinct questions."""
    lines: int
    """Question lines: questions x repeats, as far as they were run."""
    finished: int
    """Lines ended by the benchmark's rule or the answer cap."""
    errored: int
    """Lines ended by an API, configuration or judge error."""
    means: dict[str, float | None]
    """Each score the row measured (``measured_scores``) → its mean over valid answers
    (answer-weighted; None with no valid answer); ``mean_<score>`` in its JSON."""
    format_adherence: float | None
    """Share of answers whose reply used the ``<answer>`` tag; None when not recorded."""
    stop_reasons: dict[str, int]
    """Lines per stop reason; ``unfinished`` for lines without one."""
    tokens: int | None
    """Tokens of every call, discarded look-aheads included; None if any is unknown."""
    repeats: int
    """Distinct repeats."""
    mean_repeat_score: float | None = None
    """``score`` again, set only with more than one repeat (readers of earlier reports)."""
    score_interval: Interval | None = None
    """Bootstrap 95 % interval of ``score`` with several repeats (module docstring)."""
    repeat_scores: tuple[int, ...] = ()
    """Score of each repeat (valid answers summed over its questions), in repeat order."""
    repeat_novelty_sums: tuple[float, ...] = ()
    """Novelty sum of each repeat, in repeat order."""
    novelty_sum_interval: Interval | None = None
    """Bootstrap 95 % interval of ``novelty_sum`` with several repeats."""
    reward_mode: str = "count"
    """Which figure is the headline: ``count`` (``score``) or ``novelty_sum``."""
    thresholds: Thresholds | None = None
    """Thresholds shared by every line; None when unknown or mixed."""
    embedding_model: str | None = None
    """Embedding model shared by every line; None when unknown or mixed."""
    judge_model: str | None = None
    """Judge model shared by every line; None when unknown or mixed."""
    answers: int = 0
    """Recorded answers, failing ones included."""
    api_calls: int | None = None
    """Requests of every answer and discarded look-ahead; None when not recorded."""
    cost_usd: float | None = None
    """Dollars of those requests (``record.results.totals``); None if any part is unknown."""
    cost_parts: dict[str, float | None] = field(default_factory=dict)
    """``cost_usd`` by part: the model's own generations and the judge's work on its answers
    (``core.calls.COST_PARTS``), each unknown on its own; empty when no calls are recorded."""
    usage_missing: int = 0
    """Requests whose reply reported no usage (their tokens and dollars are unknown)."""
    truncated_answers: int | None = 0
    """Answers cut by the token limit, scored as they came (``TRUNCATION``); None if unknown."""
    finish_unknown: int = 0
    """Answers whose finish reason was not recorded, so whether they were cut is unknown."""
    judge_served: dict[str, int] = field(default_factory=dict)
    """Answers by the model the provider said served their judgments (``judge_served``)."""
    threshold_source: str | None = None
    """Where the coherence threshold came from, shared by every line; None if unknown or mixed."""
    judge_noise: JudgeNoise | None = None
    """The judge's noise, when answers were judged several times (``judge_samples``)."""
    judge_panel: JudgePanel | None = None
    """A judge panel's decisions, when one judged the answers."""
    judge_unreadable: dict[str, int] = field(default_factory=dict)
    """The judge's replies that held no readable score (each asked again), by why."""
    answer_cap: int | str = "unknown"
    """``max_answers`` shared by the row's lines (``QuestionResult.answer_cap``): a number,
    ``none`` (as the benchmark) or ``unknown`` (not recorded, or mixed)."""
    categories: tuple[CategoryRow, ...] = ()
    """The row's figures per question category, in the question set's order; none when no
    question has a category."""

    @property
    def reward(self) -> float:
        """The headline: ``score`` or ``novelty_sum``, as the reward mode says."""
        return self.score if self.reward_mode == "count" else self.novelty_sum

    @property
    def lower_bound(self) -> bool:
        """A line did not finish (``QuestionResult.lower_bound``), so the figures are too."""
        return self.finished < self.lines

    @property
    def reward_interval(self) -> Interval | None:
        """The headline's bootstrap interval (several repeats only)."""
        return self.score_interval if self.reward_mode == "count" else self.novelty_sum_interval

    def mean_fields(self) -> dict[str, float | None]:
        """``means`` as every output names them: ``mean_<score>``."""
        return {f"mean_{name}": mean for name, mean in self.means.items()}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values; a whole-number score is written as an integer, and each
        mean as ``mean_<score>`` where ``means`` stands."""
        data: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if key == "means":
                data |= self.mean_fields()
            else:
                data[key] = value
        data["score"] = _whole(self.score)
        data["repeat_scores"] = list(self.repeat_scores)
        data["repeat_novelty_sums"] = list(self.repeat_novelty_sums)
        data["reward"] = _whole(self.reward) if self.reward_mode == "count" else self.reward
        for name in ("score_interval", "novelty_sum_interval", "reward_interval"):
            value = getattr(self, name)
            data[name] = list(value) if value else None
        data["thresholds"] = None if self.thresholds is None else self.thresholds.record()
        data["judge_noise"] = None if self.judge_noise is None else self.judge_noise.to_dict()
        data["judge_panel"] = None if self.judge_panel is None else self.judge_panel.to_dict()
        data["lower_bound"] = self.lower_bound
        if self.categories:
            data["categories"] = [category.to_dict() for category in self.categories]
        else:  # results without categories read as they did before there were any
            del data["categories"]
        return data


def _whole(value: float) -> float:
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True)
class PairedComparison:
    """Headline difference of two models on the question lines both finished."""

    model_a: str
    model_b: str
    pairs: int
    """Matched (question, temperature, repeat) lines finished by both models."""
    questions: int
    """Distinct questions among the pairs: the bootstrap's resampling units."""
    score_a: float
    """Model A's headline (score, or novelty sum) summed over the pairs."""
    score_b: float
    difference: float
    """``score_a - score_b`` over the pairs."""
    interval: Interval | None
    """Bootstrap 95 % interval of ``difference``; None without pairs."""
    unfinished_pairs: int = 0
    """Matched lines left out because either side errored or did not finish."""
    only_a: int = 0
    """Lines of model A with no counterpart for model B."""
    only_b: int = 0
    """Lines of model B with no counterpart for model A."""
    reward_mode: str = "count"
    """What is compared: valid answers (``count``) or their novelty sum."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        data = asdict(self)
        data["interval"] = list(self.interval) if self.interval else None
        return data


def line_reward(line: QuestionResult, reward_mode: str = "count") -> float:
    """A line's headline figure: its score, or its novelty sum."""
    return line.score if reward_mode == "count" else line.novelty_sum


def group_results(results: Iterable[QuestionResult]) -> dict[GroupKey, list[QuestionResult]]:
    """Question lines by (model, temperature), in order of first appearance."""
    groups: dict[GroupKey, list[QuestionResult]] = {}
    for result in results:
        groups.setdefault((result.model, result.temperature), []).append(result)
    return groups


def question_order(results: Iterable[QuestionResult]) -> list[str]:
    """Distinct questions in order of first appearance; reports call the first ``Q1``."""
    return list(dict.fromkeys(r.question for r in results))


def group_label(model: str, temperature: float, temperatures: int) -> str:
    """A model's name, with its temperature when several temperatures are shown."""
    return model if temperatures == 1 else f"{model} @ {temperature:g}"


def shared(values: Iterable[Any]) -> Any:
    """The one value all of ``values`` hold; None when they differ or there are none."""
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def bootstrap_sum(values: Sequence[float], seed: int = BOOTSTRAP_SEED) -> Interval | None:
    """Percentile 95 % interval of ``sum(values)``, each value a resampling unit (a question)."""
    if not values:
        return None
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))
    return percentile_interval(data[draws].sum(axis=1))


def per_question_repeat_means(
    lines: Sequence[QuestionResult],
    repeats: int,
    value: Callable[[QuestionResult], float] = lambda line: line.score,
) -> list[float]:
    """Each question's ``value`` summed over repeats / repeats (a missing line counts 0): their
    sum is the mean per-repeat figure, so bootstrapping them keeps a question's repeats together."""
    sums: dict[str, float] = {}
    for line in lines:
        sums[line.question] = sums.get(line.question, 0) + value(line)
    return [total / repeats for total in sums.values()]


def per_repeat(
    lines: Sequence[QuestionResult], value: Callable[[QuestionResult], float]
) -> dict[int, float]:
    """``value`` summed over each repeat's lines, by repeat, in repeat order."""
    sums: dict[int, float] = {}
    for line in sorted(lines, key=lambda line: line.repeat):
        sums[line.repeat] = sums.get(line.repeat, 0) + value(line)
    return sums


def summarise_group(lines: Sequence[QuestionResult], reward_mode: str = "count") -> SummaryRow:
    """The summary row of one (model, temperature)'s question lines."""
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"reward_mode must be count or novelty_sum, got {reward_mode!r}")
    counted = totals(lines)
    measured = measured_scores(lines)
    found = answer_means((a for line in lines for a in line.answers), measured, np.mean)
    repeats = counted.repeats
    multi = repeats > 1
    score = counted.repeat_mean_score

    def novelty(line: QuestionResult) -> float:
        return line.novelty_sum

    def interval(value: Callable[[QuestionResult], float]) -> Interval | None:
        return bootstrap_sum(per_question_repeat_means(lines, repeats, value)) if multi else None

    return SummaryRow(
        model=lines[0].model,
        temperature=lines[0].temperature,
        score=score,
        novelty_sum=counted.novelty_sum / repeats,
        question_count=counted.questions,
        lines=counted.lines,
        finished=counted.finished,
        errored=counted.errored,
        means={score.name: found[score.mean] for score in measured},
        format_adherence=found["format_adherence"],
        stop_reasons=counted.stop_reasons,
        tokens=counted.tokens,
        repeats=repeats,
        mean_repeat_score=score if multi else None,
        score_interval=interval(lambda line: line.score),
        repeat_scores=tuple(int(v) for v in per_repeat(lines, lambda line: line.score).values()),
        repeat_novelty_sums=tuple(per_repeat(lines, novelty).values()),
        novelty_sum_interval=interval(novelty),
        reward_mode=reward_mode,
        thresholds=shared(line.thresholds for line in lines),
        embedding_model=shared(line.embedding_model for line in lines),
        judge_model=shared(line.judge_model for line in lines),
        answers=counted.answers,
        api_calls=counted.api_calls,
        truncated_answers=counted.truncated_answers,
        finish_unknown=counted.finish_unknown,
        cost_usd=counted.dollars,
        cost_parts=counted.dollar_parts,
        usage_missing=counted.usage_missing,
        judge_served=judge_served(lines),
        threshold_source=shared(line.threshold_source for line in lines),
        judge_noise=judge_noise(lines),
        judge_panel=judge_panel(lines),
        judge_unreadable=unreadable_of(lines),
        categories=category_rows(lines, repeats),
        answer_cap=shared(line.answer_cap for line in lines) or "unknown",
    )


def category_rows(lines: Sequence[QuestionResult], repeats: int) -> tuple[CategoryRow, ...]:
    """A row's lines counted per category (``CategoryRow``); none when no line has one."""
    by_category: dict[str | None, list[QuestionResult]] = {}
    for line in lines:
        by_category.setdefault(line.category, []).append(line)
    if set(by_category) == {None}:
        return ()
    rows = []
    for category, chosen in by_category.items():
        counted = totals(chosen)
        per_question = per_question_repeat_means(chosen, repeats)
        rows.append(
            CategoryRow(
                category=UNCATEGORISED if category is None else category,
                questions=counted.questions,
                score=sum(per_question),
                lower_bound=counted.finished < counted.lines,
                score_interval=bootstrap_sum(per_question) if repeats > 1 else None,
            )
        )
    return tuple(rows)


JUDGE_ROLES = ("judge", "similarity")
"""The ``calls`` roles of an answer whose requests went to the judge."""


def judge_served(lines: Iterable[QuestionResult]) -> dict[str, int]:
    """Answers by the model the provider said served their judgments: the row's judge's (a
    panel's first judge's, ``calls.judge``; the others' are ``JudgePanel.served``). A panel
    answer recorded before each judge was its own record (its first judge without
    ``served_model``) holds the last judge's there: not counted, never a wrong name."""
    counts: dict[str, int] = {}
    for line in lines:
        for answer in line.answers:
            calls = answer.calls or {}
            panel = answer.judges or []
            mixed = bool(panel) and "served_model" not in panel[0]
            names = {
                str(stats["served_model"])
                for role in JUDGE_ROLES
                if not (mixed and role == "judge")
                and isinstance(stats := calls.get(role), dict)
                and stats.get("served_model")
            }
            for name in names:
                counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def summarise(results: Sequence[QuestionResult], reward_mode: str = "count") -> list[SummaryRow]:
    """One row per (model, temperature), in order of first appearance."""
    return [summarise_group(lines, reward_mode) for lines in group_results(results).values()]


PairKey = tuple[str, float, int]
"""(question, temperature, repeat): the lines of two models that a comparison pairs."""


def _lines_of(results: Sequence[QuestionResult], model: str) -> dict[PairKey, QuestionResult]:
    return {(r.question, r.temperature, r.repeat): r for r in results if r.model == model}


def _finished_pairs(
    lines_a: dict[PairKey, QuestionResult], lines_b: dict[PairKey, QuestionResult]
) -> dict[PairKey, tuple[QuestionResult, QuestionResult]]:
    """Matched lines both models finished, in A's order."""
    return {
        key: (a, b)
        for key, a in lines_a.items()
        if (b := lines_b.get(key)) is not None and a.finished and b.finished
    }


def paired_comparison(
    results: Sequence[QuestionResult], model_a: str, model_b: str, reward_mode: str = "count"
) -> PairedComparison:
    """Total score of A minus B over lines (question, temperature, repeat) both finished (an
    unfinished score is only a lower bound). Raises ``ValueError`` for an absent or same model."""
    if model_a == model_b:
        raise ValueError("compare two different models")
    models = {r.model for r in results}
    for name in (model_a, model_b):
        if name not in models:
            raise ValueError(f"model {name!r} not in results (have: {', '.join(sorted(models))})")
    lines_a, lines_b = _lines_of(results, model_a), _lines_of(results, model_b)
    matched = [key for key in lines_a if key in lines_b]
    pairs = _finished_pairs(lines_a, lines_b)
    differences = question_differences(results, model_a, model_b, reward_mode)
    score_a = sum(line_reward(a, reward_mode) for a, _ in pairs.values())
    score_b = sum(line_reward(b, reward_mode) for _, b in pairs.values())
    return PairedComparison(
        model_a=model_a,
        model_b=model_b,
        pairs=len(pairs),
        questions=len(differences),
        score_a=score_a,
        score_b=score_b,
        difference=score_a - score_b,
        interval=bootstrap_sum(list(differences.values())),
        unfinished_pairs=len(matched) - len(pairs),
        only_a=len(lines_a) - len(matched),
        only_b=len(lines_b) - len(matched),
        reward_mode=reward_mode,
    )


def question_differences(
    results: Sequence[QuestionResult], model_a: str, model_b: str, reward_mode: str = "count"
) -> dict[str, float]:
    """Score of A minus B per question over the lines both finished (``paired_comparison``'s
    resampling units); questions without such a line are absent."""
    pairs = _finished_pairs(_lines_of(results, model_a), _lines_of(results, model_b))
    differences: dict[str, float] = {}
    for (question, _, _), (a, b) in pairs.items():
        change = line_reward(a, reward_mode) - line_reward(b, reward_mode)
        differences[question] = differences.get(question, 0) + change
    return differences


def _label(key: GroupKey) -> str:
    return f"{key[0]} @ {key[1]:g}"


def _mixed(
    groups: dict[GroupKey, list[QuestionResult]], attribute: str, describe: Callable[[Any], str]
) -> str | None:
    """Which groups used which value of ``attribute``, or None when all used one."""
    by_value: dict[Any, list[str]] = {}
    for key, lines in groups.items():
        for value in dict.fromkeys(getattr(line, attribute) for line in lines):
            by_value.setdefault(value, []).append(_label(key))
    if len(by_value) < 2:
        return None
    return "; ".join(
        f"{describe(value)}: {', '.join(labels)}" for value, labels in by_value.items()
    )


def describe_thresholds(thresholds: Thresholds | None) -> str:
    """``coherence > 15, novelty > 0.15`` (each declared score that is on)."""
    if thresholds is None:
        return "thresholds not recorded"
    return ", ".join(
        f"{name.replace('_', ' ')} > {limit:g}" for name, limit in thresholds.on.items()
    )


def warnings(results: Sequence[QuestionResult]) -> list[str]:
    """Reasons, one line each, the totals of these results should not be compared side by side:
    embedding models, judges, prompts, thresholds or question sets that differ."""
    groups = group_results(results)
    found: list[str] = []
    embeddings = _mixed(groups, "embedding_model", lambda m: m or "embedding model not recorded")
    if embeddings:
        found.append(
            "results used different embedding models, so novelty and scores are not "
            f"comparable across them ({embeddings})"
        )
    judges = _mixed(groups, "judge_model", lambda m: m or "judge model not recorded")
    if judges:
        found.append(
            "results used different judge models, so coherence and scores are not "
            f"comparable across them ({judges})"
        )
    prompts = _mixed(
        groups, "prompts_sha256", lambda h: f"prompts {h[:12]}" if h else "prompts not recorded"
    )
    if prompts:
        found.append(
            "results used different prompt texts (prompts sha256), so scores are not "
            f"comparable across them ({prompts})"
        )
    thresholds = _mixed(groups, "thresholds", describe_thresholds)
    if thresholds:
        found.append(
            "results used different thresholds, so scores are not comparable across them "
            f"({thresholds})"
        )
    found += judge_warnings(groups)
    question_sets = {key: {line.question for line in lines} for key, lines in groups.items()}
    every = set().union(*question_sets.values()) if question_sets else set()
    partial = [
        f"{_label(k)}: {len(qs)} of {len(every)}" for k, qs in question_sets.items() if qs != every
    ]
    if partial:
        found.append(
            "models answered different question sets, so totals are not directly "
            f"comparable ({'; '.join(partial)}); --compare A B gives a paired difference"
        )
    return found


def judge_warnings(groups: dict[GroupKey, list[QuestionResult]]) -> list[str]:
    """Judges not to be taken at their name: a substitute served the judgments; a successor
    judged at o1-mini's 15 uncalibrated; rows' coherence thresholds came from different places."""
    found: list[str] = []
    for key, lines in groups.items():
        asked = shared(line.judge_model for line in lines)
        if asked is None:
            continue
        panel = judge_panel(lines)
        seats = [(asked, judge_served(lines))]
        if panel is not None:
            seats += list(zip(panel.judges[1:], panel.served[1:], strict=True))
        for judge, served in seats:
            others = {n: c for n, c in served.items() if not same_model(judge, n)}
            if not others:
                continue
            named = ", ".join(f"{name} ({count} answers)" for name, count in others.items())
            found.append(
                f"{_label(key)}: the judge asked for was {judge}, but the provider says "
                f"{named} served its judgments: those coherence scores are that model's, "
                "not the one named (priced as the model that served)"
            )
        source = shared(line.threshold_source for line in lines)
        if source == "benchmark" and not same_model(REFERENCE_JUDGE, asked):
            cut, judge = f"{COHERENCE_THRESHOLD:g}", REFERENCE_JUDGE
            found.append(
                f"{_label(key)}: judged by {asked} at coherence > {cut}, {judge}'s threshold, "
                f"uncalibrated; {cut} need not mean on its scale what it meant on {judge}'s "
                f"(aidanbench calibrate --judge-model {asked})"
            )
    recorded = {k: v for k, v in groups.items() if any(line.threshold_source for line in v)}
    sources = _mixed(recorded, "threshold_source", lambda s: s or "not recorded")
    if sources:
        found.append(
            "results took their coherence thresholds from different places, so their "
            f"decisions are not calibrated alike ({sources})"
        )
    return found
