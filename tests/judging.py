"""What the judge tests share: the published run judged on another scale by a recorded
judge, that judge unable to score one answer, a reference file of one question, a calibration
file, and a panel's judges at one server each answering by its own rule."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aidanbench import reference
from aidanbench.core.calibration import KIND
from aidanbench.record.results import QuestionResult
from aidanbench.testing import Kind, Reply, parse_coherence_prompt
from aidanbench.testing.brain import Brain
from aidanbench.testing.judges import RecordedJudge, affine
from aidanbench.testing.replay import ReplayBrain


def affine_judge(chains: list[QuestionResult]) -> RecordedJudge:
    """The published run's models and embedder, and a judge scoring
    ``floor(0.5 · o1-mini + 40)``: o1-mini's ranking on another scale."""
    return RecordedJudge(chains, affine(0.5, 40), ReplayBrain(chains))


class Unreadable:
    """The judge of ``inner``, whose reply about ``answer`` holds no score."""

    def __init__(self, inner: Brain, answer: str) -> None:
        self.inner, self.answer = inner, answer

    def chat(self, kind: Kind, model: str, prompt: str, body: Any) -> Reply:
        if kind == "coherence" and parse_coherence_prompt(prompt)[1] == self.answer:
            return Reply("I would rather not say.")
        return self.inner.chat(kind, model, prompt, body)

    def embed(self, model: str, texts: Any) -> list[list[float]]:
        return self.inner.embed(model, texts)


def one_question_reference(path: Path) -> list[str]:
    """Write to ``path`` a published results file holding only the first question of its
    first model (at 0.7); return that question's answers."""
    data = json.loads(reference.published_run().read_text("utf-8"))
    model = next(iter(data["models"]))
    first = dict(list(data["models"][model]["0.7"].items())[:1])
    path.write_text(json.dumps({"models": {model: {"0.7": first}}}), "utf-8")
    return [a["answer"] for a in next(iter(first.values()))]


def write_calibration(
    path: Path, judge: str, value: float, interval: tuple[float, float] | None = None
) -> Path:
    """A judge calibration file as ``calibrate --judge-model`` writes one (the fields a run
    reads), calibrating ``judge`` at ``value``, every cut in ``interval`` deciding alike."""
    low, high = interval or (math.floor(value), math.floor(value) + 1)
    judge_fields = {
        "model": judge,
        "threshold": value,
        "setting_value": value,
        "equivalent_interval": [low, high],
        "note": None,
    }
    document = {"kind": KIND, "reference": "reference.json", "judge": judge_fields}
    path.write_text(json.dumps(document), "utf-8")
    return path


class ByJudge:
    """``inner``'s answers, each judge of ``judges`` (by the model asked) answering its own
    coherence prompts: a panel's judges at one server, each by its own rule."""

    def __init__(self, inner: Brain, judges: Mapping[str, Brain]) -> None:
        self.inner, self.judges = inner, dict(judges)

    def chat(self, kind: Kind, model: str, prompt: str, body: Any) -> Reply:
        if kind == "coherence" and model in self.judges:
            return self.judges[model].chat(kind, model, prompt, body)
        return self.inner.chat(kind, model, prompt, body)

    def embed(self, model: str, texts: Any) -> list[list[float]]:
        return self.inner.embed(model, texts)


class Saying:
    """A judge replying ``rule(answer)`` to the coherence prompt about ``answer``."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        self.rule = rule

    def chat(self, kind: Kind, model: str, prompt: str, body: Any) -> Reply:
        return Reply(self.rule(parse_coherence_prompt(prompt)[1]))

    def embed(self, model: str, texts: Any) -> list[list[float]]:
        raise AssertionError("a judge embeds nothing")
