"""The benchmark's prompt texts, filled by name.

The texts live in ``prompts.json`` (``aidanbench.reference``) exactly as the published
AidanBench has them, and scores are only comparable with published ones when they are sent
byte for byte. Nothing here rewrites them: the list of previous answers is cut out of the
reference ``generate_with_previous`` text itself, so the rendering cannot drift from it.

Placeholders are filled in a single pass, so an answer that happens to contain
``{question}`` or ``{prev1}`` is inserted literally and never re-expanded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from aidanbench import reference

_PLACEHOLDER = re.compile(r"\{(question|answer|answer1|answer2|prev\d+|i)\}")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{name}`` placeholders in one pass; unknown names are left as they are."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@cache
def prompt_texts() -> dict[str, str]:
    """The reference templates, keyed as in ``prompts.json``."""
    texts: dict[str, str] = json.loads(reference.read_text(reference.PROMPTS))
    return texts


@cache
def prompts_sha256() -> str:
    """sha256 of the templates (sorted JSON): what metadata and each thread record."""
    return hashlib.sha256(json.dumps(prompt_texts(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _PreviousAnswersLayout:
    """How the reference prompt lists earlier answers, read off ``generate_with_previous``."""

    preamble: str
    item_head: str
    """An item up to its number: ``<previous_answer id='``."""
    item_middle: str
    """Between the number and the answer."""
    item_tail: str
    """After the answer: ``</previous_answer>``."""
    separator: str
    closing: str

    def items(self, previous: Sequence[str]) -> str:
        """The listed answers, numbered from 1. The item is kept pre-split at its two
        placeholders: the prompt is rebuilt every turn from every earlier answer, so a regex
        pass per answer would make long chains pay for their length on every turn."""
        head, middle, tail = self.item_head, self.item_middle, self.item_tail
        return self.separator.join(
            f"{head}{i}{middle}{answer}{tail}" for i, answer in enumerate(previous, start=1)
        )


@cache
def _previous_layout() -> _PreviousAnswersLayout:
    texts = prompt_texts()
    head, full = texts["generate_first"], texts["generate_with_previous"]
    if not full.startswith(head):
        raise ValueError("generate_with_previous does not extend generate_first")
    rest = full[len(head) :]
    first_open = rest.index("<previous_answer id='1'>")
    first_close = rest.index("</previous_answer>", first_open) + len("</previous_answer>")
    second_open = rest.index("<previous_answer id='2'>")
    second_close = rest.index("</previous_answer>", second_open) + len("</previous_answer>")
    item = rest[first_open:first_close].replace("id='1'", "id='{i}'").replace("{prev1}", "{answer}")
    second = rest[second_open:second_close].replace("id='2'", "id='{i}'")
    if second.replace("{prev2}", "{answer}") != item:
        raise ValueError("the two previous-answer items in prompts.json differ in shape")
    if (
        item.count("{i}") != 1
        or item.count("{answer}") != 1
        or item.index("{i}") > item.index("{answer}")
    ):
        raise ValueError("a previous-answer item must hold {i}, then {answer}, once each")
    item_head, after_number = item.split("{i}")
    item_middle, item_tail = after_number.split("{answer}")
    return _PreviousAnswersLayout(
        preamble=rest[:first_open],
        item_head=item_head,
        item_middle=item_middle,
        item_tail=item_tail,
        separator=rest[first_close:second_open],
        closing=rest[second_close:],
    )


def render_generate(question: str, previous: Sequence[str], *, cot: bool = False) -> str:
    """The prompt asking for a new answer, listing every earlier (valid) answer."""
    texts = prompt_texts()
    head = fill(texts["generate_cot_first" if cot else "generate_first"], {"question": question})
    if not previous:
        return head
    layout = _previous_layout()
    return head + layout.preamble + layout.items(previous) + layout.closing


def render_coherence(question: str, answer: str) -> str:
    """The judge prompt asking for a 0-100 coherence and plausibility score."""
    return fill(prompt_texts()["judge_coherence"], {"question": question, "answer": answer})


def render_similarity(question: str, answer1: str, answer2: str) -> str:
    """The judge prompt asking how similar two answers to the question are (0-100)."""
    return fill(
        prompt_texts()["judge_similarity"],
        {"question": question, "answer1": answer1, "answer2": answer2},
    )
