"""What a report says, as data and text: the ``--json`` document, the per-question and
per-category tables, and the lines printed under the summary (headlines, judges, errors,
cut answers, a paired comparison). ``report``, ``rescore`` and ``run``'s end print these, so
the commands read and print one shape; ``cli`` only parses, reads the inputs and prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from aidanbench.analysis.cost import line_key
from aidanbench.analysis.environment_metrics import line_metrics, rollout_means
from aidanbench.analysis.inputs import token_limit_field_of
from aidanbench.analysis.judge_noise import noise_text, panel_text, unreadable_text
from aidanbench.analysis.summary import (
    COUNTING,
    HEADLINE,
    INTERVAL_METHOD,
    PairedComparison,
    SummaryRow,
    group_label,
    group_results,
    question_order,
    warnings,
)
from aidanbench.analysis.tables import score_text
from aidanbench.core.errors import printable
from aidanbench.record.metadata import Metadata, read_metadata
from aidanbench.record.results import QuestionResult

PIPE_WIDTH = 200
"""Width of text written to a pipe or file (no terminal to ask)."""


QUESTION_WIDTH = 48
"""Characters of a question shown in tables; the full text is in ``--json``."""


MIN_QUESTION_WIDTH = 20
"""Questions are cut to at least this; below it, model names give way to letters."""


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


def category_table(rows: Sequence[SummaryRow]) -> Table | None:
    """Each row's score per question category (``SummaryRow.categories``), with its lower
    bound mark and, with repeats, its interval; None when no row has a category."""
    categories = list(dict.fromkeys(c.category for row in rows for c in row.categories))
    if not categories:
        return None
    temperatures = len({row.temperature for row in rows})
    table = Table(
        title="Valid answers per category",
        caption="≥ a lower bound (a question of the category did not finish); "
        "with repeats, the mean per repeat [95% CI]; – no question of it",
        caption_justify="left",
    )
    table.add_column("model", no_wrap=True)
    for category in categories:
        questions = max(
            c.questions for row in rows for c in row.categories if c.category == category
        )
        table.add_column(f"{printable(category)} ({questions})", justify="right")
    for row in rows:
        found = {c.category: c for c in row.categories}
        cells = []
        for category in categories:
            chosen = found.get(category)
            if chosen is None:
                cells.append("–")
                continue
            figure = f"{chosen.score:g}" if row.repeats == 1 else f"{chosen.score:.1f}"
            text = score_text(figure, chosen.lower_bound)
            if chosen.score_interval is not None:
                low, high = chosen.score_interval
                text += f" [{low:.1f}, {high:.1f}]"
            cells.append(text)
        table.add_row(printable(group_label(row.model, row.temperature, temperatures)), *cells)
    return table


TRUNCATION = (
    "cut by the token limit (finish_reason length) and scored as they came, as the "
    "benchmark scores the text it gets"
)
"""What a cut answer is and how it counts, said wherever cut answers are counted."""


def truncation_text(row: SummaryRow, limit_field: str, temperatures: int = 1) -> str | None:
    """A row's answers cut by the token limit and the field that raises it; None when none was."""
    if not row.truncated_answers:
        return None
    label = group_label(row.model, row.temperature, temperatures)
    unknown = (
        f" ({row.finish_unknown} more without a recorded finish)" if row.finish_unknown else ""
    )
    return (
        f"{label}: {row.truncated_answers} of {row.answers} answers {TRUNCATION}{unknown}; "
        f"raise {limit_field} (--model-kwargs, or the model's --variant) to let them finish"
    )


def error_lines(results: Sequence[QuestionResult]) -> list[str]:
    """The errored question lines with their error, under a heading; none when none erred."""
    failed = [r for r in results if r.errored]
    if not failed:
        return []
    numbers = {q: i for i, q in enumerate(question_order(results), 1)}
    found = [f"\nErrored questions ({len(failed)}); their scores are lower bounds:"]
    for r in failed:
        found.append(
            printable(
                f"  {r.model} @ {r.temperature:g}, repeat {r.repeat}, Q{numbers[r.question]} "
                f"{abbreviate(r.question)!r}: {r.stop_reason}: "
                f"{r.error or 'no message recorded'}"
            )
        )
    return found


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


def truncation_lines(rows: Sequence[SummaryRow], paths: Sequence[str]) -> list[str]:
    """A line per row with answers the token limit cut, naming the field to raise."""
    recorded = recorded_settings(paths)
    temperatures = len({row.temperature for row in rows})
    found = [
        f"  {printable(text)}"
        for row in rows
        if (text := truncation_text(row, token_limit_field_of(row.model, recorded), temperatures))
    ]
    return ["\nAnswers cut by the token limit:", *found] if found else []


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


ROLLOUT_NOTE = (
    "The headline is AidanBench's score: a repeat's questions summed, then averaged over "
    "repeats; vf-eval prints the mean reward of one rollout (one question line), which is "
    "the headline divided by the number of questions."
)
"""Which of the two figures is which, printed once under headlines that show both."""


def headline_lines(rows: Sequence[SummaryRow], results: Sequence[QuestionResult] = ()) -> list[str]:
    """Each row's headline under the reward mode, ``≥`` when it is a lower bound, with its
    interval and, beside it, ``vf-eval``'s per-rollout mean when repeated."""
    groups = group_results(results)
    both = False
    found = []
    for row in rows:
        spec = ".2f" if row.reward_mode == "novelty_sum" else "g"
        value = format(row.reward, spec) if row.repeats == 1 else format(row.reward, ".4g")
        value = score_text(value, row.lower_bound)
        if row.reward_interval is not None:
            low, high = row.reward_interval
            value += f" (mean of {row.repeats} repeats, 95% CI [{low:.4g}, {high:.4g}])"
        lines = groups.get((row.model, row.temperature), [])
        if row.repeats > 1 and lines:
            mean = rollout_means(lines, row.reward_mode)["reward"]
            if mean is not None:
                value += f"; per rollout (vf-eval's reward): {mean:.2f} over {len(lines)} lines"
                both = True
        found.append(
            f"headline ({row.reward_mode}): {printable(row.model)} @ {row.temperature:g}: {value}"
        )
    return [*found, ROLLOUT_NOTE] if both else found


def cap_lines(rows: Sequence[SummaryRow]) -> list[str]:
    """The answer cap each row ran under, in one line when they share it: a capped chain
    ends at the cap, finished, so its score counts the cap, never more."""
    caps = {row.answer_cap for row in rows}
    if len(caps) == 1:
        return [f"answer cap (max_answers): {cap_text(caps.pop())}"]
    temperatures = len({row.temperature for row in rows})
    each = [
        f"{group_label(row.model, row.temperature, temperatures)} {cap_text(row.answer_cap)}"
        for row in rows
    ]
    return [printable(f"answer cap (max_answers): {'; '.join(each)}")]


def cap_text(cap: int | str) -> str:
    """An answer cap in words: a number, ``none (as the benchmark)``, or ``unknown``."""
    if cap == "none":
        return "none (as the benchmark)"
    if cap == "unknown":
        return "unknown (not recorded)"
    return str(cap)


def judging_lines(rows: Sequence[SummaryRow]) -> list[str]:
    """Who judged each row: the judge asked for, the models that served it, its threshold's
    source and its noise when answers were judged several times; nothing for rows that
    record none (original-schema files)."""
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
    return [printable(text) for text in found]


def warning_lines(found: Sequence[str]) -> list[str]:
    """Warnings, one per line, as every command ends with them."""
    return [f"warning: {printable(text)}" for text in found]
