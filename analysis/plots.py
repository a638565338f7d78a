"""Charts of results as PNG files: totals, per-question scores, a trajectory, stop reasons.

matplotlib's object API on an Agg canvas (no pyplot state, no display), so charts can be drawn
from threads, servers and CI. Figure sizes grow with models and questions so that 63 questions
stay legible; a chart's pixel size is ``figure size x DPI``. A model keeps its colour throughout.
"""

from __future__ import annotations

import importlib.util
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from aidanbench.analysis.cost import per_repeat, recorded, score_text
from aidanbench.analysis.summary import (
    UNFINISHED,
    GroupKey,
    SummaryRow,
    group_label,
    group_results,
    question_order,
    summarise,
)
from aidanbench.core.errors import UsageError, install_hint
from aidanbench.core.scores import Score, declared
from aidanbench.core.thresholds import Thresholds
from aidanbench.record import files
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 150
"""Resolution of every chart."""

QUESTION_LABEL = 52
"""Characters of a question shown as a heat-map row label."""

SCORES, QUESTIONS, TRAJECTORY, STOP_REASONS = (
    "scores.png",
    "questions.png",
    "trajectory.png",
    "stop_reasons.png",
)
"""File names ``plot_all`` writes."""

COST_CHART = "cost_vs_score.png"
"""File name of the cost-versus-score chart ``plot`` writes for run directories."""

PLOTS_INSTALL = install_hint("plots")
"""How README installs the ``[plots]`` extra (matplotlib), quoted when it is missing."""

STOP_COLOURS = {
    "novelty": "#4c78a8",
    "coherence": "#f58518",
    "llm_novelty": "#b279a2",
    "max_answers": "#54a24b",
    "truncated": "#eeca3b",
    "error": "#e45756",
    "judge_error": "#9d2b2b",
    "unscored": "#bab0ac",
    UNFINISHED: "#79706e",
}
"""Stop reason colours; benchmark endings in cool colours, failures in red."""

LINE_STYLES = ("-", "--", ":", "-.")
"""Line style of repeat 1, 2, 3, 4 (then again) in the trajectory."""

SMALL_SEGMENT = 0.04
"""Stop-reason segments narrower than this share of the axis get their count beside the bar."""


def scores_figsize(groups: int) -> tuple[float, float]:
    """Inches of ``scores.png`` for ``groups`` bars."""
    return 10.0, 1.6 + 0.5 * groups


def questions_figsize(groups: int, questions: int) -> tuple[float, float]:
    """Inches of ``questions.png``: a fixed label margin, then one cell per score."""
    return 5.2 + 1.0 * max(groups, 3), 2.2 + 0.3 * questions


def trajectory_figsize(panels: int) -> tuple[float, float]:
    """Inches of ``trajectory.png`` with ``panels`` stacked panels."""
    return 12.0, 1.6 + 2.7 * panels


def stop_reasons_figsize(groups: int) -> tuple[float, float]:
    """Inches of ``stop_reasons.png`` for ``groups`` bars."""
    return 10.0, 2.0 + 0.5 * groups


def require_matplotlib() -> None:
    """A ``UsageError`` naming the install command when matplotlib is missing, before any work."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"drawing charts needs the [plots] extra: {PLOTS_INSTALL}")


def new_figure(size: tuple[float, float], dpi: int = DPI) -> Figure:
    """An empty figure of ``size`` inches on an Agg canvas; every chart starts here."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: Path, dpi: float | None = DPI) -> Path:
    """Write ``figure`` to ``path`` whole or not at all, in the format its suffix names."""
    path = Path(path)
    kind = path.suffix.lstrip(".") or "png"
    files.atomic_write(path, lambda handle: figure.savefig(handle, dpi=dpi, format=kind))
    return path


def model_colours(keys: Sequence[GroupKey]) -> dict[GroupKey, str]:
    """One colour per (model, temperature), in order of first appearance."""
    from matplotlib import color_sequences
    from matplotlib.colors import to_hex

    palette = color_sequences["tab10" if len(keys) <= 10 else "tab20"]
    return {key: to_hex(palette[i % len(palette)]) for i, key in enumerate(keys)}


def _labels(keys: Sequence[GroupKey]) -> list[str]:
    """Full model names (``group_label``), as every view names them."""
    temperatures = len({t for _, t in keys})
    return [group_label(m, t, temperatures) for m, t in keys]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend_beside(ax: Axes, title: str, size: int) -> None:
    """The legend right of the plot, its top level with the plot's, without a frame."""
    ax.legend(
        title=title,
        fontsize=size,
        title_fontsize=size,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )


def plot_scores(rows: Sequence[SummaryRow], path: Path) -> Path:
    """Headline (``SummaryRow.reward``) per model as labelled bars, best on top; with repeats,
    the mean per repeat with its interval."""
    keys = [(r.model, r.temperature) for r in rows]
    colours = model_colours(keys)
    repeated = any(r.repeats > 1 for r in rows)
    by_novelty = any(r.reward_mode == "novelty_sum" for r in rows)
    values = [float(r.reward) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: values[i])
    labels = _labels(keys)
    figure = new_figure(scores_figsize(len(rows)))
    ax = figure.add_subplot()
    positions = np.arange(len(order))
    ax.barh(
        positions,
        [values[i] for i in order],
        color=[colours[keys[i]] for i in order],
        height=0.65,
    )
    for y, i in zip(positions, order, strict=True):
        row = rows[i]
        interval = row.reward_interval if repeated else None
        if interval:
            ax.errorbar(
                values[i],
                y,
                xerr=[[values[i] - interval[0]], [interval[1] - values[i]]],
                color="#333333",
                capsize=4,
                linewidth=1.2,
            )
        value = f"{values[i]:.2f}" if by_novelty else f"{values[i]:g}"
        value = f"{values[i]:.1f}" if repeated and not by_novelty else value
        value = score_text(value, row.lower_bound)
        note = _plural(row.question_count, "question")
        note += f", {_plural(row.repeats, 'repeat')}" if repeated else ""
        right = interval[1] if interval else values[i]
        ax.text(right, float(y), f"  {value}  ({note})", va="center", fontsize=9)
    ax.set_yticks(positions, [labels[i] for i in order], fontsize=10)
    top = max([r.reward_interval[1] for r in rows if repeated and r.reward_interval] + values)
    ax.set_xlim(0, max(1.0, top) * 1.28)
    measure = "novelty of valid answers" if by_novelty else "valid answers"
    ax.set_xlabel(
        f"{measure}, summed over questions" + (" (mean per repeat, 95% CI)" if repeated else "")
    )
    title = "AidanBench novelty sum per model" if by_novelty else "AidanBench score per model"
    ax.set_title(title, fontsize=13, loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    _style(ax)
    return save_figure(figure, path)


def _score_matrix(
    results: Sequence[QuestionResult], keys: Sequence[GroupKey], questions: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Mean score over repeats (questions x groups, NaN where not run), and errored cells."""
    sums = np.zeros((len(questions), len(keys)))
    counts = np.zeros((len(questions), len(keys)))
    failed = np.zeros((len(questions), len(keys)), dtype=bool)
    row_of = {q: i for i, q in enumerate(questions)}
    column_of = {k: j for j, k in enumerate(keys)}
    for r in results:
        i, j = row_of[r.question], column_of[(r.model, r.temperature)]
        sums[i, j] += r.score
        counts[i, j] += 1
        failed[i, j] |= r.errored
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), failed


def plot_questions(results: Sequence[QuestionResult], path: Path) -> Path:
    """Heat map of scores, a row per question, a column per model; cells carry their number (no
    colour bar needed), grey cells were not run and ``!`` marks an errored line."""
    from matplotlib import colormaps

    keys = list(group_results(results))
    questions = question_order(results)
    matrix, failed = _score_matrix(results, keys, questions)
    figure = new_figure(questions_figsize(len(keys), len(questions)))
    ax = figure.add_subplot()
    cmap = colormaps["YlGnBu"].with_extremes(bad="#e6e6e6")
    peak = float(np.nanmax(matrix)) if np.isfinite(matrix).any() else 1.0
    ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=0, vmax=max(peak, 1.0), aspect="auto")
    for (i, j), value in np.ndenumerate(matrix):
        if np.isnan(value):
            ax.text(j, i, "–", ha="center", va="center", fontsize=8, color="#777777")
            continue
        text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
        text += "!" if failed[i, j] else ""
        dark = value > 0.55 * max(peak, 1.0)
        ax.text(
            j,
            i,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="white" if dark else "#1a1a1a",
        )
    labels = [
        f"Q{n}  " + textwrap.shorten(q, QUESTION_LABEL, placeholder="…")
        for n, q in enumerate(questions, 1)
    ]
    ax.set_yticks(range(len(questions)), labels, fontsize=8)
    ax.set_xticks(range(len(keys)), [column_label(k) for k in _labels(keys)], fontsize=8)
    ax.tick_params(axis="x", top=True, bottom=False, labeltop=True, labelbottom=False)
    ax.set_xticks(np.arange(-0.5, len(keys)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(questions)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    repeats = len({r.repeat for r in results})
    notes = ["– not run", "! errored (lower bound)"]
    if repeats > 1:
        notes.insert(0, f"mean over {repeats} repeats")
    ax.set_title("Valid answers per question", fontsize=13, loc="left")
    ax.set_xlabel("; ".join(notes), fontsize=9, color="#555555")
    return save_figure(figure, path)


COLUMN_CHARS = 15
"""Characters of a column's heading per line: a cell is an inch wide (``questions_figsize``)."""


def column_label(name: str) -> str:
    """A model's name wrapped to its column, broken after ``/`` and before ``@`` or at a
    hyphen: a slanted name ran off the figure's right edge, an upright one took its height."""
    spaced = name.replace("/", "/ ").replace("@", " @")
    lines = textwrap.wrap(spaced, COLUMN_CHARS, break_on_hyphens=True)
    return "\n".join(line.replace("/ ", "/").replace(" @", "@") for line in lines)


def longest_chain_question(results: Sequence[QuestionResult]) -> str:
    """The question with the most recorded answers in any line (first such, on ties)."""
    if not results:
        raise ValueError("no results to choose a question from")
    return max(results, key=lambda r: len(r.answers)).question


def select_question(results: Sequence[QuestionResult], choice: str | None) -> str:
    """The question ``choice`` names (``5``, ``Q5``, the text, or a case-insensitive fragment
    matching one), the longest chain's when None; else ``ValueError`` naming the problem."""
    questions = question_order(results)
    if choice is None:
        return longest_chain_question(results)
    number = choice[1:] if choice[:1] in "Qq" and choice[1:].isdigit() else choice
    if number.isdigit():
        if not 1 <= int(number) <= len(questions):
            raise ValueError(f"question number {choice} is out of range 1-{len(questions)}")
        return questions[int(number) - 1]
    if choice in questions:
        return choice
    matches = [q for q in questions if choice.casefold() in q.casefold()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ValueError(f"no question matches {choice!r}")
    shown = "; ".join(textwrap.shorten(q, 40, placeholder="…") for q in matches[:4])
    raise ValueError(f"{len(matches)} questions match {choice!r} ({shown}); be more specific")


def axis_label(score: Score) -> str:
    """A score's axis heading, with its range when it is not a share (``coherence (0-100)``)."""
    return f"{score.label} (0-{score.scale:g})" if score.scale > 1 else score.label


def _threshold_of(lines: Sequence[QuestionResult]) -> Thresholds:
    recorded = {r.thresholds for r in lines if r.thresholds is not None}
    return recorded.pop() if len(recorded) == 1 else Thresholds()


def _failure(result: QuestionResult, thresholds: Thresholds) -> tuple[AnswerLine, str] | None:
    """The chain's failing answer and the score it failed on, if it ended by the rule."""
    last = result.answers[-1] if result.answers else None
    if last is None or last.valid:
        return None
    try:  # a score the rule needs is missing: no failure to mark
        reason = thresholds.failure({score.name: score.value(last) for score in declared()})
    except ValueError:
        return None
    return (last, reason) if reason else None


def plot_trajectory(results: Sequence[QuestionResult], question: str, path: Path) -> Path:
    """Each score along the answer index of one question, a line per model; dashed lines are
    the thresholds, a cross marks each chain's failing answer."""
    lines = [r for r in results if r.question == question]
    keys = list(group_results(results))
    colours = model_colours(keys)
    thresholds = _threshold_of(lines)
    panels = [
        (score.name, axis_label(score), thresholds.get(score.name) or 0.0)
        for score in declared()
        if score.switch is None or any(score.value(a) is not None for r in lines for a in r.answers)
    ]
    figure = new_figure(trajectory_figsize(len(panels)))
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    repeats = len({r.repeat for r in lines}) > 1
    labels = dict(zip(keys, _labels(keys), strict=True))
    for ax, (field, ylabel, threshold) in zip(axes, panels, strict=True):
        for r in lines:
            key = (r.model, r.temperature)
            points = [(a.index, getattr(a, field, None)) for a in r.answers]
            points = [(x, y) for x, y in points if y is not None]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            label = labels[key] + (f" (repeat {r.repeat})" if repeats else "")
            ax.plot(
                xs,
                ys,
                color=colours[key],
                linestyle=LINE_STYLES[(r.repeat - 1) % len(LINE_STYLES)],
                linewidth=1.4,
                marker="o",
                markersize=2.5,
                alpha=0.9,
                label=f"{label}: {r.score}" + (f" ({r.stop_reason})" if r.errored else ""),
            )
            end = _failure(r, thresholds)
            if end is not None and end[1] == field:
                ax.plot(
                    end[0].index,
                    getattr(end[0], field),
                    marker="X",
                    markersize=10,
                    color=colours[key],
                    markeredgecolor="white",
                    zorder=5,
                )
        ax.axhline(threshold, color="#444444", linestyle="--", linewidth=1)
        ax.text(
            1.0,
            threshold,
            f" pass: > {threshold:g}",
            transform=ax.get_yaxis_transform(),
            va="bottom",
            ha="right",
            fontsize=8,
            color="#444444",
        )
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        _style(ax)
    axes[0].set_ylim(bottom=0, top=105)
    axes[-1].set_xlabel("answer index")
    _legend_beside(
        axes[0], "model: valid answers\n(✕ = failing answer, on the score that failed)", 8
    )
    number = question_order(results).index(question) + 1
    title = textwrap.fill(f"Q{number}: {question}", 110)
    figure.suptitle(title, fontsize=12, x=0.01, ha="left")
    return save_figure(figure, path)


def plot_stop_reasons(rows: Sequence[SummaryRow], path: Path) -> Path:
    """Why questions ended, per model, as stacked horizontal bars with counts."""
    keys = [(r.model, r.temperature) for r in rows]
    reasons = list(dict.fromkeys(reason for r in rows for reason in r.stop_reasons))
    reasons.sort(
        key=lambda reason: list(STOP_COLOURS).index(reason) if reason in STOP_COLOURS else 99
    )
    figure = new_figure(stop_reasons_figsize(len(rows)))
    ax = figure.add_subplot()
    positions = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    widest = max([sum(r.stop_reasons.values()) for r in rows] + [1])
    for reason in reasons:
        counts = np.array([r.stop_reasons.get(reason, 0) for r in rows], dtype=float)
        bars = ax.barh(
            positions,
            counts,
            left=left,
            height=0.65,
            color=STOP_COLOURS.get(reason, "#cccccc"),
            label=reason.replace("_", " "),
            edgecolor="white",
        )
        ax.bar_label(
            bars,
            labels=[f"{int(c)}" if c >= SMALL_SEGMENT * widest else "" for c in counts],
            label_type="center",
            fontsize=9,
            color="white" if reason not in {"truncated", "unscored"} else "#1a1a1a",
        )
        left += counts
    for y, row, total in zip(positions, rows, left, strict=True):
        small = [
            f"{reason.replace('_', ' ')} {n}"
            for reason, n in row.stop_reasons.items()
            if 0 < n < SMALL_SEGMENT * widest
        ]
        note = f"  {int(total)}" + (f" ({', '.join(small)})" if small else "")
        ax.text(total, y, note, va="center", fontsize=9)
    ax.set_yticks(positions, _labels(keys), fontsize=10)
    ax.set_xlabel("question lines")
    ax.set_xlim(0, widest * 1.25)
    ax.set_title("Why questions ended", fontsize=13, loc="left")
    _legend_beside(ax, "stop reason", 9)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    _style(ax)
    return save_figure(figure, path)


def plot_all(
    results: Sequence[QuestionResult],
    out_dir: Path,
    question: str | None = None,
    reward_mode: str = "count",
) -> list[Path]:
    """Write the four charts into ``out_dir`` (which must exist); ``question`` picks the
    trajectory's (``select_question``), ``reward_mode`` what ``scores.png`` shows."""
    rows = summarise(results, reward_mode)
    chosen = select_question(results, question)
    out_dir = Path(out_dir)
    return [
        plot_scores(rows, out_dir / SCORES),
        plot_questions(results, out_dir / QUESTIONS),
        plot_trajectory(results, chosen, out_dir / TRAJECTORY),
        plot_stop_reasons(rows, out_dir / STOP_REASONS),
    ]


def cost_score_points(
    results: Sequence[QuestionResult],
) -> list[tuple[str, float, float, bool]]:
    """(label, dollars per repeat, mean score per repeat, lower bound) per model with a cost."""
    points = []
    for row in summarise(recorded(results)):
        dollars = per_repeat(row)
        if dollars is not None:
            label = f"{row.model} @ {row.temperature:g}"
            points.append((label, dollars, row.score, row.lower_bound))
    return points


def plot_cost_vs_score(results: Sequence[QuestionResult], out: Path) -> Path | None:
    """The cost-versus-score chart of run directories, None when no cost is known; a lower
    bound score is drawn hollow, labelled ``≥``, with an arrow up."""
    points = cost_score_points(results)
    if not points:
        return None
    figure = new_figure((8, 5.5), dpi=120)
    ax = figure.add_subplot()
    middle = (min(p[1] for p in points) + max(p[1] for p in points)) / 2
    for label, dollars, score, bound in points:
        ax.scatter([dollars], [score], facecolors="none" if bound else "C0", edgecolors="C0")
        if bound:
            ax.annotate("", (dollars, score * 1.08 + 1), (dollars, score), arrowprops={})
        right = dollars > middle  # label towards the middle, so it stays inside the axes
        ax.annotate(
            textwrap.fill(score_text(f"{score:g}", bound) + "  " + label, 48),
            (dollars, score),
            xytext=(-6 if right else 6, 0),
            textcoords="offset points",
            ha="right" if right else "left",
            va="center",
            fontsize=8,
        )
    ax.margins(x=0.1, y=0.1)
    ax.set_xlabel("dollars per repeat (its generations and the judge's work on its answers)")
    ax.set_ylabel("score (valid answers)")
    ax.set_title("Cost versus score", loc="left", fontsize=13)
    ax.set_title("hollow, ≥: a lower bound (questions did not finish)", loc="right", fontsize=8)
    return save_figure(figure, out, dpi=None)
