"""``aidanbench report``: scores of a run directory or an original-schema results file.

Text output is the summary table, a questions x models table of per-question scores, the
errored questions with their errors, and warnings about totals that should not be compared.
``--json`` prints the same figures for programs. ``rescore`` reuses the pieces here, so both
commands print one shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aidanbench.analysis import cost
from aidanbench.analysis.environment_metrics import line_metrics, rollout_means
from aidanbench.analysis.results import QuestionResult
from aidanbench.analysis.rundir import read_results
from aidanbench.analysis.summary import (
    COUNTING,
    PairedComparison,
    SummaryRow,
    errored,
    group_label,
    group_results,
    paired_comparison,
    question_order,
    render_summary,
    short_names,
    summarise,
    warnings,
)
from aidanbench.cli.errors import UsageError
from aidanbench.graph.thresholds import Thresholds

LineKey = tuple[str, float, str, int]
"""(model, temperature, question, repeat): one question line."""

PIPE_WIDTH = 200
"""Width of text written to a pipe or file (no terminal to ask)."""

QUESTION_WIDTH = 48
"""Characters of a question shown in tables; the full text is in ``--json``."""
MIN_QUESTION_WIDTH = 20
"""Questions are cut to at least this; below it, model names give way to letters."""


def line_key(result: QuestionResult) -> LineKey:
    """The key that identifies one question line."""
    return result.model, result.temperature, result.question, result.repeat


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


def load_results(path: str, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """Results at ``path``; a missing or unreadable path is a ``UsageError``."""
    try:
        results = read_results(Path(path), thresholds)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else one_line(exc)
        raise UsageError(f"cannot read results at {path}: {detail}") from exc
    if not results:
        raise UsageError(f"no question results at {path}")
    return results


def make_console() -> Console:
    """Console for reports, without highlighting (which colours numbers at random).

    Output to a pipe or file gets ``PIPE_WIDTH`` columns unless ``COLUMNS`` says otherwise:
    rich's default of 80 folds the tables into unreadable slivers.
    """
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=PIPE_WIDTH if wide else None)


def abbreviate(text: str, width: int = QUESTION_WIDTH) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _cell(lines: Sequence[QuestionResult], marks: Mapping[LineKey, str]) -> str:
    if not lines:
        return "–"
    parts = []
    for line in sorted(lines, key=lambda r: r.repeat):
        mark = "!" if errored(line) else ""
        bound = "≥" if cost.is_censored(line.stop_reason) else ""
        parts.append(f"{bound}{line.score}{mark}{marks.get(line_key(line), '')}")
    return "/".join(parts)


def _column_key(index: int) -> str:
    """``A``, ``B``, … ``Z``, ``AA``, ``AB``, …: short headers for narrow terminals."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def question_table(
    results: Sequence[QuestionResult],
    marks: Mapping[LineKey, str] | None = None,
    legend: str = "",
    width: int = PIPE_WIDTH,
) -> Table:
    """Per-question scores: one row per question, one column per model and temperature.

    A cell holds the score of each repeat (``52/48``); ``!`` marks an errored line,
    ``–`` a question the model did not run, and ``marks`` adds a suffix to chosen lines.
    Questions are cut to what ``width`` leaves after the score columns, so the scores are
    never the ones squeezed.
    """
    marks = marks or {}
    groups = group_results(results)
    temperatures = len({t for _, t in groups})
    table = Table(
        title="Valid answers per question",
        caption="! errored (score is a lower bound); ≥ stopped by a cap (a lower bound); "
        "– not run; a/b: repeats" + legend,
        caption_justify="left",
    )
    by_question: dict[tuple[str, float, str], list[QuestionResult]] = {}
    for result in results:
        by_question.setdefault((result.model, result.temperature, result.question), []).append(
            result
        )
    questions = question_order(results)
    columns = [[_cell(by_question.get((m, t, q), []), marks) for q in questions] for m, t in groups]
    number_width = len(f"Q{len(questions)}")
    names = short_names(list(dict.fromkeys(m for m, _ in groups)))
    labels = [group_label(names[m], t, temperatures) for m, t in groups]
    score_widths = [max(len(c) for c in cells) for cells in columns]

    def room_for_questions(headers: Sequence[str]) -> int:
        widths = [max(w, len(h)) for w, h in zip(score_widths, headers, strict=True)]
        return width - 1 - (number_width + 3) - sum(w + 3 for w in widths) - 3

    if room_for_questions(labels) < MIN_QUESTION_WIDTH:
        # Too narrow for the names as headers: letters, and the full names in the legend.
        full = [group_label(m, t, temperatures) for m, t in groups]
        keys = [_column_key(i) for i in range(len(groups))]
        named = "\n".join(f"{k} = {name}" for k, name in zip(keys, full, strict=True))
        table.caption = f"{table.caption}\n{named}"
        labels = keys
    question_width = max(MIN_QUESTION_WIDTH, min(QUESTION_WIDTH, room_for_questions(labels)))
    table.add_column("#", justify="right", no_wrap=True, min_width=number_width)
    table.add_column("question", no_wrap=True)
    for label, score_width in zip(labels, score_widths, strict=True):
        table.add_column(
            label,
            justify="right",
            no_wrap=True,
            min_width=max(score_width, len(label)),
        )
    for number, question in enumerate(questions, 1):
        row = [column[number - 1] for column in columns]
        table.add_row(f"Q{number}", abbreviate(question, question_width), *row)
    return table


def print_errors(results: Sequence[QuestionResult], console: Console) -> None:
    """The errored question lines with their error, if any."""
    failed = [r for r in results if errored(r)]
    if not failed:
        return
    numbers = {q: i for i, q in enumerate(question_order(results), 1)}
    console.print(f"\nErrored questions ({len(failed)}); their scores are lower bounds:")
    for r in failed:
        console.print(
            f"  {r.model} @ {r.temperature:g}, repeat {r.repeat}, Q{numbers[r.question]} "
            f"{abbreviate(r.question)!r}: {r.stop_reason}: {r.error or 'no message recorded'}",
            markup=False,
        )


def print_warnings(found: Sequence[str], console: Console) -> None:
    """Warnings, one per line, after everything else."""
    for text in found:
        console.print(f"warning: {text}", style="yellow", markup=False)


def comparison_text(comparison: PairedComparison) -> str:
    """One paragraph stating the paired difference and what was left out."""
    c = comparison
    interval = (
        f"95% bootstrap CI [{c.interval[0]:+.1f}, {c.interval[1]:+.1f}]"
        if c.interval
        else "no interval (no paired questions)"
    )
    return (
        f"Paired comparison {c.model_a} − {c.model_b}: {c.difference:+d} over {c.pairs} "
        f"question lines both finished ({c.questions} questions), {interval}; "
        f"{c.score_a} vs {c.score_b}. Left out: {c.unfinished_pairs} matched lines "
        f"unfinished or errored, {c.only_a} lines only {c.model_a} ran, "
        f"{c.only_b} only {c.model_b} ran."
    )


def question_entry(result: QuestionResult, number: int) -> dict[str, Any]:
    """One question line for ``--json``; ``answers`` counts recorded answers."""
    return {
        "index": number,
        "question": result.question,
        "score": result.score,
        "answers": len(result.answers),
        "stop_reason": result.stop_reason,
        "repeat": result.repeat,
        "error": result.error,
    }


def report_payload(
    results: Sequence[QuestionResult],
    rows: Sequence[SummaryRow],
    *,
    comparison: PairedComparison | None = None,
    question_fields: Mapping[LineKey, Mapping[str, Any]] | None = None,
    run_fields: Mapping[tuple[str, float], Mapping[str, Any]] | None = None,
    reward_mode: str = "count",
) -> dict[str, Any]:
    """The ``--json`` document; ``*_fields`` add keys to chosen runs or question lines.

    Question lines carry their metrics under our names and the environment's; each run
    carries ``rollout_means``, the environment metrics averaged over its lines as
    ``vf-eval`` reports them (``aidanbench.analysis.environment_metrics``).
    """
    numbers = {q: i for i, q in enumerate(question_order(results), 1)}
    groups = group_results(results)
    runs = []
    for row in rows:
        key = (row.model, row.temperature)
        questions = [
            {
                **question_entry(r, numbers[r.question]),
                **line_metrics(r, reward_mode),
                **(question_fields or {}).get(line_key(r), {}),
            }
            for r in groups[key]
        ]
        runs.append(
            {
                **row.to_dict(),
                "reward_mode": reward_mode,
                "rollout_means": rollout_means(groups[key], reward_mode),
                **(run_fields or {}).get(key, {}),
                "questions": questions,
            }
        )
    payload: dict[str, Any] = {"counting": COUNTING, "runs": runs, "warnings": warnings(results)}
    if comparison is not None:
        payload["comparison"] = comparison.to_dict()
    return payload


def compare(
    results: Sequence[QuestionResult], names: Sequence[str] | None
) -> PairedComparison | None:
    """The ``--compare A B`` comparison, or None when not asked for."""
    if not names:
        return None
    try:
        return paired_comparison(results, names[0], names[1])
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench report``."""
    results = load_results(args.path)
    rows = summarise(results)
    comparison = compare(results, args.compare)
    if args.json:
        payload = report_payload(
            results,
            rows,
            comparison=comparison,
            reward_mode=recorded_reward_mode(args.path),
            question_fields=cost.question_fields(args.path),
            run_fields=cost.run_fields(args.path),
        )
        payload["cost"] = cost.cost_payload(args.path)
        print(json.dumps(payload, indent=2))
        return 0
    console = make_console()
    render_summary(rows, console)
    console.print(question_table(results, width=console.width))
    print_errors(results, console)
    for text in cost.cost_lines(args.path):
        console.print(text, markup=False)
    if comparison is not None:
        console.print("\n" + comparison_text(comparison), markup=False)
    print_warnings(warnings(results), console)
    return 0


def recorded_reward_mode(path: str) -> str:
    """The reward mode a run directory was started with; ``count`` for results files."""
    from aidanbench.analysis.rundir import read_metadata

    directory = Path(path)
    metadata = read_metadata(directory) if directory.is_dir() else None
    mode = ((metadata or {}).get("spec") or {}).get("reward_mode")
    return mode if mode in ("count", "novelty_sum") else "count"


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``PATH`` and ``--json``, shared with ``rescore``."""
    parser.add_argument(
        "path",
        metavar="PATH",
        help="run directory or results file in the original AidanBench schema",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def register(subparsers: Any) -> None:
    """Add the ``report`` command."""
    parser = subparsers.add_parser(
        "report",
        help="summarise scores of a run directory or results file",
        description=(
            "Summary per model and temperature (score, novelty sum, means, format "
            "adherence, stop reasons, tokens), per-question scores, errored questions and "
            f"warnings. Counting: {COUNTING}."
        ),
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="paired score difference A − B over questions both models finished",
    )
    parser.set_defaults(handler=run)
