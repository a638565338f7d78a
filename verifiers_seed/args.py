"""The seed environment's arguments: what ``vf-eval aidanbench -a JSON`` accepts.

The keys are the community environment's (its README's ``-a`` list), plus the three the
current-verifiers environment adds (``max_answers``, ``cot``, ``cache_path``). A key the
environment does not have, or a value of the wrong kind, is an error naming it: never
ignored, never a silent default. ``max_turns`` and ``reasoning_effort`` are refused: the
benchmark has no turn cap (``max_answers`` caps valid answers), and the model's request
fields belong to ``vf-eval`` (``-S '{"reasoning_effort": ...}'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aidanbench.core.seed_args import seed_settings
from aidanbench.core.settings import Settings


class Thresholds(BaseModel):
    """The pass rule: an answer is valid when every score is strictly above its threshold."""

    model_config = ConfigDict(extra="forbid")

    coherence_score: float = Field(default=15.0, ge=0.0, le=100.0)
    """Valid when the judge's coherence (0-100) is > this."""
    embedding_dissimilarity_score: float | None = Field(default=None, ge=0.0, le=1.0)
    """Valid when embedding novelty is > this. None: the benchmark's 0.15 (or the value
    calibrated for ``embedding_model='local'``)."""
    llm_dissimilarity_score: float = Field(default=0.15, ge=0.0, le=1.0)
    """Valid when LLM novelty is > this (only with ``use_llm_similarity``)."""


class EnvArgs(BaseModel):
    """Which questions, and how answers are scored. The model under test, its endpoint,
    key and sampling are ``vf-eval``'s (``-m``, ``-b``, ``-k``, ``-T``, ``-t``, ``-S``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    questions: list[str] | None = None
    """Questions to ask instead of the bundled 63."""
    questions_path: Path | None = Field(default=None, strict=False)
    """A questions file: a JSON list, JSONL or CSV with a ``question`` field, or one
    question per line."""
    num_questions: int | None = Field(default=None, ge=1)
    """Only the first N questions (``-n`` then runs the first N of those)."""
    reward_mode: Literal["count", "novelty_sum"] = "count"
    """Reward: the number of valid answers, or the sum of their embedding novelty."""
    judge_model: str = "o1-mini"
    judge_api_base_url: str | None = None
    """OpenAI-compatible base URL of the judge; None: OpenAI."""
    judge_api_key_var: str = "OPENAI_API_KEY"
    embedding_model: str = "text-embedding-3-large"
    """Embedding model for novelty; ``local`` runs all-MiniLM-L6-v2 here ([local] extra)."""
    embedding_api_base_url: str | None = None
    """OpenAI-compatible base URL of the embeddings; None: OpenAI."""
    embedding_api_key_var: str = "OPENAI_API_KEY"
    use_llm_similarity: bool = False
    """Also ask the judge how similar each answer is to every earlier one."""
    thresholds: Thresholds = Field(default=Thresholds(), strict=False)
    max_answers: int | None = Field(default=None, ge=1)
    """Stop a question after this many valid answers. None: no cap, as in the benchmark."""
    cot: bool = False
    """Ask with the benchmark's chain-of-thought generate prompt."""
    cache_path: str | None = None
    """SQLite file caching embeddings and similarity judgements across runs."""

    @model_validator(mode="after")
    def _one_question_source(self) -> EnvArgs:
        if self.questions is not None and self.questions_path is not None:
            raise ValueError("give questions or questions_path, not both")
        return self

    def settings(self, model: str, temperature: float | None) -> Settings:
        """The project's run settings for these choices (``core.seed_args``).

        ``model`` and ``temperature`` only label the results (``measured``): the policy
        request itself is ``vf-eval``'s.
        """
        labels: dict[str, Any] = {"temperature": temperature} if temperature is not None else {}
        return seed_settings(self, self.thresholds, model, **labels)
