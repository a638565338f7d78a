"""What a run cost, for ``report``, ``plot`` and the live table, and censored scores.

Two families of figures, each computed in one place: what the *recorded* answers and discarded
look-aheads of each (model, temperature) cost (its summary row's, as every view shows), and what
the run *sent*, the ledger's totals in ``metadata.json`` (``record.usage.summarise_ledger``:
every request, retries, redone calls and embeddings included). A figure with an unknown part is
``unknown`` (``null`` in JSON), never 0, and the models without a price or usage are listed.
A question stopped by a cap is *censored* (``CENSORING``): its score is a lower bound, ``≥ n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aidanbench.analysis.tables import dollars_text, score_text, tokens_text
from aidanbench.core.calls import add_dollars
from aidanbench.core.errors import printable
from aidanbench.core.vocabulary import is_censored
from aidanbench.record.metadata import Metadata, is_replay, read_metadata
from aidanbench.record.results import QuestionResult, read_results
from aidanbench.record.usage import LedgerSummary

if TYPE_CHECKING:
    from aidanbench.analysis.summary import SummaryRow

CENSORING = (
    "questions stopped by a cap (budget, max_question_cost, max_question_seconds) are "
    "censored: their scores are lower bounds, counted at their observed value in totals "
    "and means, which are then lower bounds too"
)
"""How statistics treat censored questions, printed with them."""


PER_MODEL = (
    "its own generations, recorded answers and discarded look-aheads, and the judge's work "
    "on its answers, each part known or unknown on its own; the embeddings serve every "
    "model's answers in shared requests and are the run's, below"
)
"""What a model's dollars count, said wherever they are shown."""

PART_NAMES = {"generations": "its generations", "judging": "judging its answers"}
"""Each part of a model's dollars (``core.calls.COST_PARTS``) as the reports name it."""


def parts_text(parts: Mapping[str, float | None]) -> str:
    """A model's dollars by part: ``its generations $0.0936, judging its answers unknown``."""
    return ", ".join(f"{PART_NAMES[part]} {dollars_text(value)}" for part, value in parts.items())


def line_key(result: QuestionResult) -> tuple[str, float, str, int]:
    """(model, temperature, question, repeat) of a question line."""
    return result.model, result.temperature, result.question, result.repeat


def per_repeat(row: SummaryRow) -> float | None:
    """Dollars of one repeat (the mean over repeats); None when unknown."""
    return None if row.cost_usd is None else row.cost_usd / row.repeats


def per_valid_answer(row: SummaryRow) -> float | None:
    """Dollars per valid answer over all the row's repeats; None when unknown or none."""
    valid = sum(row.repeat_scores)
    return None if row.cost_usd is None or not valid else row.cost_usd / valid


def censored(row: SummaryRow) -> int:
    """The row's question lines a cap stopped (their scores are lower bounds)."""
    return sum(n for reason, n in row.stop_reasons.items() if is_censored(reason))


def recorded(results: Iterable[QuestionResult]) -> list[QuestionResult]:
    """The lines of run directories (results files record no calls, tokens or dollars)."""
    return [r for r in results if r.api_calls is not None]


@dataclass(frozen=True)
class RunCost:
    """A run directory's spending: the ledger's totals and the models without a price."""

    usage: LedgerSummary | None
    """``metadata.json``'s ``usage``; None for a results file, or a run without a ledger."""
    unpriced: tuple[str, ...] = ()
    replay: bool = False
    """The demo's replay of the published run (``record.metadata.is_replay``): nothing was
    spent; its dollars are what its requests would cost at list prices."""


def run_cost(metadata: Metadata | None, results: Iterable[QuestionResult]) -> RunCost:
    """A run's ``RunCost``; without a ledger, unpriced are models with usage but no dollars."""
    usage = metadata.usage if metadata is not None else None
    replay = metadata is not None and is_replay(metadata.questions_source)
    if usage is not None:
        return RunCost(usage, tuple(usage.unpriced_models or ()), replay)
    found: set[str] = set()
    for result in results:
        for answer in result.answers:
            for role, stats in (answer.calls or {}).items():
                if (
                    role != "embed"
                    and stats.get("calls")
                    and not stats.get("usage_missing")
                    and stats.get("cost_usd") is None
                ):
                    found.add(str(result.model if role == "generate" else role))
    return RunCost(None, tuple(sorted(found)), replay)


def read_run_cost(path: str | Path) -> RunCost:
    """``run_cost`` of the run directory at ``path`` (a results file has none)."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        return RunCost(None)
    metadata = read_metadata(run_dir)
    ledger = metadata is not None and metadata.usage is not None
    return run_cost(metadata, [] if ledger else read_results(run_dir))


def question_fields(
    results: Iterable[QuestionResult],
) -> dict[tuple[str, float, str, int], dict[str, Any]]:
    """``report --json``'s cost keys of each question line of a run directory."""
    return {
        line_key(r): {
            "cost_usd": r.cost_usd,
            "usage_missing": r.usage_missing,
            "censored": is_censored(r.stop_reason),
        }
        for r in recorded(results)
    }


def run_fields(results: Iterable[QuestionResult]) -> dict[tuple[str, float], dict[str, Any]]:
    """``report --json``'s cost keys of each run (model and temperature) of a run directory."""
    from aidanbench.analysis.summary import summarise  # numpy: not at `run`'s start

    return {
        (row.model, row.temperature): {
            "cost_usd": row.cost_usd,
            "dollars_per_valid_answer": per_valid_answer(row),
            "usage_missing": row.usage_missing,
            "censored_questions": censored(row),
            "score_is_lower_bound": row.lower_bound,
        }
        for row in summarise(recorded(results))
    }


def cost_payload(runs: Sequence[RunCost]) -> dict[str, Any]:
    """``report --json``'s ``cost`` over several inputs, as one input holding them all would
    give it (unknown when one has no ledger)."""
    usages = [run.usage for run in runs]
    sent = (
        None
        if any(u is None for u in usages)
        else _added([u.model_dump(exclude_unset=True) for u in usages if u is not None])
    )
    return {
        "sent": sent,
        "dollars": None if sent is None else sent.get("dollars"),
        "dollars_bound": None if sent is None else sent.get("dollars_bound"),
        "unpriced_models": sorted({m for run in runs for m in run.unpriced}),
        "censoring": CENSORING,
        "estimates": ESTIMATES,
    }


ESTIMATES = (
    "a reply without usage has unknown tokens and dollars; for caps and the upper bound "
    "its tokens are estimated from above as the UTF-8 bytes of its prompt and reply; a "
    "request without a recorded reply (killed, timed out, unreadable) is counted at its "
    "bound: its prompt's bytes and its max_tokens (or 4,096) output tokens"
)
"""How unknown usage is estimated, printed with the figures that use it."""


def _added(values: Sequence[Any]) -> Any:
    """Usage records added field by field (unknown if one is): lists merged, mappings by key."""
    if any(v is None for v in values):
        return None
    if all(isinstance(v, Mapping) for v in values):
        keys = sorted({k for v in values for k in v})
        return {k: _added([v[k] for v in values if k in v]) for k in keys}
    if all(isinstance(v, list) for v in values):
        return sorted({item for v in values for item in v})
    return sum(values)


REPLAY = (
    "Nothing was spent: aidanbench demo replays the published run on a local server, and "
    "these dollars are what its requests would cost at the bundled list prices"
)
"""Said with every cost of the demo's replay."""


def sent_line(usage: Mapping[str, Any], replay: bool = False) -> list[str]:
    """What the run sent, as the ledger recorded it: requests, tokens and dollars (at list
    prices, nothing spent, for the demo's ``replay``)."""
    calls, replies = usage.get("api_calls"), usage.get("replies")
    refused, unrecorded = usage.get("refused") or 0, usage.get("unrecorded")
    if unrecorded is None:  # metadata written before requests were matched to replies
        unrecorded = max(0, int(calls or 0) - int(replies or 0) - int(refused))
    missing = usage.get("without_usage") or 0
    tokens = tokens_text(usage.get("tokens"))
    complete = not unrecorded and not missing
    head = "Run total as sent (every request: retries, redone requests, embeddings and the "
    head += "preflight's checks included" + (")" if complete else "; not complete, see below)")
    if replay:
        head = "Run total at list prices (a replay, nothing spent; every request counted)"
    out = [
        f"{head}: {dollars_text(usage.get('dollars'))}, {calls} requests",
        f"  sent {calls}: {replies} replied, {refused} refused (HTTP errors, not billed), "
        f"{unrecorded} unrecorded; {tokens} tokens "
        f"({tokens_text(usage.get('cached_input_tokens'))} cached input, "
        f"{tokens_text(usage.get('reasoning_tokens'))} reasoning)",
        *parts_line(usage),
        *roles_line(usage),
    ]
    if missing:
        by_model = usage.get("without_usage_models") or {}
        named = ", ".join(f"{printable(m)} {n}" for m, n in by_model.items())
        out.append(
            f"  {missing} replies reported no usage ({named}): their tokens and dollars are unknown"
        )
    if unrecorded:
        out.append(
            f"  {unrecorded} requests were sent without a recorded reply (the process was "
            "killed, or they timed out or could not be read): a provider may bill them, at "
            f"most {dollars_text(usage.get('unrecorded_bound_usd'))}"
        )
    if not complete and not replay:
        out.append(f"  At most {dollars_text(usage.get('dollars_bound'))} in all ({ESTIMATES})")
    return out


def parts_line(usage: Mapping[str, Any]) -> list[str]:
    """What the run total holds besides the models' chat requests: embeddings and preflight."""
    parts = [
        f"{what}: {figures.get('api_calls')} requests, {tokens_text(figures.get('tokens'))} tokens"
        for key, what in (
            ("embeddings", "the questions' embeddings (several answers' texts a request)"),
            ("preflight", "the preflight's checks"),
        )
        if (figures := usage.get(key))
    ]
    return [f"  of these, {'; '.join(parts)}"][: len(parts)]


ROLE_NAMES = {"model": "the models", "judge": "the judge", "embeddings": "the embeddings"}
"""Each role of the ledger's lines as the run total's parts name it."""


def _role_order(item: tuple[str, Any]) -> int:
    role = item[0].split(":", 1)[0]
    return list(ROLE_NAMES).index(role) if role in ROLE_NAMES else len(ROLE_NAMES)


def roles_line(usage: Mapping[str, Any]) -> list[str]:
    """The run total by role, each known or unknown on its own (an unpriced judge leaves
    the models' and the embeddings' dollars known)."""
    totals: dict[str, float | None] = {}
    for key, figures in sorted((usage.get("by_role_model") or {}).items(), key=_role_order):
        role = key.split(":", 1)[0]
        value = figures.get("dollars") if isinstance(figures, Mapping) else None
        totals[role] = add_dollars(totals.get(role, 0.0), value)
    if not totals:
        return []
    parts = [
        f"{ROLE_NAMES.get(role, role)} {dollars_text(value)}" for role, value in totals.items()
    ]
    return [f"  by role: {', '.join(parts)}"]


def cost_lines(results: Sequence[QuestionResult], runs: Sequence[RunCost]) -> list[str]:
    """The text report's cost section (empty without a run directory)."""
    from aidanbench.analysis.summary import summarise  # numpy: not at `run`'s start

    lines = recorded(results)
    if not lines:
        return []
    replay = bool(runs) and all(run.replay for run in runs)
    out = ["", f"Cost per model ({PER_MODEL}):"]
    if replay:
        out.insert(1, f"{REPLAY}.")
    for row in summarise(lines):
        score = score_text(f"{row.score:g}", row.lower_bound)
        spent = dollars_text(row.cost_usd)
        if row.repeats > 1:
            spent += f" for {row.repeats} repeats, {dollars_text(per_repeat(row))}"
            score = f"per repeat for mean score {score}"
        else:
            score = f"for score {score}"
        text = (
            f"  {printable(row.model)} @ {row.temperature:g}: {spent} {score} "
            f"({dollars_text(per_valid_answer(row))} per valid answer)"
        )
        if row.cost_parts:
            text += "; " + parts_text(row.cost_parts)
        if row.usage_missing:
            text += f"; {row.usage_missing} requests without usage"
        out.append(text)
    usage = cost_payload(runs)["sent"]
    if usage is not None:
        out += sent_line(usage, replay)
    missing = sorted({model for run in runs for model in run.unpriced})
    if missing:
        out.append(
            f"No price for: {', '.join(printable(m) for m in missing)} (their cost is unknown; "
            "give their prices with --prices FILE, docs/cost.md#prices)"
        )
    censored = sum(1 for line in lines if is_censored(line.stop_reason))
    if censored:
        out.append(f"{censored} question(s) censored; {CENSORING}.")
    return out
