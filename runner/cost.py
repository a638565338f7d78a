"""The run's spending: the budget armed on its usage ledger, and the ledger's totals
written into ``metadata.json`` when a session ends.

The ledger (``RUN_DIR/usage.jsonl``, ``services.usage``) records every request as it is
sent and its usage when the reply comes, across sessions, so a run's figures are what was
actually sent, redone and retried calls included.
"""

from __future__ import annotations

from aidanbench.record import files
from aidanbench.record.metadata import Metadata, RunTotals
from aidanbench.record.usage import summarise_ledger
from aidanbench.runner.spec import RunSpec
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import forget_ledger, ledger


def arm(spec: RunSpec) -> None:
    """Set the run-wide budget on the run's ledger (spend of earlier sessions counts)."""
    if spec.server is None:
        ledger(spec.run_dir / files.LEDGER).max_cost = spec.max_cost


def finish(meta: Metadata, spec: RunSpec) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; ``api_calls``
    and ``tokens`` become what was actually sent, across sessions, redone calls
    included, ``dollars`` the run's cost (null when a model has no price or a reply no
    usage), ``unrecorded`` the requests sent without a recorded reply and
    ``dollars_bound`` what the run can have cost at most (``record.usage``).
    """
    path = spec.run_dir / files.LEDGER
    forget_ledger(path)
    if not path.exists():
        return
    usage = summarise_ledger(path)
    recorded = meta.totals or RunTotals()
    meta.totals = RunTotals.model_validate(
        {
            **recorded.model_dump(exclude_unset=True),
            "recorded_api_calls": recorded.api_calls,
            "recorded_tokens": recorded.tokens,
            "recorded_dollars": recorded.dollars,
            "api_calls": usage.api_calls,
            "unrecorded": usage.unrecorded,
            "tokens": usage.tokens,
            "dollars": usage.dollars,
            "dollars_bound": usage.dollars_bound,
        }
    )
    meta.usage = usage
    for judging in (meta.judging or {}).values():
        judging.served = (usage.served_models or {}).get(f"judge:{judging.judge_model}", {})
    meta.prices = {
        **price_table(spec.prices).describe(),
        "file": None if spec.prices is None else str(spec.prices),
    }
    meta.caps = {
        "max_cost": spec.max_cost,
        "max_question_cost": spec.settings.get("max_question_cost"),
        "max_question_seconds": spec.settings.get("max_question_seconds"),
    }
