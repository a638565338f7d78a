"""The scores an answer gets, each declared once (``Score``) in one table (``SCORES``).

The pass rule, the graph, its routing, ``decide``, the recorded thresholds and the views
read the table, so a new score is a node and one entry (docs/development.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Score:
    """One score of an answer, as every layer uses it."""

    name: str
    """The answer record's field, the column, and the stop reason when it fails."""
    node: str
    """The graph node that computes it."""
    cost_role: str | None
    """The key of ``AnswerRecord.calls`` its API calls are counted under; None: it makes
    none (computed here), and answers record no calls for it."""
    threshold: float
    """Its threshold's default: an answer passes when the score is strictly above it."""
    setting: str | None = None
    """The ``Settings`` attribute holding its threshold; None: always ``threshold``."""
    switch: str | None = None
    """The ``Settings`` flag that turns it on; None: always on."""
    function: str = ""
    """The node's function, ``module:attribute`` (as ``langgraph.json`` names a graph),
    which the graph builder imports; empty: ``aidanbench.nodes.<node>:<node>``."""
    outcome_key: str = ""
    """The ``QuestionState`` key the node writes its ``ScoreOutcome`` to; empty:
    ``<name>_result``."""
    label: str = ""
    """Its heading in tables, plots and messages; empty: its name."""
    short: str = ""
    """Its narrow heading (the summary's mean column); empty: ``label``."""
    scale: float = 1.0
    """Its largest value (1 for a share, 100 for the judge's 0-100): charts' axis, and the
    digits a mean is shown with (one for 100, three for 1)."""
    original: str | None = None
    """Its field in the original AidanBench results files (``coherence_score``…); None: that
    schema has none, and the score is recorded only on answers that measured it. A score of
    the original schema is always a field of the answer record (null when off), as it was."""
    metric: str = ""
    """The verifiers environments' name of its mean over valid answers; empty:
    ``avg_<name>``."""

    def __post_init__(self) -> None:
        node = self.function or f"aidanbench.nodes.{self.node}:{self.node}"
        object.__setattr__(self, "function", node)
        object.__setattr__(self, "outcome_key", self.outcome_key or f"{self.name}_result")
        object.__setattr__(self, "label", self.label or self.name)
        object.__setattr__(self, "short", self.short or self.label)
        object.__setattr__(self, "metric", self.metric or f"avg_{self.name}")

    @property
    def mean(self) -> str:
        """Its mean over a chain's valid answers, as outputs and summaries name it."""
        return f"mean_{self.name}"

    @property
    def measured_key(self) -> str:
        """Its threshold's key in a thread's record of what it measures with
        (``core.state.Measured``)."""
        return f"{self.name}_threshold"

    @property
    def flag(self) -> str:
        """The option that gives its threshold (``rescore``, and ``run`` when it has a
        setting of that name)."""
        return "--" + self.measured_key.replace("_", "-")

    @property
    def digits(self) -> str:
        """The format a value or a mean of it is shown with."""
        return ".1f" if self.scale > 1 else ".3f"

    @property
    def always_recorded(self) -> bool:
        """Whether every answer record holds it (null when off): the original schema's
        scores do, so records keep the shape they always had."""
        return self.original is not None

    def on(self, settings: Any) -> bool:
        """Whether a turn under ``settings`` computes this score."""
        return self.switch is None or bool(getattr(settings, self.switch))

    def limit(self, settings: Any) -> float | None:
        """Its threshold under ``settings``; None when it is off."""
        if not self.on(settings):
            return None
        return self.threshold if self.setting is None else float(getattr(settings, self.setting))

    def value(self, answer: Any) -> float | None:
        """This score of an answer (a state record or a record line, whose extras hold a
        score it does not declare); None when it has none."""
        if isinstance(answer, Mapping):
            return answer.get(self.name)
        return getattr(answer, self.name, None)


COHERENCE_THRESHOLD = 15.0
"""The published coherence threshold, on the scale of the benchmark's judge (o1-mini)."""

NOVELTY_THRESHOLD = 0.15
"""The published novelty threshold, on text-embedding-3-large cosines; LLM novelty's too."""

LEXICAL_NOVELTY_THRESHOLD = 0.10
"""Lexical novelty's default threshold (``nodes.lexical_novelty``): not the benchmark's."""

SCORES: tuple[Score, ...] = (
    Score(
        name="coherence",
        node="judge",
        cost_role="judge",
        threshold=COHERENCE_THRESHOLD,
        setting="coherence_threshold",
        label="coherence",
        short="coh.",
        scale=100.0,
        original="coherence_score",
    ),
    Score(
        name="novelty",
        node="embed_novelty",
        cost_role="embed",
        threshold=NOVELTY_THRESHOLD,
        setting="resolved_novelty_threshold",
        label="embedding novelty",
        short="nov.",
        original="embedding_dissimilarity_score",
        metric="avg_embedding_novelty",
    ),
    Score(
        name="llm_novelty",
        node="llm_novelty",
        cost_role="similarity",
        threshold=NOVELTY_THRESHOLD,
        setting="llm_novelty_threshold",
        switch="llm_novelty",
        outcome_key="similarity_result",
        label="LLM novelty",
        short="LLM nov.",
        original="llm_dissimilarity_score",
    ),
    Score(
        name="lexical_novelty",
        node="lexical_novelty",
        cost_role=None,
        threshold=LEXICAL_NOVELTY_THRESHOLD,
        setting="lexical_novelty_threshold",
        switch="lexical_novelty",
        label="lexical novelty",
        short="lex. nov.",
    ),
)
"""Every score, in the order the pass rule checks them (the first failed is the stop
reason) and records them."""


def declared() -> tuple[Score, ...]:
    """``SCORES``, read when asked (so every reader sees the same table)."""
    return SCORES


def scoring(settings: Any) -> tuple[Score, ...]:
    """The scores a turn under ``settings`` computes."""
    return tuple(score for score in SCORES if score.on(settings))


def by_key(outcome_key: str) -> Score:
    """The score whose node writes ``outcome_key``."""
    return next(score for score in SCORES if score.outcome_key == outcome_key)


def named(name: str) -> Score | None:
    """The declared score called ``name``; None when the table has none."""
    return next((score for score in SCORES if score.name == name), None)
