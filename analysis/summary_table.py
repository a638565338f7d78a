"""The summary as a table: a row per (model, temperature), the headline first and bold,
columns no row has a value for left out, and a caption with the counting convention, the
thresholds and how repeats are combined (``analysis.summary`` computes every figure)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from aidanbench.analysis.summary import (
    COUNTING,
    HEADLINE,
    REPEATS_NOTE,
    Interval,
    SummaryRow,
    describe_thresholds,
    shared,
)
from aidanbench.analysis.tables import Column, fitted_tables, score_text, tokens_text
from aidanbench.core.errors import printable
from aidanbench.core.scores import declared


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _stops(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda i: -i[1]))


def caption(rows: Sequence[SummaryRow]) -> str:
    """The counting convention, the headline's reward mode, how repeats are combined, and
    the thresholds' values when all rows share them."""
    text = COUNTING
    common = shared(row.thresholds for row in rows)
    if common is not None:
        text += f". Here {describe_thresholds(common)}"
    modes = sorted({row.reward_mode for row in rows})
    if modes and modes != ["count"]:
        text += f". Headline (bold): {' / '.join(HEADLINE[m] for m in modes)}"
    if any(row.repeats > 1 for row in rows):
        text += f". {REPEATS_NOTE}"
    return text if text == COUNTING else text + "."


def _figure(value: float, mode: str) -> str:
    if mode == "novelty_sum":
        return f"{value:.2f}"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _interval(interval: Interval | None, mode: str) -> str:
    if interval is None:
        return "–"
    spec = ".2f" if mode == "novelty_sum" else ".1f"
    return f"[{interval[0]:{spec}}, {interval[1]:{spec}}]"


def _per_repeat(row: SummaryRow) -> str:
    values = row.repeat_scores if row.reward_mode == "count" else row.repeat_novelty_sums
    return "/".join(_figure(value, row.reward_mode) for value in values)


def summary_columns(rows: Sequence[SummaryRow]) -> tuple[Column, list[Column]]:
    """The model column and the others; columns no row has a value for are left out. The
    headline is bold and first; with repeats, each repeat's figure and the interval follow."""
    repeated = any(row.repeats > 1 for row in rows)
    by_novelty = bool(rows) and all(row.reward_mode == "novelty_sum" for row in rows)
    score = Column(
        "score",
        [
            score_text(
                f"{row.score:.1f}" if row.repeats > 1 else _figure(row.score, "count"),
                row.lower_bound,
            )
            for row in rows
        ],
        style=None if by_novelty else "bold",
    )
    novelty_sum = Column(
        "novelty\nsum",
        [_figure(row.novelty_sum, "novelty_sum") for row in rows],
        style="bold" if by_novelty else None,
    )
    columns = [Column("temp", [f"{row.temperature:g}" for row in rows])]
    columns += [novelty_sum, score] if by_novelty else [score]
    if repeated:
        columns.append(Column("re-\npeats", [str(row.repeats) for row in rows]))
        columns.append(Column("per\nrepeat", [_per_repeat(row) for row in rows]))
        columns.append(
            Column("95% CI", [_interval(row.reward_interval, row.reward_mode) for row in rows])
        )
    columns += [
        Column("ques-\ntions", [str(row.question_count) for row in rows]),
        Column("fin-\nished", [str(row.finished) for row in rows]),
        Column("err-\nored", [str(row.errored) for row in rows]),
    ]
    if not by_novelty:
        columns.append(novelty_sum)
    for measure in declared():  # a switchable score's mean only where a row has one
        means = [row.means.get(measure.name) for row in rows]
        if measure.switch is None or any(mean is not None for mean in means):
            header = f"mean\n{measure.short}"
            columns.append(Column(header, [_number(mean, measure.digits) for mean in means]))
    if any(row.format_adherence is not None for row in rows):
        columns.append(Column("format", [_number(row.format_adherence, ".0%") for row in rows]))
    if any(row.api_calls is not None for row in rows):
        columns.append(
            Column(
                "chat\ntokens",
                ["–" if row.api_calls is None else tokens_text(row.tokens) for row in rows],
            )
        )
    if any(row.truncated_answers for row in rows):
        columns.append(
            Column("cut by\nlimit", [_number(row.truncated_answers, "d") for row in rows])
        )
    columns.append(
        Column("stop reasons", [_stops(row.stop_reasons) for row in rows], "left", wraps=True)
    )
    key = Column("model", [printable(row.model) for row in rows], "left")
    return key, columns


def summary_tables(
    rows: Sequence[SummaryRow], title: str = "AidanBench summary", width: int | None = None
) -> list[Table]:
    """The summary as one table, or stacked ones when ``width`` is too narrow (``tables``)."""
    key, columns = summary_columns(rows)
    return fitted_tables(key, columns, width, title=title, caption=caption(rows))


def render_summary(
    rows: Sequence[SummaryRow],
    console: Console | None = None,
    title: str = "AidanBench summary",
) -> None:
    """Print the summary table; the default console does not highlight, which would colour
    numbers at random."""
    console = console or Console(highlight=False, markup=False)
    for table in summary_tables(rows, title, console.width):
        console.print(table)
