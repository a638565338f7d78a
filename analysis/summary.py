"""Per-model summaries of results, a paired comparison of two models, and the table.

Everything here reads ``QuestionResult`` values only, so a run directory and a results
file in the original schema are summarised the same way.

Counting convention: a question's score is its number of valid answers (the terminal,
failing answer is recorded but not counted). The published leaderboard counted the
terminal answer too, which is about one point more per question; the caption of the table
and ``COUNTING`` say so wherever a score is shown.

Uncertainty: with several repeats, the interval of the mean per-repeat score is a
percentile bootstrap that resamples *questions*, keeping each drawn question's repeats
together: a replicate draws the question set once and uses it within every repeat. Repeats
share their questions, so resampling each repeat independently would treat one fixed
question set as R fresh ones and make the interval about sqrt(R) times too narrow. The
paired comparison resamples questions the same way. The generator has a fixed seed, so the
same results always print the same interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from aidanbench.analysis.cost import has_censored, score_text
from aidanbench.analysis.results import QuestionResult
from aidanbench.analysis.tables import Column, fitted_tables
from aidanbench.graph.thresholds import Thresholds

COUNTING = (
    "score = valid answers (coherence > T_c and novelty > T_n, strictly), summed over "
    "questions; the published leaderboard counted the terminal answer too (about one point "
    "more per question)"
)
"""How scores are counted, printed with every table and JSON report."""

BOOTSTRAP_RESAMPLES = 10_000
"""Replicates per interval; enough for stable 2.5 % and 97.5 % percentiles."""

BOOTSTRAP_SEED = 20241
"""Seed of the bootstrap generator, fixed so reports are reproducible."""

ERROR_STOPS = frozenset({"error", "judge_error"})
"""Stop reasons of questions that ended on a failure rather than by the rule."""

UNFINISHED = "unfinished"
"""Stop-reason label of a question with no stop reason (interrupted or still running)."""

Interval = tuple[float, float]
"""Lower and upper bound of a 95 % interval."""

GroupKey = tuple[str, float]
"""(model, temperature): one row of the summary."""


@dataclass(frozen=True)
class SummaryRow:
    """Figures of one model at one temperature, over all its questions and repeats."""

    model: str
    temperature: float
    score: int
    """Valid answers summed over every question line (all repeats)."""
    novelty_sum: float
    """Embedding novelty summed over valid answers (the alternative reward)."""
    question_count: int
    """Distinct questions."""
    lines: int
    """Question lines: questions x repeats, as far as they were run."""
    finished: int
    """Lines ended by the benchmark's rule or the answer cap."""
    errored: int
    """Lines ended by an API, configuration or judge error."""
    mean_coherence: float | None
    """Mean coherence over valid answers (answer-weighted); None with no valid answer."""
    mean_novelty: float | None
    """Mean embedding novelty over valid answers."""
    mean_llm_novelty: float | None
    """Mean LLM novelty over valid answers; None when that judge was off."""
    format_adherence: float | None
    """Share of answers whose reply used the ``<answer>`` tag; None when not recorded."""
    stop_reasons: dict[str, int]
    """Lines per stop reason; ``unfinished`` for lines without one."""
    tokens: int
    """Tokens of every call, discarded look-aheads included; 0 when not recorded."""
    repeats: int
    """Distinct repeats."""
    mean_repeat_score: float | None = None
    """Score per repeat (score / repeats); set only with more than one repeat."""
    score_interval: Interval | None = None
    """Bootstrap 95 % interval of ``mean_repeat_score`` (see the module docstring)."""
    thresholds: Thresholds | None = None
    """Thresholds shared by every line; None when unknown or mixed."""
    embedding_model: str | None = None
    """Embedding model shared by every line; None when unknown or mixed."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        data = asdict(self)
        data["score_interval"] = list(self.score_interval) if self.score_interval else None
        return data


@dataclass(frozen=True)
class PairedComparison:
    """Score difference of two models on the question lines both finished."""

    model_a: str
    model_b: str
    pairs: int
    """Matched (question, temperature, repeat) lines finished by both models."""
    questions: int
    """Distinct questions among the pairs: the bootstrap's resampling units."""
    score_a: int
    score_b: int
    difference: int
    """``score_a - score_b`` over the pairs."""
    interval: Interval | None
    """Bootstrap 95 % interval of ``difference``; None without pairs."""
    unfinished_pairs: int = 0
    """Matched lines left out because either side errored or did not finish."""
    only_a: int = 0
    """Lines of model A with no counterpart for model B."""
    only_b: int = 0
    """Lines of model B with no counterpart for model A."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        data = asdict(self)
        data["interval"] = list(self.interval) if self.interval else None
        return data


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


def short_names(models: Sequence[str]) -> dict[str, str]:
    """Model names without their provider prefix (``openai/``), when that keeps them apart."""
    short = {m: m.rsplit("/", 1)[-1] for m in models}
    return short if len(set(short.values())) == len(short) else {m: m for m in models}


def errored(result: QuestionResult) -> bool:
    """Whether a line ended on a failure (its score is then a lower bound)."""
    return result.error is not None or result.stop_reason in ERROR_STOPS


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _shared(values: Iterable[Any]) -> Any:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def bootstrap_sum(values: Sequence[float], seed: int = BOOTSTRAP_SEED) -> Interval | None:
    """Percentile 95 % interval of ``sum(values)`` when the values are resampled.

    Each value is one resampling unit (a question); None for no units.
    """
    if not values:
        return None
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))
    low, high = np.percentile(data[draws].sum(axis=1), [2.5, 97.5])
    return float(low), float(high)


def per_question_repeat_means(lines: Sequence[QuestionResult], repeats: int) -> list[float]:
    """Each question's score summed over repeats / repeats (a missing line counts 0).

    Their sum is the mean per-repeat score, so bootstrapping them resamples questions with
    their repeats kept together.
    """
    totals: dict[str, int] = {}
    for line in lines:
        totals[line.question] = totals.get(line.question, 0) + line.score
    return [total / repeats for total in totals.values()]


def summarise_group(lines: Sequence[QuestionResult]) -> SummaryRow:
    """The summary row of one (model, temperature)'s question lines."""
    valid = [a for line in lines for a in line.answers if a.valid]
    tagged = [a.used_answer_tag for line in lines for a in line.answers]
    known_tags = [t for t in tagged if t is not None]
    llm = [a.llm_novelty for a in valid if a.llm_novelty is not None]
    repeats = len({line.repeat for line in lines})
    score = sum(line.score for line in lines)
    multi = repeats > 1
    return SummaryRow(
        model=lines[0].model,
        temperature=lines[0].temperature,
        score=score,
        novelty_sum=sum(line.novelty_sum for line in lines),
        question_count=len({line.question for line in lines}),
        lines=len(lines),
        finished=sum(1 for line in lines if line.finished),
        errored=sum(1 for line in lines if errored(line)),
        mean_coherence=_mean([a.coherence for a in valid if a.coherence is not None]),
        mean_novelty=_mean([a.novelty for a in valid if a.novelty is not None]),
        mean_llm_novelty=_mean(llm),
        format_adherence=_mean([float(t) for t in known_tags]),
        stop_reasons=dict(Counter(line.stop_reason or UNFINISHED for line in lines)),
        tokens=sum(line.tokens for line in lines),
        repeats=repeats,
        mean_repeat_score=score / repeats if multi else None,
        score_interval=(
            bootstrap_sum(per_question_repeat_means(lines, repeats)) if multi else None
        ),
        thresholds=_shared(line.thresholds for line in lines),
        embedding_model=_shared(line.embedding_model for line in lines),
    )


def summarise(results: Sequence[QuestionResult]) -> list[SummaryRow]:
    """One row per (model, temperature), in order of first appearance."""
    return [summarise_group(lines) for lines in group_results(results).values()]


def _line_key(result: QuestionResult) -> tuple[str, float, int]:
    return result.question, result.temperature, result.repeat


def paired_comparison(
    results: Sequence[QuestionResult], model_a: str, model_b: str
) -> PairedComparison:
    """Total score of A minus B over question lines both models finished.

    Lines are matched by question, temperature and repeat. A matched line that either
    model did not finish (error, interruption) is left out, because its score is only a
    lower bound. The interval resamples questions, each with all its matched lines.

    Raises ``ValueError`` when a model is absent or both names are the same.
    """
    if model_a == model_b:
        raise ValueError("compare two different models")
    models = {r.model for r in results}
    for name in (model_a, model_b):
        if name not in models:
            raise ValueError(f"model {name!r} not in results (have: {', '.join(sorted(models))})")
    lines_a = {_line_key(r): r for r in results if r.model == model_a}
    lines_b = {_line_key(r): r for r in results if r.model == model_b}
    matched = [key for key in lines_a if key in lines_b]
    pairs = [key for key in matched if lines_a[key].finished and lines_b[key].finished]
    differences = question_differences(results, model_a, model_b)
    score_a = sum(lines_a[key].score for key in pairs)
    score_b = sum(lines_b[key].score for key in pairs)
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
    )


def question_differences(
    results: Sequence[QuestionResult], model_a: str, model_b: str
) -> dict[str, int]:
    """Score of A minus B per question, over the lines both finished (``paired_comparison``'s
    resampling units), in order of first appearance; questions without such a line are absent.
    """
    lines_a = {_line_key(r): r for r in results if r.model == model_a}
    lines_b = {_line_key(r): r for r in results if r.model == model_b}
    differences: dict[str, int] = {}
    for key, a in lines_a.items():
        b = lines_b.get(key)
        if b is not None and a.finished and b.finished:
            differences[key[0]] = differences.get(key[0], 0) + a.score - b.score
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
    """``coherence > 15, novelty > 0.15`` (plus LLM novelty when on)."""
    if thresholds is None:
        return "thresholds not recorded"
    text = f"coherence > {thresholds.coherence:g}, novelty > {thresholds.novelty:g}"
    if thresholds.llm_novelty is not None:
        text += f", llm novelty > {thresholds.llm_novelty:g}"
    return text


def warnings(results: Sequence[QuestionResult]) -> list[str]:
    """Reasons the totals of these results should not be compared side by side.

    Different embedding models put novelty on different scales, different thresholds
    change what counts, and different question sets change how many chances there were.
    """
    groups = group_results(results)
    found: list[str] = []
    embeddings = _mixed(groups, "embedding_model", lambda m: m or "embedding model not recorded")
    if embeddings:
        found.append(
            "results used different embedding models, so novelty and scores are not "
            f"comparable across them ({embeddings})"
        )
    thresholds = _mixed(groups, "thresholds", describe_thresholds)
    if thresholds:
        found.append(
            "results used different thresholds, so scores are not comparable across them "
            f"({thresholds})"
        )
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


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _stops(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda i: -i[1]))


def caption(rows: Sequence[SummaryRow]) -> str:
    """The counting convention, with the thresholds' values when all rows share them."""
    shared = _shared(row.thresholds for row in rows) if rows else None
    if shared is None:
        return COUNTING
    values = f"T_c = {shared.coherence:g}, T_n = {shared.novelty:g}"
    if shared.llm_novelty is not None:
        values += f", llm novelty > {shared.llm_novelty:g} too"
    return f"{COUNTING}. Here {values}."


def summary_columns(rows: Sequence[SummaryRow]) -> tuple[Column, list[Column]]:
    """The model column and the others; columns no row has a value for are left out."""
    repeated = any(row.repeats > 1 for row in rows)
    with_llm = any(row.mean_llm_novelty is not None for row in rows)
    with_format = any(row.format_adherence is not None for row in rows)
    with_tokens = any(row.tokens for row in rows)

    def numbers(header: str, cells: list[str], style: str | None = None) -> Column:
        return Column(header, cells, style=style)

    columns = [
        numbers("temp", [f"{row.temperature:g}" for row in rows]),
        numbers(
            "score",
            [score_text(row.score, has_censored(row.stop_reasons)) for row in rows],
            style="bold",
        ),
    ]
    if repeated:
        per_repeat = []
        for row in rows:
            interval = (
                f" [{row.score_interval[0]:.1f}, {row.score_interval[1]:.1f}]"
                if row.score_interval
                else ""
            )
            mean = row.mean_repeat_score if row.repeats > 1 else float(row.score)
            per_repeat.append(_number(mean, ".1f") + interval)
        columns.append(numbers("re-\npeats", [str(row.repeats) for row in rows]))
        columns.append(numbers("per repeat\n[95% CI]", per_repeat))
    columns += [
        numbers("ques-\ntions", [str(row.question_count) for row in rows]),
        numbers("fin-\nished", [str(row.finished) for row in rows]),
        numbers("err-\nored", [str(row.errored) for row in rows]),
        numbers("novelty\nsum", [f"{row.novelty_sum:.2f}" for row in rows]),
        numbers("mean\ncoh.", [_number(row.mean_coherence, ".1f") for row in rows]),
        numbers("mean\nnov.", [_number(row.mean_novelty, ".3f") for row in rows]),
    ]
    if with_llm:
        columns.append(
            numbers("mean LLM\nnov.", [_number(row.mean_llm_novelty, ".3f") for row in rows])
        )
    if with_format:
        columns.append(numbers("format", [_number(row.format_adherence, ".0%") for row in rows]))
    if with_tokens:
        columns.append(
            numbers("tokens", [f"{row.tokens:,}" if row.tokens else "–" for row in rows])
        )
    columns.append(
        Column("stop reasons", [_stops(row.stop_reasons) for row in rows], "left", wraps=True)
    )
    key = Column("model", [row.model for row in rows], "left")
    return key, columns


def summary_tables(
    rows: Sequence[SummaryRow], title: str = "AidanBench summary", width: int | None = None
) -> list[Table]:
    """The summary as one table, or stacked tables (each naming the model) when ``width``
    is too narrow for all its columns: names and numbers are never folded or cut."""
    key, columns = summary_columns(rows)
    return fitted_tables(key, columns, width, title=title, caption=caption(rows))


def summary_table(rows: Sequence[SummaryRow], title: str = "AidanBench summary") -> Table:
    """The summary as one rich table, however wide."""
    return summary_tables(rows, title)[0]


def render_summary(
    rows: Sequence[SummaryRow],
    console: Console | None = None,
    title: str = "AidanBench summary",
) -> None:
    """Print the summary table with the counting convention as its caption.

    Without a console, prints to standard output (without highlighting, which would
    colour numbers at random).
    """
    console = console or Console(highlight=False)
    for table in summary_tables(rows, title, console.width):
        console.print(table)
