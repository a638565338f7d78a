"""State of the per-question graph, and its public input and output schemas.

Embedding vectors live in a content-addressed cache (``services.cache``), not here: every
checkpoint would carry every vector. ``answers`` is a ``DeltaChannel`` (see
``ANSWER_SNAPSHOT_EVERY``), so checkpoint storage grows linearly with the answers.

Work in flight is kept as *outcomes* keyed by the candidate's index: each scoring branch
writes its own key (so parallel branches never collide), holding a value or an ``error``.
``decide`` combines them; after an error they stay, and invoking the thread again re-runs
only the missing or failed parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from langgraph.channels.delta import DeltaChannel
from typing_extensions import TypedDict

from aidanbench.core.errors import ErrorInfo
from aidanbench.core.schema_docs import documented
from aidanbench.core.vocabulary import StopReason


@documented
class CallStats(TypedDict):
    """What one role's API calls for one answer cost."""

    served_model: str | None
    """Model id the provider reported serving (may differ from the one asked for)."""
    latency_s: float
    """Wall seconds spent in this role's calls for the answer (0 when cached)."""
    input_tokens: int | None
    """Prompt tokens reported by the provider, summed over calls; None when a call reported
    none (unknown, never 0), and for embeddings, whose requests serve many answers."""
    output_tokens: int | None
    """Completion tokens reported by the provider, summed over calls; None as above."""
    calls: int
    """Requests made (judge re-asks and per-pair similarity calls count; cache hits do not)."""
    cached_input_tokens: NotRequired[int | None]
    """Of ``input_tokens``, those read from the provider's prompt cache
    (``prompt_tokens_details.cached_tokens``); None when a call did not report it (unknown,
    never 0); absent in older records."""
    reasoning_tokens: NotRequired[int | None]
    """Of ``output_tokens``, those spent reasoning
    (``completion_tokens_details.reasoning_tokens``); None when a call did not report it."""
    cost_usd: NotRequired[float | None]
    """Dollars: the provider's reported cost where it gave one, else the price table's;
    None when a call's model has no price (unknown, never 0)."""
    provider_cost_calls: NotRequired[int]
    """How many of ``calls`` carried the provider's own cost (``usage.cost``)."""
    usage_missing: NotRequired[int]
    """How many of ``calls`` reported no token counts (their tokens and dollars are
    unknown); absent when every call reported them."""
    estimated_cost_usd: NotRequired[float | None]
    """Present with ``usage_missing``: dollars with those calls' tokens estimated from above
    (``services.usage``), which the per-question dollar cap counts; None without a price."""
    unreadable: NotRequired[dict[str, int]]
    """Judge replies without a readable score, each asked again, by ``ScoreParseError.reason``
    (a refusal counts as ``missing``); absent when every reply could be read."""


class PanelJudgment(TypedDict):
    """One judge's coherence judgment of an answer, on a judge panel: each judge is its own
    record (its score, decision, served model, refusals and dollars), never another's."""

    judge: str
    """The judge model."""
    score: float | None
    """Its deciding judgment; None when it gave none (``error``) and the others' majority
    decided without it."""
    threshold: float
    """Its coherence threshold (on its own scale)."""
    passes: bool | None
    """``score`` > ``threshold``; None when it gave no score."""
    samples: NotRequired[list[float]]
    """Its every judgment when several were asked (the deciding one first)."""
    cost_usd: NotRequired[float | None]
    """What its judgments of the answer cost (None: unknown); ``calls.judge`` sums them all."""
    served_model: NotRequired[str | None]
    """The model its provider said served its judgments (None: not named)."""
    unreadable: NotRequired[dict[str, int]]
    """Its replies without a readable score, each asked again, by why (as
    ``CallStats.unreadable``); absent when it had none."""
    error: NotRequired[ErrorInfo]
    """Why it gave no score (its refusal in every try, its time-out…), naming its host."""


@documented
class Candidate(TypedDict):
    """A generated answer not yet scored (or the generation's error)."""

    index: int
    """1-based position of the answer in the question's chain."""
    answer: NotRequired[str]
    """Text of the last ``<answer>`` tag, or the whole reply without one."""
    raw_reply: NotRequired[str]
    """The model's reply as received."""
    used_answer_tag: NotRequired[bool]
    """Whether the reply used the ``<answer>`` tag (format adherence)."""
    call: NotRequired[CallStats]
    """Cost of the generation."""
    finish_reason: NotRequired[str | None]
    """Why the provider stopped generating (``stop``, ``length``…); None when it said none."""
    reasoning_tokens: NotRequired[int | None]
    """Hidden reasoning tokens of the generation; None when the provider did not say."""
    error: NotRequired[ErrorInfo]
    """Set instead of the fields above when generation failed."""


@documented
class ScoreOutcome(TypedDict):
    """One scoring branch's result for the candidate with ``index``."""

    index: int
    """Index of the candidate scored; a mismatch means the outcome is stale."""
    value: NotRequired[float]
    """Coherence (0-100), embedding novelty or LLM novelty (0-1); absent on an error, and
    for a panel whose first judge gave no score (its ``panel`` decides)."""
    call: NotRequired[CallStats]
    """Cost of the scoring calls."""
    flags: NotRequired[list[str]]
    """Notes on the scoring, e.g. ``judge_markup_neutralised``."""
    samples: NotRequired[list[float]]
    """Every coherence judgment when several were asked, the deciding one (``value``) first."""
    panel: NotRequired[list[PanelJudgment]]
    """A judge panel's judgments, the first judge's first: their majority decides coherence."""
    error: NotRequired[ErrorInfo]
    """Set instead of ``value`` when scoring failed."""


@documented
class AnswerRecord(TypedDict):
    """One scored answer, valid or the question's terminal one."""

    index: int
    """1-based position in the chain (``answer_num`` in the original schema)."""
    answer: str
    """The answer text that was judged and embedded."""
    raw_reply: str
    """The model's full reply."""
    used_answer_tag: bool | None
    """Whether the reply used the ``<answer>`` tag; None when the reply is not known (an
    answer carried from an original-schema results file by ``rescore --into``)."""
    coherence: float | None
    """Judge's coherence score, 0-100 (a panel's first judge's); None only when that judge
    gave no score and the panel's other judges decided by majority without it."""
    novelty: float
    """1 − max cosine similarity to earlier valid answers (1.0 for the first)."""
    llm_novelty: float | None
    """1 − max judge similarity/100 to earlier answers; None when that judge is off."""
    valid: bool
    """Passed every threshold (strictly greater); only valid answers are counted."""
    stop_reason: StopReason | None
    """For the failing answer, the criterion it failed; None for valid answers."""
    elapsed_s: float
    """Seconds from the question's start to this answer's decision (cumulative)."""
    calls: dict[str, CallStats]
    """Cost per role: ``generate``, ``judge``, ``embed`` and ``similarity`` when on."""
    flags: list[str]
    """Notes such as ``judge_markup_neutralised`` (answer tried to speak to the judge)."""
    finish_reason: NotRequired[str | None]
    """Why the provider stopped the generation: ``stop``, ``length`` (the token limit),
    ``content_filter``…; None when the reply gave none, absent in older records."""
    truncated: NotRequired[bool | None]
    """Cut by the token limit (``finish_reason`` ``length``): the text was scored as it
    came, as the benchmark does; None when the finish reason is unknown."""
    served_model: NotRequired[str | None]
    """Model id the provider reported serving the generation (``calls.generate``'s)."""
    reasoning_tokens: NotRequired[int | None]
    """Hidden reasoning tokens of the generation; None when the provider did not say."""
    coherence_samples: NotRequired[list[float]]
    """Every coherence judgment when several were asked (``judge_samples``), the deciding one
    (``coherence``) first."""
    judges: NotRequired[list[PanelJudgment]]
    """A judge panel's judgments, the first judge's first: their majority decided coherence."""


ANSWER_SNAPSHOT_EVERY = 10_000
"""Answers between full snapshots of the ``answers`` channel. LangGraph's default (100)
rewrites the whole list every 100 answers, a quadratic term; no question comes near 10,000,
so each checkpoint stores only its step's answers and resuming replays the writes table."""


def append_answers(current: list[AnswerRecord], writes: Sequence[Any]) -> list[AnswerRecord]:
    """Reducer of ``answers``: append each write (a record or a list of records).

    Associative across batches, as ``DeltaChannel`` replay requires.
    """
    merged = list(current)
    for write in writes:
        merged.extend(write if isinstance(write, list) else [write])
    return merged


@documented
class Measured(TypedDict):
    """What a thread's scores mean: the settings it was measured with, recorded once with
    the thread, so no later run and no missing ``metadata.json`` can relabel its scores."""

    model: str
    """Model under test."""
    temperature: float
    """Sampling temperature of the model under test."""
    judge_model: str
    """Judge model (coherence and, when on, similarity)."""
    embedding_model: str
    """Embedding model behind embedding novelty."""
    coherence_threshold: float
    """An answer passed when coherence > this."""
    novelty_threshold: float
    """An answer passed when embedding novelty > this (the resolved value)."""
    llm_novelty_threshold: float | None
    """An answer passed when LLM novelty > this; None when that judge was off."""
    cot: bool
    """Whether the chain-of-thought generate prompt was used."""
    prompts_sha256: str
    """sha256 of the prompt templates in force."""
    judge_panel: NotRequired[list[dict[str, Any]] | None]
    """The judge panel beside ``judge_model`` (each judge's model, endpoint and
    threshold); None or absent without one."""


@documented
class QuestionInput(TypedDict):
    """What a caller passes to run one question (settings go in the context)."""

    question: str
    """The open-ended question to answer again and again."""


@documented
class _QuestionProgress(TypedDict):
    """Keys shared by the output schema and the full state (all but ``answers``)."""

    question: str
    """The question."""
    stop_reason: StopReason | None
    """Why the chain ended: a failed score's name, ``max_answers``, a spending cap (the score
    is a lower bound), ``judge_error`` or ``error``; None while the question runs."""
    error: ErrorInfo | None
    """Details when ``stop_reason`` is an error kind; the thread can be invoked again."""
    score: int
    """Number of valid answers (the benchmark's score)."""
    novelty_sum: float
    """Sum of embedding novelty over valid answers (the alternative reward)."""
    mean_coherence: float | None
    """Mean coherence over valid answers."""
    mean_novelty: float | None
    """Mean embedding novelty over valid answers."""
    mean_llm_novelty: float | None
    """Mean LLM novelty over valid answers, when that judge is on."""
    format_adherence: float | None
    """Share of scored replies that used the ``<answer>`` tag."""
    reward: float | None
    """The environment's name: ``score``, or ``novelty_sum`` when ``reward_mode`` says so."""
    format_reward: float | None
    """The environment's name for ``format_adherence`` (same value)."""
    avg_coherence: float | None
    """The environment's name for ``mean_coherence`` (same value)."""
    avg_embedding_novelty: float | None
    """The environment's name for ``mean_novelty`` (same value)."""
    sum_embedding_novelty: float
    """The environment's name for ``novelty_sum`` (same value)."""
    avg_llm_novelty: float | None
    """The environment's name for ``mean_llm_novelty`` (same value)."""
    speculative: CallStats | None
    """Cost of look-ahead generations that were discarded (pipelined runs only)."""
    measured: Measured | None
    """The settings the thread is measured with, written once when it starts; None only
    for threads started before it was recorded."""


@documented
class QuestionOutput(_QuestionProgress):
    """What one question's run returns."""

    answers: list[AnswerRecord]
    """Every scored answer in order: the valid ones, then the failing one if any."""


@documented
class QuestionState(_QuestionProgress):
    """Everything the per-question graph checkpoints between steps."""

    answers: Annotated[
        list[AnswerRecord], DeltaChannel(append_answers, snapshot_frequency=ANSWER_SNAPSHOT_EVERY)
    ]
    """Every scored answer in order; stored as deltas so checkpoints grow linearly."""
    started_at: float | None
    """Wall-clock time (epoch seconds) the question started."""
    candidate: Candidate | None
    """The answer being scored now."""
    lookahead: Candidate | None
    """The next answer, generated while ``candidate`` is scored (pipelining)."""
    coherence_result: ScoreOutcome | None
    """Judge branch outcome for ``candidate``."""
    novelty_result: ScoreOutcome | None
    """Embedding branch outcome for ``candidate``."""
    similarity_result: ScoreOutcome | None
    """LLM-similarity branch outcome for ``candidate`` (when enabled)."""
