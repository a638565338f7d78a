"""Reading answers and judge scores: an unreadable reply is an error, never a score."""

from __future__ import annotations

import pytest

from aidanbench.nodes.parsing import ScoreParseError, extract_answer, parse_score


def test_answer_from_tag() -> None:
    assert extract_answer("thinking…\n<answer> Ships </answer>") == ("Ships", True)


def test_last_answer_tag_wins() -> None:
    assert extract_answer("<answer>draft</answer> then <answer>final</answer>") == ("final", True)


def test_multiline_answer() -> None:
    assert extract_answer("<answer>line 1\nline 2</answer>") == ("line 1\nline 2", True)


def test_missing_tag_falls_back_to_reply() -> None:
    assert extract_answer("  just text \n") == ("just text", False)


def test_unclosed_tag_is_no_tag() -> None:
    assert extract_answer("<answer>cut off by max_tokens") == (
        "<answer>cut off by max_tokens",
        False,
    )


def test_empty_reply() -> None:
    assert extract_answer("") == ("", False)


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ("<coherence_score>75</coherence_score>", 75),
        ("Sure.\n<coherence_score> 0 </coherence_score>", 0),
        ("<coherence_score>100</coherence_score>", 100),
        ("<coherence_score>+15</coherence_score>", 15),
    ],
)
def test_scores(reply: str, value: int) -> None:
    assert parse_score(reply, "coherence_score") == value


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("I rate it 80.", "missing"),
        ("<similarity_score>80</similarity_score>", "missing"),
        ("<coherence_score>80</coherence_score><coherence_score>90</coherence_score>", "multiple"),
        ("<coherence_score>eighty</coherence_score>", "not_integer"),
        ("<coherence_score>75.5</coherence_score>", "not_integer"),
        ("<coherence_score>-5</coherence_score>", "not_integer"),
        ("<coherence_score></coherence_score>", "not_integer"),
        ("<coherence_score>101</coherence_score>", "out_of_range"),
        ("<coherence_score>1000000</coherence_score>", "out_of_range"),
    ],
)
def test_unreadable_scores_raise(reply: str, reason: str) -> None:
    with pytest.raises(ScoreParseError) as caught:
        parse_score(reply, "coherence_score")
    assert caught.value.reason == reason
