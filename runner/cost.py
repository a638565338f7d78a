"""The run's spending: the budget armed on its usage ledger, and the ledger's totals
written into ``metadata.json`` when a session ends.

The ledger (``RUN_DIR/usage.jsonl``, ``services.usage``) records every request as it is
sent and its usage when the reply comes, across sessions, so a run's figures are what was
actually sent, redone and retried calls included.
"""

from __future__ import annotations

from typing import Any

from aidanbench.runner.spec import RunSpec
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import LEDGER, forget_ledger, ledger, summarise_ledger


def arm(spec: RunSpec) -> None:
    """Set the run-wide budget on the run's ledger (spend of earlier sessions counts)."""
    if spec.server is None:
        ledger(spec.run_dir / LEDGER).max_cost = spec.max_cost


def finish(meta: dict[str, Any], spec: RunSpec) -> None:
    """Write what was sent and spent into the metadata's ``totals`` and ``usage``.

    ``totals`` keeps the recorded answers' figures under ``recorded_*``; ``api_calls``
    and ``tokens`` become what was actually sent, across sessions, redone calls
    included, ``dollars`` the run's cost (null when a model has no price or a reply no
    usage), ``unrecorded`` the requests sent without a recorded reply and
    ``dollars_bound`` what the run can have cost at most (``services.usage.Totals``).
    """
    path = spec.run_dir / LEDGER
    forget_ledger(path)
    if not path.exists():
        return
    usage = summarise_ledger(path)
    totals = meta.setdefault("totals", {})
    totals["recorded_api_calls"] = totals.get("api_calls")
    totals["recorded_tokens"] = totals.get("tokens")
    totals["recorded_dollars"] = totals.get("dollars")
    totals["api_calls"] = usage["api_calls"]
    totals["unrecorded"] = usage["unrecorded"]
    totals["tokens"] = usage["tokens"]
    totals["dollars"] = usage["dollars"]
    totals["dollars_bound"] = usage["dollars_bound"]
    meta["usage"] = usage
    for record in (meta.get("judging") or {}).values():
        if isinstance(record, dict):
            key = f"judge:{record.get('judge_model')}"
            record["served"] = usage["served_models"].get(key, {})
    meta["prices"] = {
        **price_table(spec.prices).describe(),
        "file": None if spec.prices is None else str(spec.prices),
    }
    meta["caps"] = {
        "max_cost": spec.max_cost,
        "max_question_cost": spec.settings.get("max_question_cost"),
        "max_question_seconds": spec.settings.get("max_question_seconds"),
    }
