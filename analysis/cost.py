"""What a run cost, for ``report``, ``plot`` and the live table, and censored scores.

Dollars come from the run directory's files: each question line's ``cost_usd`` (its
recorded answers and discarded look-aheads, priced as they were made) and the
``usage`` totals in ``metadata.json`` (everything actually sent, across sessions,
redone and retried calls and embeddings included). A figure with an unknown part is
``unknown`` (``null`` in JSON), never 0, and the models without a price are listed.

A question stopped by a cap is *censored*: its score is a lower bound, shown ``≥ n``.
Totals and means count it at its observed score, so a model's total with a censored
question is a lower bound too; that is what every statistic here says of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aidanbench.analysis import rundir
from aidanbench.core.vocabulary import is_censored
from aidanbench.services.pricing import add_dollars

COST_CHART = "cost_vs_score.png"
"""File name of the cost-versus-score chart ``plot`` writes."""

UNKNOWN = "unknown"
"""How an unknown dollar figure is printed."""

CENSORING = (
    "questions stopped by a cap (budget, max_question_cost, max_question_seconds) are "
    "censored: their scores are lower bounds, counted at their observed value in totals "
    "and means, which are then lower bounds too"
)
"""How statistics treat censored questions, printed with them."""


def dollars_text(value: float | None) -> str:
    """``$0.0123`` or ``unknown``."""
    if value is None:
        return UNKNOWN
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def score_text(score: int | float, censored: bool) -> str:
    """A score, as a lower bound (``≥ 12``) when censored."""
    return f"≥ {score}" if censored else f"{score}"


def has_censored(stop_reasons: Iterable[str | None]) -> bool:
    """Whether any of these stop reasons is a cap (a total over them is a lower bound)."""
    return any(is_censored(reason) for reason in stop_reasons)


def question_lines(path: str | Path) -> list[dict[str, Any]]:
    """The question lines of a run directory (empty for a results file)."""
    run_dir = Path(path)
    file = run_dir / rundir.QUESTIONS
    if not run_dir.is_dir() or not file.exists():
        return []
    lines = []
    for raw in file.read_text("utf-8").splitlines():
        if raw.strip():
            line = json.loads(raw)
            if isinstance(line, dict):
                lines.append(line)
    return lines


def line_key(line: Mapping[str, Any]) -> tuple[str, float, str, int]:
    """(model, temperature, question, repeat) of a question line."""
    return line["model"], float(line["temperature"]), line["question"], int(line["repeat"])


def _line_dollars(line: Mapping[str, Any]) -> float | None:
    cost = line.get("cost_usd")
    return float(cost) if isinstance(cost, int | float) else None


def model_costs(lines: Iterable[Mapping[str, Any]]) -> dict[tuple[str, float], dict[str, Any]]:
    """Per (model, temperature): dollars, score, censored questions, dollars per answer."""
    rows: dict[tuple[str, float], dict[str, Any]] = {}
    for line in lines:
        key = (line["model"], float(line["temperature"]))
        row = rows.setdefault(
            key, {"dollars": 0.0, "score": 0, "questions": 0, "censored": 0, "answers": 0}
        )
        row["dollars"] = add_dollars(row["dollars"], _line_dollars(line))
        row["score"] += int(line.get("score") or 0)
        row["questions"] += 1
        row["answers"] += len(line.get("answers") or [])
        row["censored"] += int(is_censored(line.get("stop_reason")))
    for row in rows.values():
        valid = row["score"]
        row["dollars_per_valid_answer"] = (
            None if row["dollars"] is None or not valid else row["dollars"] / valid
        )
        row["score_is_lower_bound"] = row["censored"] > 0
    return rows


def run_usage(path: str | Path) -> dict[str, Any] | None:
    """The run's sent totals from ``metadata.json`` (None when not recorded)."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        return None
    meta = rundir.read_metadata(run_dir)
    usage = meta.get("usage") if meta else None
    return usage if isinstance(usage, dict) else None


def unpriced_models(path: str | Path) -> list[str]:
    """Models whose cost is unknown: from the ledger's totals, or else the answers."""
    usage = run_usage(path)
    if usage is not None:
        return list(usage.get("unpriced_models") or [])
    found: set[str] = set()
    for line in question_lines(path):
        for answer in line.get("answers") or []:
            for role, stats in (answer.get("calls") or {}).items():
                if role != "embed" and stats.get("calls") and stats.get("cost_usd") is None:
                    found.add(str(line["model"] if role == "generate" else role))
    return sorted(found)


def question_fields(path: str | Path) -> dict[tuple[str, float, str, int], dict[str, Any]]:
    """``report --json``'s cost keys of each question line."""
    return {
        line_key(line): {
            "cost_usd": _line_dollars(line),
            "censored": is_censored(line.get("stop_reason")),
        }
        for line in question_lines(path)
    }


def run_fields(path: str | Path) -> dict[tuple[str, float], dict[str, Any]]:
    """``report --json``'s cost keys of each run (model and temperature)."""
    return {
        key: {
            "cost_usd": row["dollars"],
            "dollars_per_valid_answer": row["dollars_per_valid_answer"],
            "censored_questions": row["censored"],
            "score_is_lower_bound": row["score_is_lower_bound"],
        }
        for key, row in model_costs(question_lines(path)).items()
    }


K = TypeVar("K")


def merged(
    fields: Callable[[str | Path], dict[K, dict[str, Any]]], paths: Sequence[str | Path]
) -> dict[K, dict[str, Any]]:
    """``fields`` of every input, in one mapping (report's inputs are one set of results)."""
    out: dict[K, dict[str, Any]] = {}
    for path in paths:
        out.update(fields(path))
    return out


def cost_payloads(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``report --json``'s ``cost`` over several inputs, as one input holding them all
    would give it: their sent totals added (unknown when one input has none)."""
    usages = [run_usage(path) for path in paths]
    sent = None if any(u is None for u in usages) else _added([u for u in usages if u])
    return {
        "sent": sent,
        "dollars": None if sent is None else sent.get("dollars"),
        "unpriced_models": sorted({m for path in paths for m in unpriced_models(path)}),
        "censoring": CENSORING,
    }


def _added(values: Sequence[Any]) -> Any:
    """Usage records added field by field: numbers summed (unknown if one is), lists
    merged, mappings added key by key."""
    if any(v is None for v in values):
        return None
    if all(isinstance(v, Mapping) for v in values):
        keys = sorted({k for v in values for k in v})
        return {k: _added([v[k] for v in values if k in v]) for k in keys}
    if all(isinstance(v, list) for v in values):
        return sorted({item for v in values for item in v})
    return sum(values)


def cost_lines_of(paths: Sequence[str | Path]) -> list[str]:
    """The text report's cost section over several inputs, as one input holding them all
    would give it (the sent totals added)."""
    return cost_lines(*paths)


def cost_payload(path: str | Path) -> dict[str, Any]:
    """``report --json``'s ``cost``: the run's sent totals, unpriced models, censoring."""
    usage = run_usage(path)
    return {
        "sent": usage,
        "dollars": None if usage is None else usage.get("dollars"),
        "unpriced_models": unpriced_models(path),
        "censoring": CENSORING,
    }


def cost_lines(*paths: str | Path) -> list[str]:
    """The text report's cost section (empty for results files)."""
    lines = [line for path in paths for line in question_lines(path)]
    if not lines:
        return []
    out = ["", "Cost (recorded answers and discarded look-aheads, per model):"]
    for (model, temperature), row in model_costs(lines).items():
        score = score_text(row["score"], row["score_is_lower_bound"])
        out.append(
            f"  {model} @ {temperature:g}: {dollars_text(row['dollars'])} for score {score} "
            f"({dollars_text(row['dollars_per_valid_answer'])} per valid answer)"
        )
    usage = cost_payloads(paths)["sent"]
    if usage is not None:
        out.append(
            "Run total as sent (every call: retries, redone calls and embeddings included): "
            f"{dollars_text(usage.get('dollars'))}, {usage.get('api_calls')} calls, "
            f"{usage.get('tokens')} tokens ({usage.get('cached_input_tokens')} cached input, "
            f"{usage.get('reasoning_tokens')} reasoning)"
        )
    missing = sorted({model for path in paths for model in unpriced_models(path)})
    if missing:
        out.append(f"No price for: {', '.join(missing)} (their cost is unknown)")
    censored = sum(1 for line in lines if is_censored(line.get("stop_reason")))
    if censored:
        out.append(f"{censored} question(s) censored; {CENSORING}.")
    return out


def cost_score_points(
    lines: Sequence[Mapping[str, Any]],
) -> list[tuple[str, float, int, bool]]:
    """(label, dollars, score, lower bound) per model with a known cost, for the chart."""
    points = []
    for (model, temperature), row in model_costs(lines).items():
        if row["dollars"] is not None:
            label = f"{model} @ {temperature:g}"
            points.append((label, row["dollars"], row["score"], row["score_is_lower_bound"]))
    return points


def plot_cost_vs_score(paths: Sequence[str | Path], out: Path) -> Path | None:
    """The cost-versus-score chart (PNG) of run directories; None when no cost is known.

    A model whose score is a lower bound is drawn hollow, labelled ``≥``, with an arrow up.
    """
    points = cost_score_points([line for path in paths for line in question_lines(path)])
    if not points:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 5), dpi=120, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    for label, dollars, score, bound in points:
        ax.scatter([dollars], [score], facecolors="none" if bound else "C0", edgecolors="C0")
        if bound:
            ax.annotate("", (dollars, score * 1.08 + 1), (dollars, score), arrowprops={})
        ax.annotate(score_text(score, bound) + "  " + label, (dollars, score), fontsize=8)
    ax.set_xlabel("dollars (recorded answers and discarded look-aheads)")
    ax.set_ylabel("score (valid answers)")
    ax.set_title("Cost versus score (hollow, ≥: a lower bound, a cap stopped questions)")
    figure.savefig(out)
    return out
