"""What the stub server answers: prompt parsing and the deterministic ``ScriptedBrain``.

Requests arrive concurrently (judge and embedding overlap, questions run in parallel), so every
reply is a pure function of the request content (prompt kind, question, number of previous
answers), never of call order or kept state: a run against the stub is reproducible to the byte.

The parsers read the exact layout of the published ``prompts.json``; a test renders prompts
from that file and parses them back, so any drift shows up there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, Protocol, get_args

import numpy as np

Kind = Literal["generate", "coherence", "similarity", "embed", "other"]
"""What a request is for; ``embed`` is the embeddings endpoint, the rest are chat prompts."""

Ending = Literal["novelty", "coherence", "llm_novelty"]
"""Which check ends a scripted chain: repeated text, gibberish, or a reworded repeat."""

GENERATE_MARKER = "Provide your answer in <answer></answer> XML tags"
COHERENCE_MARKER = "<coherence_score></coherence_score>"
SIMILARITY_MARKER = "<similarity_score></similarity_score>"

INCOHERENT = "INCOHERENT"
"""Scripted answers containing this word get a failing coherence score (5)."""

RESTATEMENT = "again in other words"
"""Scripted answers saying this are reworded repeats that the similarity judge rates 100."""


def classify(prompt: str) -> Kind:
    """Tell a chat prompt's purpose from its content. Judge markers go first: they sit in the
    judge templates' fixed tail, after the judged answer, which could quote anything."""
    if SIMILARITY_MARKER in prompt:
        return "similarity"
    if COHERENCE_MARKER in prompt:
        return "coherence"
    if GENERATE_MARKER in prompt:
        return "generate"
    return "other"


_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_PREVIOUS = re.compile(r"<previous_answer id='\d+'>\n(.*?)\n</previous_answer>", re.DOTALL)
_COHERENCE = re.compile(
    r"Question: <question>(.*?)</question>\nAnswer: <answer>(.*)</answer>\n\nBased on the",
    re.DOTALL,
)
_SIMILARITY = re.compile(
    r"Original Question: <question>(.*?)</question>\n"
    r"First Answer: <answer1>(.*?)</answer1>\n"
    r"Second Answer: <answer2>(.*)</answer2>\n\nBased on the",
    re.DOTALL,
)


def parse_generate_prompt(prompt: str) -> tuple[str, list[str]]:
    """The question and previous answers of a generate prompt (``ValueError`` if none)."""
    found = _QUESTION.search(prompt)
    if found is None:
        raise ValueError("generate prompt without <question> tag")
    return found.group(1), _PREVIOUS.findall(prompt, found.end())


def parse_coherence_prompt(prompt: str) -> tuple[str, str]:
    """Return the question and the answer of a coherence-judge prompt."""
    found = _COHERENCE.search(prompt)
    if found is None:
        raise ValueError("not a coherence-judge prompt")
    return found.group(1), found.group(2)


def parse_similarity_prompt(prompt: str) -> tuple[str, str, str]:
    """Return the question and the two answers of a similarity-judge prompt."""
    found = _SIMILARITY.search(prompt)
    if found is None:
        raise ValueError("not a similarity-judge prompt")
    return found.group(1), found.group(2), found.group(3)


def question_id(question: str) -> str:
    """A short stable hash naming a question inside scripted answers."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()[:8]


def unit_vector(text: str, dim: int = 256) -> list[float]:
    """A unit vector seeded from ``text``'s sha256: identical texts give cosine 1 (novelty 0),
    different ones nearly orthogonal Gaussian directions (novelty near 1)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest(), "big")
    vector = np.random.default_rng(seed).standard_normal(dim)
    normalised: list[float] = (vector / np.linalg.norm(vector)).tolist()
    return normalised


CHARS_PER_TOKEN = 4


def default_tokens(text: str) -> int:
    """A rough token count (``CHARS_PER_TOKEN`` characters each), enough for usage bookkeeping."""
    return len(text) // CHARS_PER_TOKEN + 1


@dataclass(frozen=True)
class Reply:
    """One chat answer; token counts left ``None`` are estimated by the server."""

    text: str
    served_model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Sent as ``usage.prompt_tokens_details.cached_tokens`` when set."""
    reasoning_tokens: int | None = None
    """Sent as ``usage.completion_tokens_details.reasoning_tokens`` when set."""
    cost: float | None = None
    """Sent as ``usage.cost`` (OpenRouter's reported dollars) when set."""
    finish_reason: str = "stop"
    """Sent as the choice's ``finish_reason`` (``length``: cut by the token limit)."""
    reasoning: str | None = None
    """Sent as ``message.reasoning`` (OpenRouter's reasoning text) when set."""
    blocks: tuple[Mapping[str, Any], ...] | None = None
    """Sent as the content instead of ``text`` (unstreamed): Mistral-style thinking blocks."""
    refusal: str | None = None
    """Sent as ``message.refusal`` (OpenAI's refusal text)."""


class Brain(Protocol):
    """The server's answers. Called from many handler threads at once: keep it pure."""

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """Answer a chat completion whose last user message is ``prompt``."""
        ...

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text."""
        ...


_WORD_TEXT = (
    "river lantern orchard compass meadow glacier harbor violin ember quarry falcon "
    "mosaic tundra beacon saffron canyon willow prism anchor thistle comet ledger "
    "marble nectar pylon cedar garnet fjord kettle nomad orbit pepper quill raven "
    "summit tidal umber velvet walnut yonder zephyr basalt cobalt dune fennel grove "
    "hollow ivory juniper kelp lagoon mirth nickel oasis pebble quartz ridge sable "
    "timber utopia vessel wharf xenon yarrow zinc"
)
_WORDS = tuple(_WORD_TEXT.split())


def _words(seed: str, count: int) -> list[str]:
    """``count`` words chosen by hashing ``seed``: varied text, same every time."""
    out: list[str] = []
    block = 0
    while len(out) < count:
        digest = hashlib.sha256(f"{seed}#{block}".encode()).digest()
        out.extend(_WORDS[b % len(_WORDS)] for b in digest)
        block += 1
    return out[:count]


def _pad(text: str, size: int, seed: str) -> str:
    if len(text) >= size:
        return text
    filler = _words(seed + "/pad", (size - len(text)) // 4 + 2)
    parts = [text]
    for word in filler:
        if len(" ".join(parts)) >= size:
            break
        parts.append(word)
    return " ".join(parts)


_IDEA = re.compile(r"Idea (\d+) (?:for |again in other words)")


class ScriptedBrain:
    """The default brain: a planned chain of distinct answers per question, then a failure.

    The k-th answer (k = previous answers + 1) of a question planned at length ``n`` is a
    distinct ``Idea k for <qid>: ...`` while ``k <= n``; then ``ending`` picks the failing
    check: ``novelty`` repeats the first previous answer (novelty 0; with none, ``n == 0``, the
    incoherent reply, the only way a first answer fails), ``coherence`` answers ``INCOHERENT
    gibberish k`` (judge gives 5), ``llm_novelty`` rewords idea 1 (similarity judge gives 100;
    without that check the chain never stops, so cap the run's answers).

    ``no_tag_questions`` are answered without ``<answer>`` tags. ``coherence_scores`` maps answer
    substrings to the judge's score, ``judge_replies`` to a raw reply both judges send verbatim
    (unparseable-reply tests); the first matching substring wins."""

    def __init__(
        self,
        chain_lengths: Mapping[str, int] | None = None,
        default_length: int = 3,
        ending: Mapping[str, Ending] | None = None,
        default_ending: Ending = "novelty",
        answer_size: int = 0,
        *,
        no_tag_questions: Collection[str] = (),
        coherence_scores: Mapping[str, int] | None = None,
        judge_replies: Mapping[str, str] | None = None,
        coherent_score: int = 80,
        dim: int = 256,
    ) -> None:
        endings = {default_ending, *(ending or {}).values()}
        unknown = endings - set(get_args(Ending))
        if unknown:
            raise ValueError(f"unknown chain ending(s) {sorted(unknown)}; use {get_args(Ending)}")
        self.chain_lengths = MappingProxyType(dict(chain_lengths or {}))
        self.default_length = default_length
        self.ending = MappingProxyType(dict(ending or {}))
        self.default_ending = default_ending
        self.answer_size = answer_size
        self.no_tag_questions = frozenset(no_tag_questions)
        self.coherence_scores = MappingProxyType(dict(coherence_scores or {}))
        self.judge_replies = MappingProxyType(dict(judge_replies or {}))
        self.coherent_score = coherent_score
        self.dim = dim

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """Dispatch on the prompt kind; ``other`` prompts get a plain ``OK``."""
        if kind == "generate":
            return Reply(self.generate(*parse_generate_prompt(prompt)))
        if kind == "coherence":
            return Reply(self.judge_coherence(*parse_coherence_prompt(prompt)))
        if kind == "similarity":
            return Reply(self.judge_similarity(*parse_similarity_prompt(prompt)))
        return Reply("OK")

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """One ``unit_vector`` per text; the model name does not change the vectors."""
        return [unit_vector(text, self.dim) for text in texts]

    def answer_text(self, question: str, k: int, previous: Sequence[str] = ()) -> str:
        """The scripted k-th answer (without tags), given the earlier ones."""
        qid = question_id(question)
        if k <= self.chain_lengths.get(question, self.default_length):
            text = f"Idea {k} for {qid}: " + " ".join(_words(f"{question}|{k}", 6))
            return _pad(text, self.answer_size, f"{question}|{k}")
        ending = self.ending.get(question, self.default_ending)
        if ending == "novelty" and previous:
            return previous[0]
        if ending == "llm_novelty":
            text = f"Idea 1 {RESTATEMENT} ({k}) for {qid}: " + " ".join(
                _words(f"{question}|again|{k}", 6)
            )
            return _pad(text, self.answer_size, f"{question}|again|{k}")
        return f"{INCOHERENT} gibberish {k}"

    def generate(self, question: str, previous: Sequence[str]) -> str:
        """The model's full reply to a generate prompt."""
        text = self.answer_text(question, len(previous) + 1, previous)
        if question in self.no_tag_questions:
            return text
        return f"<answer>{text}</answer>"

    def _raw_judge_reply(self, *answers: str) -> str | None:
        for marker, reply in self.judge_replies.items():
            if any(marker in answer for answer in answers):
                return reply
        return None

    def judge_coherence(self, question: str, answer: str) -> str:
        """Scores 80 (``coherent_score``), 5 for ``INCOHERENT``, or the overrides."""
        raw = self._raw_judge_reply(answer)
        if raw is not None:
            return raw
        score = self.coherent_score
        for marker, value in self.coherence_scores.items():
            if marker in answer:
                score = value
                break
        else:
            if INCOHERENT in answer:
                score = 5
        return f"<coherence_score>{score}</coherence_score>"

    def judge_similarity(self, question: str, answer1: str, answer2: str) -> str:
        """100 for identical answers or a reworded repeat of the same idea, else 10."""
        raw = self._raw_judge_reply(answer1, answer2)
        if raw is not None:
            return raw
        score = 100 if _same_idea(answer1, answer2) else 10
        return f"<similarity_score>{score}</similarity_score>"


def _same_idea(a: str, b: str) -> bool:
    """Identical, or one restates (``again in other words``) the idea the other names."""
    a, b = a.strip(), b.strip()
    if a == b:
        return True
    if RESTATEMENT not in a and RESTATEMENT not in b:
        return False
    idea_a, idea_b = _IDEA.match(a), _IDEA.match(b)
    return idea_a is not None and idea_b is not None and idea_a.group(1) == idea_b.group(1)


@dataclass(frozen=True)
class Metered:
    """Fixed usage for every reply of one model: exact token counts, and a cost or none."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost: float | None = None


class MeteredBrain:
    """Another brain's answers, each model named in ``meters`` reporting exactly that usage, so
    a test knows each call's cost to the token and the cent; other models keep the inner's."""

    def __init__(self, inner: Brain, meters: Mapping[str, Metered]) -> None:
        self.inner = inner
        self.meters = MappingProxyType(dict(meters))

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """The inner brain's reply with the model's metered usage."""
        reply = self.inner.chat(kind, model, prompt, body)
        meter = self.meters.get(model)
        if meter is None:
            return reply
        return replace(
            reply,
            prompt_tokens=meter.prompt_tokens,
            completion_tokens=meter.completion_tokens,
            cached_tokens=meter.cached_tokens,
            reasoning_tokens=meter.reasoning_tokens,
            cost=meter.cost,
        )

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """The inner brain's vectors."""
        return self.inner.embed(model, texts)
