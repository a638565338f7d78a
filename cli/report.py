"""``aidanbench report``: scores of run directories and original-schema results files.

Several paths are read as one set of results (``aidanbench.analysis.inputs``). ``rescore`` and
``plot`` reuse the pieces here, so the commands read and print one shape.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aidanbench.analysis import cost
from aidanbench.analysis.cost import line_key
from aidanbench.analysis.environment_metrics import line_metrics, rollout_means
from aidanbench.analysis.inputs import combine, read_input, token_limit_field_of
from aidanbench.analysis.inputs import reward_mode as resolve_reward_mode
from aidanbench.analysis.judge_noise import noise_text, panel_text, unreadable_text
from aidanbench.analysis.summary import (
    COUNTING,
    HEADLINE,
    INTERVAL_METHOD,
    REWARD_MODES,
    PairedComparison,
    SummaryRow,
    group_label,
    group_results,
    paired_comparison,
    question_order,
    render_summary,
    summarise,
    truncation_text,
    warnings,
)
from aidanbench.cli import add_command
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import Metadata, read_metadata
from aidanbench.record.results import QuestionResult

PIPE_WIDTH = 200
"""Width of text written to a pipe or file (no terminal to ask)."""

QUESTION_WIDTH = 48
"""Characters of a question shown in tables; the full text is in ``--json``."""
MIN_QUESTION_WIDTH = 20
"""Questions are cut to at least this; below it, model names give way to letters."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


@dataclass(frozen=True)
class Inputs:
    """What the paths of a command hold, read and combined (``analysis.inputs``)."""

    results: list[QuestionResult]
    """Every input's question lines, paired by question text."""
    reward_mode: str
    """The headline's reward mode."""
    notes: list[str]
    """Warnings about the inputs themselves (reward modes that differ)."""


def read_inputs(
    paths: Sequence[str], thresholds: Thresholds | None = None, reward_mode: str | None = None
) -> Inputs:
    """Every path read before anything is printed; an unreadable one is a ``UsageError``."""
    seen: dict[Path, str] = {}
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise UsageError(f"{path} is given twice (as {seen[resolved]}); name each input once")
        seen[resolved] = path
    inputs = []
    for path in paths:
        try:
            source = read_input(Path(path), thresholds)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            detail = f"missing key {exc}" if isinstance(exc, KeyError) else one_line(exc)
            raise UsageError(f"cannot read results at {path}: {detail}") from exc
        if not source.results:
            raise UsageError(f"no question results at {path}")
        inputs.append(source)
    mode, notes = resolve_reward_mode(inputs, reward_mode)
    return Inputs(combine(inputs), mode, notes)


def make_console() -> Console:
    """Console for reports without highlighting (it colours numbers at random) or markup (names and
    questions show as written, brackets included). A pipe or file gets ``PIPE_WIDTH`` columns unless
    ``COLUMNS`` is set: rich's default of 80 folds the tables into slivers."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, markup=False, width=PIPE_WIDTH if wide else None)


def abbreviate(text: str, width: int = QUESTION_WIDTH) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _cell(lines: Sequence[QuestionResult]) -> str:
    if not lines:
        return "–"
    parts = []
    for line in sorted(lines, key=lambda r: r.repeat):
        mark = "!" if line.errored else ""
        bound = "≥" if line.lower_bound and not line.errored else ""
        parts.append(f"{bound}{line.score}{mark}")
    return "/".join(parts)


def _column_key(index: int) -> str:
    """``A``, ``B``, … ``Z``, ``AA``, ``AB``, …: short headers for narrow terminals."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def question_table(results: Sequence[QuestionResult], width: int = PIPE_WIDTH) -> Table:
    """Per-question scores: one row per question, one column per model and temperature.

    A cell holds each repeat's score (``52/48``); ``!`` marks an errored line, ``≥`` another
    unfinished one, ``–`` a question not run. Questions, not scores, are cut to fit ``width``.
    """
    groups = group_results(results)
    temperatures = len({t for _, t in groups})
    table = Table(
        title="Valid answers per question",
        caption="! errored (score is a lower bound); ≥ a lower bound (a cap stopped it, it "
        "did not finish, or its recorded end passes now); – not run; a/b: repeats",
        caption_justify="left",
    )
    by_question: dict[tuple[str, float, str], list[QuestionResult]] = {}
    for result in results:
        by_question.setdefault((result.model, result.temperature, result.question), []).append(
            result
        )
    questions = question_order(results)
    columns = [[_cell(by_question.get((m, t, q), [])) for q in questions] for m, t in groups]
    number_width = len(f"Q{len(questions)}")
    labels = [printable(group_label(m, t, temperatures)) for m, t in groups]
    score_widths = [max(len(c) for c in cells) for cells in columns]

    def room_for_questions(headers: Sequence[str]) -> int:
        widths = [max(w, len(h)) for w, h in zip(score_widths, headers, strict=True)]
        return width - 1 - (number_width + 3) - sum(w + 3 for w in widths) - 3

    if room_for_questions(labels) < MIN_QUESTION_WIDTH:
        # Too narrow for the names as headers: letters, and the full names in the legend.
        full = [printable(group_label(m, t, temperatures)) for m, t in groups]
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
        table.add_row(f"Q{number}", abbreviate(printable(question), question_width), *row)
    return table


def print_errors(results: Sequence[QuestionResult], console: Console) -> None:
    """The errored question lines with their error, if any."""
    failed = [r for r in results if r.errored]
    if not failed:
        return
    numbers = {q: i for i, q in enumerate(question_order(results), 1)}
    console.print(f"\nErrored questions ({len(failed)}); their scores are lower bounds:")
    for r in failed:
        console.print(
            printable(
                f"  {r.model} @ {r.temperature:g}, repeat {r.repeat}, Q{numbers[r.question]} "
                f"{abbreviate(r.question)!r}: {r.stop_reason}: "
                f"{r.error or 'no message recorded'}"
            ),
            markup=False,
        )


def recorded_settings(paths: Sequence[str]) -> Metadata:
    """The run directories' recorded scoring settings, by model, as one metadata document."""
    scoring: dict[str, dict[str, Any]] = {}
    for path in paths:
        found = read_metadata(Path(path)) if Path(path).is_dir() else None
        scoring.update((found.scoring_settings if found else None) or {})
    return Metadata(scoring_settings=scoring)


def truncation_fields(
    rows: Sequence[SummaryRow], paths: Sequence[str]
) -> dict[tuple[str, float], dict[str, Any]]:
    """``report --json``'s key of each run: the request field that raises its token limit."""
    recorded = recorded_settings(paths)
    return {
        (row.model, row.temperature): {
            "token_limit_field": token_limit_field_of(row.model, recorded)
        }
        for row in rows
    }


def print_truncation(rows: Sequence[SummaryRow], paths: Sequence[str], console: Console) -> None:
    """A line per row with answers the token limit cut, naming the field to raise."""
    recorded = recorded_settings(paths)
    temperatures = len({row.temperature for row in rows})
    found = [
        text
        for row in rows
        if (text := truncation_text(row, token_limit_field_of(row.model, recorded), temperatures))
    ]
    if found:
        console.print("\nAnswers cut by the token limit:", markup=False)
        for text in found:
            console.print(f"  {printable(text)}", markup=False)


def print_warnings(found: Sequence[str], console: Console) -> None:
    """Warnings, one per line, after everything else."""
    for text in found:
        console.print(f"warning: {printable(text)}", style="yellow", markup=False)


def comparison_text(comparison: PairedComparison) -> str:
    """One paragraph stating the paired difference and what was left out."""
    c = comparison
    spec = "+.2f" if c.reward_mode == "novelty_sum" else "+.1f"
    interval = (
        f"95% bootstrap CI [{c.interval[0]:{spec}}, {c.interval[1]:{spec}}]"
        if c.interval
        else "no interval (no paired questions)"
    )
    value = "+.2f" if c.reward_mode == "novelty_sum" else "+g"
    plain = ".2f" if c.reward_mode == "novelty_sum" else "g"
    what = "" if c.reward_mode == "count" else " in novelty sum"
    return (
        f"Paired comparison {c.model_a} − {c.model_b}{what}: {c.difference:{value}} over "
        f"{c.pairs} question lines both finished ({c.questions} questions), {interval}; "
        f"{c.score_a:{plain}} vs {c.score_b:{plain}}. Left out: {c.unfinished_pairs} matched "
        f"lines unfinished or errored, {c.only_a} lines only {c.model_a} ran, "
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
        "truncated_answers": result.truncated_answers,
        "lower_bound": result.lower_bound,
    }


def report_payload(
    results: Sequence[QuestionResult],
    rows: Sequence[SummaryRow],
    *,
    comparison: PairedComparison | None = None,
    question_fields: Mapping[tuple[str, float, str, int], Mapping[str, Any]] | None = None,
    run_fields: Mapping[tuple[str, float], Mapping[str, Any]] | None = None,
    reward_mode: str = "count",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``--json`` document; ``*_fields`` add keys to chosen runs or question lines. Question
    lines carry their metrics under our names and the environment's; each run carries
    ``rollout_means`` as ``vf-eval`` reports them (``aidanbench.analysis.environment_metrics``)."""
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
    payload: dict[str, Any] = {
        "counting": COUNTING,
        "reward_mode": reward_mode,
        "headline": HEADLINE[reward_mode],
        "interval": INTERVAL_METHOD,
        "runs": runs,
        "warnings": [*notes, *warnings(results)],
    }
    if comparison is not None:
        payload["comparison"] = comparison.to_dict()
    return payload


def merged_fields(
    *parts: Mapping[tuple[str, float], Mapping[str, Any]],
) -> dict[tuple[str, float], dict[str, Any]]:
    """Per-run keys of several sources, merged run by run."""
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for part in parts:
        for key, fields in part.items():
            out.setdefault(key, {}).update(fields)
    return out


def compare(
    results: Sequence[QuestionResult], names: Sequence[str] | None, reward_mode: str = "count"
) -> PairedComparison | None:
    """The ``--compare A B`` comparison, or None when not asked for."""
    if not names:
        return None
    try:
        return paired_comparison(results, names[0], names[1], reward_mode)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc


ROLLOUT_NOTE = (
    "The headline is AidanBench's score: a repeat's questions summed, then averaged over "
    "repeats; vf-eval prints the mean reward of one rollout (one question line), which is "
    "the headline divided by the number of questions."
)
"""Which of the two figures is which, printed once under headlines that show both."""


def print_headline(
    rows: Sequence[SummaryRow],
    console: Console,
    results: Sequence[QuestionResult] = (),
) -> None:
    """Each row's headline under the reward mode, with its interval and, beside it, ``vf-eval``'s
    per-rollout mean when repeated."""
    groups = group_results(results)
    both = False
    for row in rows:
        spec = ".2f" if row.reward_mode == "novelty_sum" else "g"
        value = format(row.reward, spec) if row.repeats == 1 else format(row.reward, ".4g")
        if row.reward_interval is not None:
            low, high = row.reward_interval
            value += f" (mean of {row.repeats} repeats, 95% CI [{low:.4g}, {high:.4g}])"
        lines = groups.get((row.model, row.temperature), [])
        if row.repeats > 1 and lines:
            mean = rollout_means(lines, row.reward_mode)["reward"]
            if mean is not None:
                value += f"; per rollout (vf-eval's reward): {mean:.2f} over {len(lines)} lines"
                both = True
        console.print(
            f"headline ({row.reward_mode}): {printable(row.model)} @ {row.temperature:g}: {value}",
            markup=False,
        )
    if both:
        console.print(ROLLOUT_NOTE, markup=False)


def print_judging(rows: Sequence[SummaryRow], console: Console) -> None:
    """Print who judged each row: the judge asked for, the models that served it, its threshold's
    source and its noise when answers were judged several times; nothing for rows that record none
    (original-schema files)."""
    found = []
    for row in rows:
        parts = []
        if row.judge_served:
            served = ", ".join(f"{name} ({n} answers)" for name, n in row.judge_served.items())
            parts.append(f"served by {served}")
        if row.threshold_source:
            parts.append(f"coherence threshold from {row.threshold_source}")
        if row.judge_unreadable:
            parts.append(unreadable_text(row.judge_unreadable))
        if not parts and row.judge_noise is None and row.judge_panel is None:
            continue
        text = f"judge of {row.model} @ {row.temperature:g}: {row.judge_model or 'not recorded'}"
        found.append("; ".join([text, *parts]))
        if row.judge_panel is not None:
            found.append(f"  {panel_text(row.judge_panel)}")
        if row.judge_noise is not None:
            found.append(f"  {noise_text(row.judge_noise)}")
    for text in found:
        console.print(printable(text), markup=False)


def store_inputs(url: str, reward_mode: str | None) -> tuple[Inputs, list[cost.RunCost], Metadata]:
    """A shared store's campaign (``run --store``) as one input, with each machine's ledger costs
    and its metadata; ``UsageError`` when it holds no results."""
    import asyncio

    from aidanbench.record.results import results_of
    from aidanbench.runner.campaign import read_campaign, redacted

    found = asyncio.run(read_campaign(url))
    if not found.lines:
        raise UsageError(f"no question results in the store {printable(redacted(url))}")
    metadata = found.metadata
    results, notes = results_of(found.lines, metadata)
    recorded = metadata.spec.reward_mode if metadata.spec else None
    mode = reward_mode or (recorded if recorded in REWARD_MODES else "count")
    costs = [cost.run_cost(machine, []) for machine in found.machines.values()]
    return Inputs(results, mode, notes), costs, metadata


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench report``."""
    if (args.store is None) == (not args.paths):
        raise UsageError("name run directories or results files, or --store URL (one of them)")
    if args.store is not None:
        inputs, costs, _ = store_inputs(args.store, args.reward_mode)
    else:
        inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
        costs = [cost.read_run_cost(p) for p in args.paths]
    results = inputs.results
    rows = summarise(results, inputs.reward_mode)
    comparison = compare(results, args.compare, inputs.reward_mode)
    if args.json:
        payload = report_payload(
            results,
            rows,
            comparison=comparison,
            reward_mode=inputs.reward_mode,
            notes=inputs.notes,
            question_fields=cost.question_fields(results),
            run_fields=merged_fields(cost.run_fields(results), truncation_fields(rows, args.paths)),
        )
        payload["cost"] = cost.cost_payload(costs)
        print(json.dumps(payload, indent=2))
        return 0
    console = make_console()
    render_summary(rows, console)
    print_headline(rows, console, results)
    print_judging(rows, console)
    console.print(question_table(results, width=console.width))
    print_errors(results, console)
    print_truncation(rows, args.paths, console)
    for text in cost.cost_lines(results, costs):
        console.print(text, markup=False)
    if comparison is not None:
        console.print("\n" + printable(comparison_text(comparison)), markup=False)
    print_warnings([*inputs.notes, *warnings(results)], console)
    return 0


def add_common_arguments(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    """``PATH…``, ``--json`` and ``--reward-mode``, shared with ``rescore`` and ``plot``
    (``optional``: for ``report --store``)."""
    parser.add_argument(
        "paths",
        nargs="*" if optional else "+",
        metavar="PATH",
        help="run directories or results files in the original AidanBench schema; several "
        "are reported together, their questions paired by text",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_reward_mode_argument(parser)


def add_reward_mode_argument(parser: argparse.ArgumentParser) -> None:
    """``--reward-mode``: the headline, by default the one the runs were started with."""
    parser.add_argument(
        "--reward-mode",
        choices=REWARD_MODES,
        help="headline: valid answers (count) or their novelty sum; default: the mode the "
        "run directories recorded, count for results files",
    )


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """``--store URL``: the campaign a shared store holds (``run --store``)."""
    parser.add_argument(
        "--store",
        metavar="URL",
        help="read the whole campaign from this PostgreSQL store (run --store) instead of "
        "paths; password from PGPASSWORD or ~/.pgpass",
    )


def register(subparsers: Any) -> None:
    """Add the ``report`` command."""
    parser = add_command(
        subparsers,
        "report",
        (
            "Summary per model and temperature (score, novelty sum, means, format "
            "adherence, stop reasons, tokens), per-question scores, errored questions and "
            "warnings (judge, embedding model, prompts or thresholds that differ). With "
            "repeats, the headline is the mean per repeat with a bootstrap interval. "
            f"Counting: {COUNTING}."
        ),
    )
    add_common_arguments(parser, optional=True)
    add_store_argument(parser)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="paired difference A − B of the headline over questions both models finished",
    )
    parser.set_defaults(handler=run)
