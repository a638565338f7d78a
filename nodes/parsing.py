"""Reading model replies: the answer tag and the judges' score tags.

A judge reply that cannot be read is an error, never a score (``nodes.judge_calls`` asks
again); other ports score it as 0, which silently shortens chains.
"""

from __future__ import annotations

import re

from aidanbench.core.errors import ScoreParseError

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(reply: str) -> tuple[str, bool]:
    """The text of the last ``<answer>`` tag and whether the tag was used. Without a complete
    tag the whole reply is the answer, as in the original benchmark."""
    found = _ANSWER.findall(reply)
    if found:
        return found[-1].strip(), True
    return reply.strip(), False


_INTEGER = re.compile(r"\s*[+]?(\d+)\s*")


def parse_score(reply: str, tag: str, *, low: int = 0, high: int = 100) -> int:
    """The integer inside the single ``<tag>`` of a judge reply. Raises ``ScoreParseError``
    for an empty reply, no tag or several, or a value not a whole number in ``[low, high]``."""
    if not reply.strip():
        raise ScoreParseError("empty", tag, reply)
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", reply, re.DOTALL)
    if not found:
        raise ScoreParseError("missing", tag, reply)
    if len(found) > 1:
        raise ScoreParseError("multiple", tag, reply)
    match = _INTEGER.fullmatch(found[0])
    if match is None:
        raise ScoreParseError("not_integer", tag, reply)
    value = int(match.group(1))
    if not low <= value <= high:
        raise ScoreParseError("out_of_range", tag, reply)
    return value
