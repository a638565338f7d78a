"""``aidanbench estimate`` (and ``run --dry-run``): what a planned run would cost.

No API call is made and nothing is written: the prompts are rendered here and priced
with the price table (``--prices`` overrides it) and an answer-count distribution
(``--answers-from`` a run directory or results file; the published 2024 run by
default). See ``aidanbench.analysis.estimate`` for the model and its assumptions.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import dollars_text
from aidanbench.analysis.estimate import Plan, answer_counts, estimate
from aidanbench.cli import question_source
from aidanbench.cli.errors import UsageError, printable
from aidanbench.services.pricing import PriceFileError, price_table


def register(subparsers: Any) -> None:
    """Add ``estimate`` to the command line."""
    p = subparsers.add_parser(
        "estimate",
        help="tokens and dollars a planned run would cost (no API call)",
        description="Estimate the tokens and dollars of a run, as a range, without any "
        "API call. Takes run's model, question and scoring options.",
    )
    p.add_argument("-m", "--model", action="append", required=True, help="model (repeatable)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--questions", type=int, metavar="N", help="the first N bundled questions")
    which.add_argument("--questions-file", type=Path, metavar="PATH", help="your own questions")
    question_source.register(p, which)
    p.add_argument("-r", "--repeats", type=int, default=1, metavar="K")
    p.add_argument("--judge-model", default="o1-mini")
    p.add_argument("--embedding-model", default="text-embedding-3-large")
    p.add_argument("--llm-novelty", action="store_true")
    p.add_argument("--no-pipeline", dest="pipeline", action="store_false")
    p.add_argument("--cot", action="store_true")
    p.add_argument(
        "--judge-samples", type=int, default=1, metavar="K", help="judgments per answer (1)"
    )
    p.add_argument("--prices", type=Path, metavar="FILE", help="JSON price table")
    add_answers_from(p)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.set_defaults(handler=handle)


def add_answers_from(p: argparse.ArgumentParser) -> None:
    """``--answers-from``, shared with ``run --dry-run``."""
    p.add_argument(
        "--answers-from",
        type=Path,
        metavar="PATH",
        help="run directory or results file whose chain lengths and answer length to "
        "assume (default: the bundled published 2024 run)",
    )


def plan_estimate(
    args: argparse.Namespace, models: Sequence[str], questions: Sequence[str], settings: Any
) -> dict[str, Any]:
    """The estimate of ``models`` on ``questions`` under ``settings`` (``UsageError`` on
    a bad prices file or distribution)."""
    try:
        prices = price_table(args.prices)
        counts = answer_counts(args.answers_from)
    except (PriceFileError, ValueError, OSError) as exc:
        raise UsageError(printable(str(exc))) from None
    plan = Plan(
        models=list(models),
        questions=list(questions),
        judge_model=settings["judge_model"],
        embedding_model=settings["embedding_model"],
        repeats=settings.get("repeats", 1),
        llm_novelty=settings["llm_novelty"],
        pipeline=settings["pipeline"],
        cot=settings["cot"],
        judge_samples=settings.get("judge_samples", 1),
    )
    return estimate(plan, counts, prices)


def render(result: dict[str, Any]) -> str:
    """The estimate as text."""
    spread = result["answers_per_question"]
    lines = [
        f"Estimate for {result['questions']} question line(s) per model, no API call made.",
        f"Chains of {spread['low']} / {spread['mean']:.1f} / {spread['high']} answers "
        f"(10th percentile / mean / 90th) and {result['answer_tokens']:.0f}-token answers, "
        f"from {result['distribution']}; prices: {result['prices']['source']}.",
        "",
        f"{'model':<40} {'':>9} {'input tokens':>14} {'output tokens':>14} {'dollars':>12}",
    ]
    for row in result["models"]:
        for name in ("low", "expected", "high"):
            figures = row[name]
            lines.append(
                f"{row['model'] if name == 'low' else '':<40} {name:>9} "
                f"{figures['input_tokens']:>14,} {figures['output_tokens']:>14,} "
                f"{dollars_text(figures['dollars']):>12}"
            )
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
    questions = question_source.resolve_questions(args).questions
    settings = {
        "judge_model": args.judge_model,
        "embedding_model": args.embedding_model,
        "repeats": args.repeats,
        "llm_novelty": args.llm_novelty,
        "pipeline": args.pipeline,
        "cot": args.cot,
        "judge_samples": args.judge_samples,
    }
    return show(plan_estimate(args, args.model, questions, settings), args.json)
