"""What ``aidanbench rescore`` prints: the rescored report (text or ``--json``), the
recorded and rescored totals side by side, and which lines are lower bounds now. Shared
by the plain rescore (``cli.rescore``) and the re-judging (``cli.rejudged``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from aidanbench.analysis.rescore import RescoredQuestion
from aidanbench.analysis.summary import (
    describe_thresholds,
    group_results,
    render_summary,
    summarise,
    warnings,
)
from aidanbench.cli.report import (
    line_key,
    print_errors,
    print_headline,
    print_judging,
    print_warnings,
    question_table,
    report_payload,
)
from aidanbench.core.errors import printable
from aidanbench.core.thresholds import Thresholds


def truncation_note(rescored: Sequence[RescoredQuestion]) -> str:
    """How many lines are lower bounds because the run stopped too early to tell."""
    count = sum(1 for r in rescored if r.truncated)
    if not count:
        return (
            "No question is truncated: every chain the run ended by its rule still ends "
            "at or before its recorded terminal answer, so these scores are exact."
        )
    return (
        f"{count} of {len(rescored)} question lines are truncated (≥): "
        "their recorded terminal answer passes these looser thresholds, so they are scored "
        "up to where the run stopped and their scores, and the totals that include them, "
        "are lower bounds."
    )


def change_table(rescored: Sequence[RescoredQuestion], reward_mode: str = "count") -> Table:
    """Recorded and rescored headlines side by side, per model and temperature (per repeat
    with repeats, as the summary shows them)."""
    table = Table(title="Recorded vs rescored totals")
    for name in ("model", "temp", "recorded", "rescored", "change", "truncated"):
        table.add_column(name, justify="left" if name == "model" else "right")
    before = summarise([r.original for r in rescored], reward_mode)
    after = summarise([r.result for r in rescored], reward_mode)
    truncated: dict[tuple[str, float], int] = {}
    for r in rescored:
        key = (r.original.model, r.original.temperature)
        truncated[key] = truncated.get(key, 0) + int(r.truncated)
    for old, new in zip(before, after, strict=True):
        spec = ".2f" if reward_mode == "novelty_sum" else ".1f" if old.repeats > 1 else "g"
        count = truncated[(old.model, old.temperature)]
        lower = "≥ " if count else ""
        table.add_row(
            printable(old.model),
            f"{old.temperature:g}",
            format(old.reward, spec),
            f"{lower}{new.reward:{spec}}",
            f"{lower}{new.reward - old.reward:+{spec}}",
            str(count),
        )
    return table


def _original_thresholds(lines: Sequence[RescoredQuestion]) -> list[dict[str, Any]]:
    distinct = dict.fromkeys(r.original_thresholds for r in lines)
    return [vars(t).copy() for t in distinct]


def rescore_payload(
    rescored: Sequence[RescoredQuestion],
    thresholds: Thresholds,
    reward_mode: str = "count",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``report --json`` document with recorded scores and truncation added.

    A run's ``original_score`` is per repeat, like its ``score``.
    """
    results = [r.result for r in rescored]
    by_key = {line_key(r.result): r for r in rescored}
    question_fields = {
        key: {"original_score": r.original_score, "truncated": r.truncated}
        for key, r in by_key.items()
    }
    run_fields = {}
    for key, lines in group_results(results).items():
        chosen = [by_key[line_key(line)] for line in lines]
        (recorded,) = summarise([r.original for r in chosen])
        run_fields[key] = {
            "original_score": recorded.to_dict()["score"],
            "truncated": sum(1 for r in chosen if r.truncated),
            "original_thresholds": _original_thresholds(chosen),
        }
    payload = report_payload(
        results,
        summarise(results, reward_mode),
        question_fields=question_fields,
        run_fields=run_fields,
        reward_mode=reward_mode,
        notes=notes,
    )
    return {
        "thresholds": vars(thresholds).copy(),
        "truncated": sum(1 for r in rescored if r.truncated),
        "note": truncation_note(rescored),
        **payload,
    }


def print_rescore(
    rescored: Sequence[RescoredQuestion],
    thresholds: Thresholds,
    console: Console,
    reward_mode: str = "count",
    notes: Sequence[str] = (),
    judge: str | None = None,
) -> None:
    """The text report of a rescore (of chains judged again by ``judge``, when given)."""
    results = [r.result for r in rescored]
    originals = "; ".join(
        describe_thresholds(t) for t in dict.fromkeys(r.original_thresholds for r in rescored)
    )
    how = (
        "without API calls"
        if judge is None
        else f"every answer's coherence judged again by {printable(judge)}"
    )
    console.print(
        f"Rescored with {describe_thresholds(thresholds)} (the run used {originals}), "
        f"from the recorded chains, {how}.",
        markup=False,
    )
    rows = summarise(results, reward_mode)
    render_summary(rows, console, title="AidanBench summary, rescored")
    print_headline(rows, console, results)
    print_judging(rows, console)
    console.print(change_table(rescored, reward_mode))
    console.print(question_table(results, console.width))
    print_errors(results, console)
    truncated = any(r.truncated for r in rescored)
    console.print(truncation_note(rescored), style="bold yellow" if truncated else None)
    print_warnings([*notes, *warnings(results)], console)
