"""Tables that stay readable on a narrow terminal: split, never squeezed, and cells' spellings.

Rich fits a too-wide table by shrinking its columns, which folds model names into slivers and
cuts numbers to ``0.3…``. Here such a table is split into stacked tables, each repeating the key
column (the model) whole, so every name and number is printed in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.table import Table

FOLDED_WIDTH = 20
"""Most width a text column that may wrap at spaces (stop reasons) asks for when short."""
WRAPPED_MIN = 12
"""Least width such a column is given: narrower, its words would be cut."""


@dataclass(frozen=True)
class Column:
    """One column: a header (lines split by ``\\n``) and its cells, top to bottom."""

    header: str
    cells: Sequence[str]
    justify: JustifyMethod = "right"
    style: str | None = None
    wraps: bool = False
    """Free text that may wrap at spaces; anything else is never wrapped or cut."""

    @property
    def width(self) -> int:
        """The widest line of the header or of any cell."""
        lines = [line for text in (self.header, *self.cells) for line in text.split("\n")]
        return max((cell_len(line) for line in lines), default=0)


UNKNOWN = "unknown"
"""How an unknown dollar figure is printed."""


def dollars_text(value: float | None) -> str:
    """``$0.0123`` or ``unknown``."""
    if value is None:
        return UNKNOWN
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def tokens_text(value: int | None) -> str:
    """``12,345`` or ``unknown``."""
    return UNKNOWN if value is None else f"{value:,}"


def score_text(score: int | float | str, lower_bound: bool) -> str:
    """A score, as a lower bound (``≥ 12``) when one of its questions did not finish."""
    return f"≥ {score}" if lower_bound else f"{score}"


PADDING = 3
"""Cell padding (one space each side) and the separator after it, in rich's default box."""


def split_columns(key: Column, columns: Sequence[Column], width: int | None) -> list[list[Column]]:
    """The columns in order, in groups that fit ``width`` beside ``key`` (a too-wide one alone)."""
    if width is None:
        return [list(columns)]
    room = width - 1 - (key.width + PADDING)
    groups: list[list[Column]] = [[]]
    used = 0
    for column in columns:
        need = column.width + PADDING
        if column.wraps and used + need > room:
            left = room - used - PADDING
            need = max(min(column.width, WRAPPED_MIN), min(left, FOLDED_WIDTH)) + PADDING
        if groups[-1] and used + need > room:
            groups.append([])
            used = 0
        groups[-1].append(column)
        used += need
    if sum(c.width + PADDING for c in columns) <= room:
        return [list(columns)]
    return groups


def fitted_tables(
    key: Column,
    columns: Sequence[Column],
    width: int | None,
    *,
    title: str | None = None,
    caption: str | None = None,
) -> list[Table]:
    """One table, or several stacked ones when ``width`` is too narrow for all columns; the
    key column is wrapped only when it alone is wider than the width."""
    groups = split_columns(key, columns, width)
    key_fits = width is None or key.width + PADDING + 1 <= width
    tables = []
    for number, group in enumerate(groups):
        table = Table(
            title=title if number == 0 else None,
            caption=caption if number == len(groups) - 1 else None,
            caption_justify="left",
        )
        for column in (key, *group):
            wraps = column.wraps or (column is key and not key_fits)
            table.add_column(
                column.header,
                justify=column.justify,
                style=column.style,
                no_wrap=not wraps,
                overflow="fold" if wraps else "ellipsis",
                min_width=None if wraps else column.width,
            )
        for index in range(len(key.cells)):
            table.add_row(key.cells[index], *(column.cells[index] for column in group))
        tables.append(table)
    return tables
