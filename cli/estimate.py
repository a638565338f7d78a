"""``aidanbench estimate``, and ``run``'s cost options: what a run would cost, and may.

No API call is made and nothing is written (``aidanbench.analysis.estimate`` states the model and
its assumptions). ``run`` takes the same flags: ``--dry-run`` prints the estimate instead of
running, and ``--max-cost`` is the run-wide budget (armed on the usage ledger, ``services.usage``; a
cap the price table cannot count is refused first, ``runner.spec.check_prices``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from aidanbench.analysis.cost import dollars_text
from aidanbench.analysis.estimate import COLUMNS, PlannedRun, estimate, recorded
from aidanbench.analysis.tables import tokens_text
from aidanbench.cli import add_command, options
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import Settings, variant_label
from aidanbench.services.pricing import PriceFileError, price_table

if TYPE_CHECKING:
    from aidanbench.runner.spec import RunSpec


ESTIMATED = (
    "model_kwargs",
    "cot",
    "judge_model",
    "judge_samples",
    "embedding_model",
    "llm_novelty",
    "pipeline",
    "prices_path",
)
"""The settings an estimate depends on, taken as ``run`` takes them."""


def register(subparsers: Any) -> None:
    """Add ``estimate`` to the command line."""
    p = add_command(
        subparsers,
        "estimate",
        "Estimate the tokens and dollars of a run, as a range, without any "
        "API call. Takes run's model, question and scoring options.",
    )
    options.add_settings_flags(p, only={"model", *ESTIMATED}, required={"model"})
    options.add_variant_flag(p)
    add_reasoning_tokens(p)
    options.add_question_flags(p)
    p.add_argument("-r", "--repeats", type=int, default=1, metavar="K")
    add_answers_from(p)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.set_defaults(handler=handle)


def add_answers_from(p: argparse.ArgumentParser) -> None:
    """``--answers-from``, shared with ``run --dry-run``."""
    p.add_argument(
        "--answers-from",
        type=Path,
        metavar="PATH",
        help="run directory or results file whose chain lengths, answer lengths and tokens "
        "per request to use, per model and role (default: the bundled published 2024 run)",
    )


REASONING_FLAGS = ("reasoning_tokens", "judge_reasoning_tokens")


def add_reasoning_tokens(p: argparse.ArgumentParser) -> None:
    """``--reasoning-tokens`` and ``--judge-reasoning-tokens``, shared with ``run --dry-run``."""
    p.add_argument(
        "--reasoning-tokens",
        type=float,
        metavar="N",
        help="hidden reasoning tokens to assume per request of the models under test where "
        "--answers-from recorded no output tokens for them (default: the request's "
        "reasoning budget, or its effort's: docs/cost.md)",
    )
    p.add_argument(
        "--judge-reasoning-tokens",
        type=float,
        metavar="N",
        help="the same per judge call (default: none, or the effort budget of a reasoning "
        "judge such as o1-mini)",
    )


def model_settings(
    models: Sequence[str], model_kwargs: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> dict[str, Settings]:
    """Each model's name as sent and priced, and its request fields (``UsageError``: bad ones)."""
    found = {}
    for model in models:
        label = variant_label(model)
        fields = variants.get(label) if label is not None else None
        try:
            found[model] = Settings(model=model, model_kwargs=model_kwargs, variant_fields=fields)
        except ValidationError as exc:
            raise UsageError(options.validation_line(exc)) from None
    return found


def plan_estimate(
    args: argparse.Namespace,
    models: Sequence[str],
    questions: Sequence[str],
    settings: Settings,
    repeats: int,
    variants: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The estimate of ``models`` on ``questions``, each line ``repeats`` times; ``UsageError`` on a
    bad prices file, distribution or assumption."""
    for name in REASONING_FLAGS:
        assumed = getattr(args, name, None)
        if assumed is not None and not (math.isfinite(assumed) and assumed >= 0):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} must be a finite number ≥ 0, got {assumed}")
    try:
        prices = price_table(settings.prices_path)
        runs = recorded(args.answers_from)
    except (PriceFileError, ValueError, OSError) as exc:
        raise UsageError(printable(str(exc))) from None
    plan = PlannedRun(
        models=list(models),
        questions=list(questions),
        settings=settings,
        repeats=repeats,
        model_settings=model_settings(models, settings.model_kwargs, variants),
        reasoning_tokens=getattr(args, "reasoning_tokens", None),
        judge_reasoning_tokens=getattr(args, "judge_reasoning_tokens", None),
    )
    return estimate(plan, runs, prices)


def figures_text(figures: dict[str, float] | None) -> str:
    """``8,192``, or ``1,024 / 4,608 / 8,192`` for low / expected / high; ``unknown``."""
    if figures is None:
        return "unknown"
    values = [figures[name] for name in COLUMNS]
    return " / ".join(f"{v:,.0f}" for v in values) if len(set(values)) > 1 else f"{values[0]:,.0f}"


ROLE_NAMES = {"model": "generation", "judge": "judge", "similarity": "similarity judge"}


def basis_lines(row: dict[str, Any]) -> list[str]:
    """What a row rests on: its chains, and each role's tokens per request."""
    chains = row["chains"]
    sent = "" if row["sent_as"] == row["model"] else f" (sent as {printable(row['sent_as'])})"
    lines = [
        f"{printable(row['model'])}{sent}: chains of {chains['low']} / {chains['mean']:.1f} / "
        f"{chains['high']} answers (10th percentile / mean / 90th) of "
        f"{chains['answer_bytes']:,.0f} bytes, from {printable(chains['source'])}"
    ]
    for role, figures in row["per_request"].items():
        model = printable(figures["model"])
        rate = f"{figures['input_tokens_per_byte']:.3f} input tokens per prompt byte"
        rate += f" ({printable(figures['input_basis'])})"
        if role == "embeddings":
            lines.append(f"  embeddings ({model}): {rate}")
            continue
        output, hidden = figures["output_tokens"], figures["reasoning_tokens"]
        lines.append(
            f"  {ROLE_NAMES[role]} ({model}): {figures_text(output)} output tokens a request, "
            f"of which reasoning {figures_text(hidden)} "
            f"({printable(figures['output_basis'])}); {rate}"
        )
    return lines


def render(result: dict[str, Any]) -> str:
    """The estimate as text."""
    lines = [
        f"Estimate for {result['questions']} question line(s) per model, no API call made, "
        f"from {printable(result['distribution'])}; prices: {result['prices']['source']}.",
        "",
        f"{'model':<40} {'':>9} {'input tokens':>14} {'output tokens':>14} "
        f"{'of which reasoning':>18} {'dollars':>12}",
    ]
    for row in result["models"]:
        for name in COLUMNS:
            figures = row[name]
            lines.append(
                f"{printable(row['model']) if name == 'low' else '':<40} {name:>9} "
                f"{figures['input_tokens']:>14,} {figures['output_tokens']:>14,} "
                f"{tokens_text(figures['reasoning_tokens']):>18} "
                f"{dollars_text(figures['dollars']):>12}"
            )
    for row in result["models"]:
        lines += ["", *basis_lines(row)]
    total = result["dollars"]
    lines.append("")
    lines.append(
        f"Run: {dollars_text(total['low'])} to {dollars_text(total['high'])} "
        f"(expected {dollars_text(total['expected'])})"
    )
    if result["unpriced_models"]:
        lines.append(f"No price for: {', '.join(result['unpriced_models'])} (cost unknown)")
    lines.append(f"Assumed: {result['assumptions']}.")
    return "\n".join(lines)


def show(result: dict[str, Any], as_json: bool) -> int:
    """Print the estimate; exit status 0."""
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 0


def handle(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench estimate``."""
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    questions = options.question_set(args).questions
    try:
        settings = Settings(
            model=args.model[0], **{name: getattr(args, name) for name in ESTIMATED}
        )
    except ValidationError as exc:
        raise UsageError(options.validation_line(exc)) from None
    result = plan_estimate(
        args, args.model, questions, settings, args.repeats, options.variants(args)
    )
    return show(result, args.json)


def add_run_cost_flags(p: argparse.ArgumentParser) -> None:
    """Add ``run``'s ``--max-cost`` and ``--dry-run`` (prices and caps are settings)."""
    p.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="stop the run once it has spent this many dollars (all its sessions)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the tokens and dollars this run would cost (as `estimate`) and stop",
    )
    add_answers_from(p)
    add_reasoning_tokens(p)


def dry_run(args: argparse.Namespace, spec: RunSpec) -> int:
    """``run --dry-run``: the estimate of this run; no call, nothing written."""
    settings = Settings(model=spec.models[0], **spec.settings)
    repeats = spec.repeats * len(spec.temperatures)
    result = plan_estimate(args, spec.models, spec.questions, settings, repeats, spec.variants)
    return show(result, False)
