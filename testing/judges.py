"""Stand-in successor judges for the published run: scores that follow the recorded judge's.

``RecordedJudge`` answers a coherence prompt about a recorded answer with a ``Rule`` of its
recorded score; every other request goes to ``inner``. Noise needs different replies to one
prompt: the n-th request for a prompt gets the n-th draw, a pure function of (prompt, n). A run
asks an answer's first judgment alone (``nodes.judge_calls.sample_judgments``), so the first
reply holds whatever the concurrency (the others, asked together, may swap).

``NoiseShape`` is a judge's noise defined once for both uses: the rule the server judges by,
and the same distribution drawn for many answers at once, to simulate re-judgings
(``bench.judge_coverage``). ``NOISE_SHAPES`` names the shapes the coverage benchmark measures.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aidanbench.nodes.judge_calls import neutralise
from aidanbench.record.results import QuestionResult
from aidanbench.testing.brain import Brain, Kind, Reply, parse_coherence_prompt
from aidanbench.testing.published import published_chains

Rule = Callable[[float, str, int], int]
"""A judgment from the recorded score, the prompt and which request for it this is (1…)."""


def affine(slope: float, intercept: float) -> Rule:
    """``floor(slope · recorded + intercept)``, clipped to 0-100, every time."""

    def rule(recorded: float, prompt: str, n: int) -> int:
        return max(0, min(100, math.floor(slope * recorded + intercept)))

    return rule


def noisy(width: float) -> Rule:
    """The recorded score plus noise uniform in ±``width``, rounded and clipped to 0-100."""

    def rule(recorded: float, prompt: str, n: int) -> int:
        digest = hashlib.sha256(f"{n}|{prompt}".encode()).digest()
        unit = int.from_bytes(digest[:8], "big") / 2**64
        return max(0, min(100, round(recorded + (2 * unit - 1) * width)))

    return rule


Values = Callable[[np.ndarray, Sequence[str], Sequence[str], np.random.Generator, int], np.ndarray]
"""``count`` judgments of each answer before rounding, (count x answers), from the recorded
scores, the answers (as the coherence prompt holds them) and their questions."""


@dataclass(frozen=True)
class NoiseShape:
    """A judge's noise, one definition for the server's judge and for simulated re-judgings:
    judgments are ``values`` rounded and clipped to 0-100, as a judge's reply is."""

    name: str
    text: str
    """The shape in words."""
    values: Values

    def sample(
        self,
        recorded: np.ndarray,
        answers: Sequence[str],
        questions: Sequence[str],
        rng: np.random.Generator,
        count: int,
    ) -> np.ndarray:
        """``count`` judgments of each answer: (count x answers)."""
        drawn = self.values(np.asarray(recorded, dtype=np.float64), answers, questions, rng, count)
        return np.clip(np.rint(drawn), 0, 100)

    def rule(self, seed: int) -> Rule:
        """The judge of seed ``seed``: the n-th request for a prompt gets the n-th draw of
        (seed, prompt)."""

        def rule(recorded: float, prompt: str, n: int) -> int:
            question, answer = parse_coherence_prompt(prompt)
            digest = hashlib.sha256(f"{seed}|{n}|{prompt}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
            return int(self.sample(np.asarray([recorded]), [answer], [question], rng, 1)[0, 0])

        return rule


SLOPE = 0.7
"""The stand-in judges' scale: o1-mini's 15 falls at 10.5 on it."""


def _unit(text: str) -> float:
    """A number in [0, 1) fixed by ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def gaussian(sd: float, inverted: float) -> NoiseShape:
    """``SLOPE`` × the recorded score plus Gaussian noise of ``sd``, turned over (``100 - x``)
    with probability ``inverted``: the same for every answer."""

    def values(
        recorded: np.ndarray,
        answers: Sequence[str],
        questions: Sequence[str],
        rng: np.random.Generator,
        count: int,
    ) -> np.ndarray:
        drawn = SLOPE * recorded + rng.normal(0.0, sd, size=(count, len(recorded)))
        return np.where(rng.random(drawn.shape) < inverted, 100 - drawn, drawn)

    return NoiseShape(
        f"gaussian-{sd:g}-{inverted:g}", f"sd {sd:g}, {inverted:.0%} turned over", values
    )


def _by_length(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    sd = 2 + np.asarray([len(a) for a in answers]) / 25
    return SLOPE * recorded + rng.normal(size=(count, len(recorded))) * sd


def _skewed(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    drop = 6 * (rng.lognormal(0.0, 1.0, size=(count, len(recorded))) - math.exp(0.5))
    return SLOPE * recorded - drop


def _heavy(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    return SLOPE * recorded + 5 * rng.standard_t(2, size=(count, len(recorded)))


def _harsh(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    harsh = 0.01 + 0.08 * (np.asarray([len(a) for a in answers]) > 400)
    shape = (count, len(recorded))
    usual = SLOPE * recorded + rng.normal(0.0, 4.0, size=shape)
    return np.where(rng.random(shape) < harsh, rng.uniform(0, 10, size=shape), usual)


def _by_topic(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    sd = np.asarray([2 + 23 * _unit(f"topic|{q}") for q in questions])
    return SLOPE * recorded + rng.normal(size=(count, len(recorded))) * sd


@functools.cache
def _places() -> dict[tuple[str, str], int]:
    """Each published answer's place in its chain (0: the first), by its question and its
    answer as the coherence prompt holds it; the earliest where chains share one."""
    found: dict[tuple[str, str], int] = {}
    for chain in published_chains():
        for place, row in enumerate(chain.answers):
            key = (chain.question, neutralise(row.answer)[0])
            found[key] = min(place, found.get(key, place))
    return found


def _harsh_first(
    recorded: np.ndarray,
    answers: Sequence[str],
    questions: Sequence[str],
    rng: np.random.Generator,
    count: int,
) -> np.ndarray:
    places = _places()
    first = np.asarray([places.get(key, 2) < 2 for key in zip(questions, answers, strict=True)])
    shape = (count, len(recorded))
    usual = SLOPE * recorded + rng.normal(0.0, 4.0, size=shape)
    return np.where(rng.random(shape) < 0.04 * first, rng.uniform(0, 10, size=shape), usual)


NOISE_SHAPES = {
    shape.name: shape
    for shape in (
        gaussian(12, 0.15),
        NoiseShape("length", "Gaussian, sd 2 + the answer's characters / 25", _by_length),
        NoiseShape("skewed", "6 × (e^(1/2) - lognormal(0, 1)): rare deep drops", _skewed),
        NoiseShape("heavy", "5 × Student's t with 2 degrees of freedom", _heavy),
        NoiseShape(
            "harsh",
            "sd 4, and 0-10 in 1% of judgments (9% for answers over 400 characters)",
            _harsh,
        ),
        NoiseShape("topic", "Gaussian, sd 2-25 fixed by the question", _by_topic),
        NoiseShape(
            "harsh-first",
            "sd 4, and 0-10 in 4% of judgments of each chain's first two answers",
            _harsh_first,
        ),
    )
}
"""The shapes ``bench.judge_coverage`` measures, each around ``SLOPE`` × o1-mini's score: the
benchmark's own noise model (the same for every answer, sometimes turned over), and noise
that depends on the answer, is skewed, or heavy-tailed. ``harsh-first`` is built to defeat
the interval: rare failures only where a chain's failure costs most, at answers whose
judgments look like every other's (the published chains tell which they are)."""


class RecordedJudge:
    """A judge scoring a recorded run's answers by ``rule``; everything else to ``inner``.
    ``served_model`` makes every judgment claim that model, as a substituting provider would."""

    def __init__(
        self,
        chains: Sequence[QuestionResult],
        rule: Rule,
        inner: Brain,
        *,
        served_model: str | None = None,
        unrecorded: int = 80,
    ) -> None:
        self.rule = rule
        self.inner = inner
        self.served_model = served_model
        self.unrecorded = unrecorded
        """The score of an answer the recording does not have (generated past it)."""
        self.recorded: dict[tuple[str, str], float] = {}
        for chain in chains:
            for row in chain.answers:
                if row.coherence is not None:
                    key = (chain.question, neutralise(row.answer)[0])
                    self.recorded.setdefault(key, row.coherence)
        self._asked: dict[str, int] = {}
        self._lock = threading.Lock()

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        """A coherence judgment by the rule, or ``inner``'s answer."""
        if kind != "coherence":
            return self.inner.chat(kind, model, prompt, body)
        with self._lock:
            n = self._asked[prompt] = self._asked.get(prompt, 0) + 1
        recorded = self.recorded.get(parse_coherence_prompt(prompt))
        score = self.unrecorded if recorded is None else self.rule(recorded, prompt, n)
        return Reply(f"<coherence_score>{score}</coherence_score>", served_model=self.served_model)

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """``inner``'s vectors."""
        return self.inner.embed(model, texts)


def prompt_keys(chains: Sequence[QuestionResult]) -> dict[tuple[str, str], int]:
    """Each distinct (question, answer as the coherence prompt holds it) of ``chains``, numbered
    in order of first appearance: one prompt is judged once per re-judging."""
    keys: dict[tuple[str, str], int] = {}
    for chain in chains:
        for row in chain.answers:
            keys.setdefault((chain.question, neutralise(row.answer)[0]), len(keys))
    return keys


def walked_scores(
    chains: Sequence[QuestionResult], judged: np.ndarray, threshold: float, novelty: float
) -> dict[str, np.ndarray]:
    """Each model's score in re-judgings giving each prompt (``prompt_keys``) the judgments
    in ``judged`` (re-judgings x prompts), walked as ``rescore`` walks them: an answer counts
    until the first one of its chain judged at or below ``threshold`` or of recorded novelty
    at or below ``novelty``; scores per repeat."""
    keys = prompt_keys(chains)
    totals: dict[str, np.ndarray] = {}
    repeats: dict[str, set[int]] = {}
    for chain in chains:
        at = [keys[(chain.question, neutralise(row.answer)[0])] for row in chain.answers]
        novel = np.asarray([r.novelty is not None and r.novelty > novelty for r in chain.answers])
        passes = (judged[:, at] > threshold) & novel[None, :]
        failed = ~passes
        walked = np.where(failed.any(axis=1), failed.argmax(axis=1), len(at))
        totals[chain.model] = totals.get(chain.model, np.zeros(len(judged))) + walked
        repeats.setdefault(chain.model, set()).add(chain.repeat)
    return {model: total / len(repeats[model]) for model, total in totals.items()}


def rejudged_scores(
    chains: Sequence[QuestionResult],
    shape: NoiseShape,
    threshold: float,
    novelty: float,
    rng: np.random.Generator,
    count: int,
) -> dict[str, np.ndarray]:
    """Each model's score in ``count`` fresh re-judgings of ``chains`` by ``shape``'s judge
    (``walked_scores``)."""
    keys = prompt_keys(chains)
    recorded = prompt_scores(chains)
    judged = shape.sample(recorded, [a for _, a in keys], [q for q, _ in keys], rng, count)
    return walked_scores(chains, judged, threshold, novelty)


def prompt_scores(chains: Sequence[QuestionResult]) -> np.ndarray:
    """The recorded score ``RecordedJudge`` follows for each prompt (``prompt_keys``): its
    first answer's; ``ValueError`` for an answer with none."""
    found: dict[tuple[str, str], float] = {}
    for chain in chains:
        for row in chain.answers:
            if row.coherence is None:
                raise ValueError(f"an answer to {chain.question!r} has no recorded score")
            found.setdefault((chain.question, neutralise(row.answer)[0]), row.coherence)
    return np.asarray(list(found.values()))
