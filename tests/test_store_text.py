"""The shared store's JSON holds any string exactly (``runner.campaign.store_dumps``).

PostgreSQL's text cannot hold NUL and jsonb refuses ``\\u0000``; the store's JSON spells NUL
and its own escape character otherwise, and reads them back. The end-to-end round trip
through a real PostgreSQL is ``tests/test_postgres_store.py``
(``test_any_text_round_trips_through_the_store``).
"""

from __future__ import annotations

import json

import pytest

from aidanbench.runner.campaign import ESCAPE, store_dumps, store_loads

TEXTS = [
    "",
    "plain",
    "\x00",
    "a\x00b\x00",
    ESCAPE,
    ESCAPE + "0",
    ESCAPE * 2 + "0",
    "\x00" + ESCAPE + "0\x00",
    "\\u0000 and \\ufdd0, written out",
    "\u2028\u2029\x85\x0c\x0b\x1c\x1d\x1e\r",
    "lone\rCR",
    "\U0001f600 \ufeff \ufffe \uffff",
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_string_reads_back_as_it_was_given(text: str) -> None:
    value = {text: [text, {"answer": text, "n": 1, "x": None, "f": 0.1}]}
    dumped = store_dumps(value)
    assert "\\u0000" not in dumped.replace("\\\\", ""), "jsonb refuses an escaped NUL"
    assert store_loads(dumped) == value
    assert store_loads(dumped.encode()) == value, "as psycopg's binary loader passes it"
    as_jsonb = json.dumps(json.loads(dumped), ensure_ascii=False)  # jsonb's output form
    assert store_loads(as_jsonb.encode()) == value


def test_a_string_without_nul_or_the_escape_is_stored_as_json_writes_it() -> None:
    value = {"answer": "a river\u2028named", "answers": ["x" * 10]}
    assert store_dumps(value) == json.dumps(value)


def test_a_megabyte_answer_reads_back() -> None:
    answer = "word " * 200_000 + "\x00" + ESCAPE
    assert len(answer) > 1_000_000
    assert store_loads(store_dumps({"answer": answer})) == {"answer": answer}
