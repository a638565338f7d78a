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


UNREADABLE = {
    "coherence_score": [
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
    # every reason names the tag it looked for, whichever tag that is
    "s": [
        (" ", "empty"),
        ("none", "missing"),
        ("<s>1</s><s>2</s>", "multiple"),
        ("<s>101</s>", "out_of_range"),
    ],
}
"""Replies that hold no readable score under each tag, with the reason each is refused."""


@pytest.mark.parametrize(
    ("tag", "reply", "reason"),
    [(tag, reply, reason) for tag, cases in UNREADABLE.items() for reply, reason in cases],
)
def test_unreadable_scores_raise_naming_their_tag(tag: str, reply: str, reason: str) -> None:
    with pytest.raises(ScoreParseError) as caught:
        parse_score(reply, tag)
    assert (caught.value.reason, caught.value.tag) == (reason, tag)
    assert f" <{tag}>: " in str(caught.value)


def test_answer_is_stripped_and_flagged() -> None:
    assert extract_answer("x <answer>  a\n</answer> y") == ("a", True)
    assert extract_answer("  plain reply \n") == ("plain reply", False)


def test_score_parse_error_names_reason_tag_and_reply() -> None:
    with pytest.raises(ScoreParseError) as caught:
        parse_score("<s>x_y</s>", "s")
    err = caught.value
    assert (err.reason, err.tag, err.reply) == ("not_integer", "s", "<s>x_y</s>")
    assert str(err) == "judge reply has not integer <s>: '<s>x_y</s>'"


def test_long_replies_are_cut_at_200_characters_in_the_message() -> None:
    exact = "a" * 200
    with pytest.raises(ScoreParseError) as caught:
        parse_score(exact, "s")
    assert str(caught.value).endswith(f"{exact!r}")
    with pytest.raises(ScoreParseError) as caught:
        parse_score(exact + "b", "s")
    assert str(caught.value).endswith(repr(exact + "…"))
    assert caught.value.reply == exact + "b"


def test_score_bounds_are_inclusive_and_adjustable() -> None:
    assert parse_score("<s>0</s>", "s") == 0
    assert parse_score("<s>100</s>", "s") == 100
    assert parse_score("<s>5</s>", "s", low=5, high=5) == 5
    for value in ("4", "6"):
        with pytest.raises(ScoreParseError, match="out of range"):
            parse_score(f"<s>{value}</s>", "s", low=5, high=5)


def test_score_tag_is_matched_literally_and_across_lines() -> None:
    assert parse_score("<a.b>\n7\n</a.b>", "a.b") == 7
    with pytest.raises(ScoreParseError, match="missing"):
        parse_score("<aXb>7</aXb>", "a.b")
