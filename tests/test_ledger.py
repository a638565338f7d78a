"""The usage ledger's lines (``record.usage``): written as the services build them, read
back as ``LedgerLine``, and counted alike by the writer's budget and by a later reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aidanbench.record.usage import LedgerLine, UsageLedger, read_ledger
from aidanbench.services.pricing import Price
from aidanbench.services.usage import Usage, usage_line

PRICE = Price(input=2.0, cached_input=0.5, output=8.0)
WHERE = {"thread": "m|q|r=0|t", "node": "judge"}

LINES: dict[str, dict[str, Any]] = {
    "usage, priced": usage_line("judge", "j", Usage(120, 20, 9, 3), PRICE, WHERE, request="a"),
    "usage, provider's cost": usage_line(
        "model", "m@x", Usage(5, None, 7, None, 0.25), None, WHERE, priced_as="m", request="b"
    ),
    "usage, none reported": usage_line(
        "model", "m", Usage(), PRICE, WHERE, served="m-2", request="c", prompt="é" * 40, reply="r"
    ),
    "usage, batch": usage_line(
        "judge", "j", Usage(1, 0, 1, 0), PRICE.batch(), {"thread": None, "node": None}, batch=True
    ),
}


@pytest.mark.parametrize("kind", [*LINES, "sent", "refused", "failed"])
def test_a_written_line_is_what_its_model_would_write(kind: str, tmp_path: Path) -> None:
    """``UsageLedger.write`` writes a line as given, without validating it: what the
    services build must be exactly what ``LedgerLine`` would have written of it."""
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    if kind == "sent":
        ledger.sent("model", "m", WHERE, input_tokens=12, output_tokens=4096, bound_usd=0.5)
    elif kind in ("refused", "failed"):
        ledger.failed("judge", "j", "a", 429 if kind == "refused" else None)
    else:
        ledger.write(LINES[kind])
    ledger.close()
    written = json.loads((tmp_path / "usage.jsonl").read_bytes())
    model = LedgerLine.model_validate(written).model_dump(mode="json", exclude_unset=True)
    assert written == model
    assert all(type(written[k]) is type(model[k]) for k in written if model[k] is not None), (
        "a count written as a float, or a dollar figure as text"
    )


def test_the_budget_counts_what_a_later_session_reads(tmp_path: Path) -> None:
    """What a session's writes add to ``spent`` (a reply's dollars or, without usage, its
    estimate; a failed request at its bound) is what a later session counts reading them."""
    path = tmp_path / "usage.jsonl"
    ledger = UsageLedger(path, max_cost=100.0)
    for kind, line in LINES.items():
        request = ledger.sent("model", "m", WHERE, input_tokens=9, output_tokens=9, bound_usd=0.5)
        if kind != "usage, batch":
            ledger.write({**line, "id": request})
    failed = ledger.sent("judge", "j", WHERE, input_tokens=9, output_tokens=9, bound_usd=0.75)
    ledger.failed("judge", "j", failed, None)
    ledger.close()
    estimated = LINES["usage, none reported"]["estimated_cost_usd"]
    assert estimated is not None and estimated > 0
    spent = LINES["usage, priced"]["cost_usd"] + 0.25 + estimated + 0.75
    assert ledger.spent == pytest.approx(spent)
    assert UsageLedger(path).spent == pytest.approx(spent + 0.5), "the unanswered request too"
    assert len(list(read_ledger(path))) == 9
