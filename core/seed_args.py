"""The verifiers ``aidanbench`` environment's arguments, as the run settings they choose.

Both verifiers environments (``verifiers_env``'s taskset on the current verifiers,
``verifiers_seed``'s ``-a`` on verifiers 0.1) take the seed's own names
(``judge_api_base_url``, ``thresholds.coherence_score``…): both declare them with
``SeedArgs`` and turn them into settings here, so one name means one setting in each. Each
field's default, bounds and description are ``Settings``' own, so no default is written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aidanbench.core.calibration import CalibrationFileError, read_calibration
from aidanbench.core.errors import install_hint
from aidanbench.core.settings import Settings

SEED_FIELDS = {
    "reward_mode": "reward_mode",
    "judge_model": "judge_model",
    "judge_api_base_url": "judge_base_url",
    "judge_api_key_var": "judge_api_key_env",
    "embedding_model": "embedding_model",
    "embedding_api_base_url": "embedding_base_url",
    "embedding_api_key_var": "embedding_api_key_env",
    "use_llm_similarity": "llm_novelty",
}
"""The community environment's setting keys → the ``Settings`` field each sets: with
``thresholds`` and the question keys, what ``aidanbench run -a`` accepts."""

ADDED_FIELDS = ("max_answers", "cot", "cache_path")
"""Settings both verifiers environments also take, under their ``Settings`` names."""

THRESHOLD_FIELDS = {
    "coherence_score": "coherence_threshold",
    "embedding_dissimilarity_score": "novelty_threshold",
    "llm_dissimilarity_score": "llm_novelty_threshold",
}
"""The environment's ``thresholds`` keys → the ``Settings`` field each sets."""


def like(key: str) -> Any:
    """The ``Settings`` field (default, bounds, description) the environment's ``key`` sets."""
    return Settings.model_fields[{**SEED_FIELDS, **THRESHOLD_FIELDS}.get(key, key)]


class SeedThresholds(BaseModel):
    """The pass rule: an answer is valid when every score is strictly above its threshold.
    ``coherence_score`` may be given as a judge calibration file (``SeedArgs``)."""

    model_config = ConfigDict(extra="forbid")

    coherence_score: float = like("coherence_score")
    embedding_dissimilarity_score: float | None = like("embedding_dissimilarity_score")
    llm_dissimilarity_score: float = like("llm_dissimilarity_score")


class SeedArgs(BaseModel):
    """Which questions, and how answers are scored. The model under test, its endpoint,
    key and sampling are verifiers' own (``vf-eval``'s flags)."""

    model_config = ConfigDict(extra="forbid")

    questions: list[str] | None = None
    """Questions to ask instead of the bundled 63."""
    questions_path: Path | None = Field(default=None, strict=False)
    """A questions file: a JSON list, JSONL or CSV with a ``question`` field, or one
    question per line."""
    num_questions: int | None = Field(default=None, ge=1)
    """Only the first N questions."""
    reward_mode: Literal["count", "novelty_sum"] = like("reward_mode")
    judge_model: str = like("judge_model")
    judge_api_base_url: str | None = like("judge_api_base_url")
    judge_api_key_var: str = like("judge_api_key_var")
    embedding_model: str = like("embedding_model")
    embedding_api_base_url: str | None = like("embedding_api_base_url")
    embedding_api_key_var: str = like("embedding_api_key_var")
    use_llm_similarity: bool = like("use_llm_similarity")
    thresholds: SeedThresholds = Field(default_factory=SeedThresholds, strict=False)
    max_answers: int | None = like("max_answers")
    cot: bool = like("cot")
    cache_path: str | None = like("cache_path")

    @model_validator(mode="before")
    @classmethod
    def _calibrated(cls, data: Any) -> Any:
        """``thresholds.coherence_score`` may name a judge calibration file, as ``run
        --coherence-threshold FILE`` does: its threshold, read and checked as every command
        reads it (``core.calibration``), for the judge ``judge_model`` names only."""
        thresholds = data.get("thresholds") if isinstance(data, dict) else None
        if not isinstance(thresholds, dict):
            return data
        given = thresholds.get("coherence_score")
        if not isinstance(given, str | Path):
            return data
        try:
            found = read_calibration(given)
        except CalibrationFileError as exc:
            raise ValueError(f"thresholds.coherence_score: {exc}") from None
        judge = data.get("judge_model", Settings.model_fields["judge_model"].default)
        other = found.other_judge(judge if isinstance(judge, str) else None)
        if other is not None:
            raise ValueError(f"thresholds.coherence_score: {other} (set judge_model to it)")
        return {**data, "thresholds": {**thresholds, "coherence_score": found.threshold}}

    @model_validator(mode="after")
    def _one_question_source(self) -> SeedArgs:
        if self.questions is not None and self.questions_path is not None:
            raise ValueError("give questions or questions_path, not both")
        return self

    @property
    def question_source(self) -> list[str] | Path | None:
        """What ``graph.questions.load_questions`` reads: the list, the file, or None
        (the bundled set)."""
        return self.questions if self.questions is not None else self.questions_path

    def settings(self, model: str, **fields: Any) -> Settings:
        """The run settings for ``model`` (which only names the policy), with ``fields`` set
        by the adapter itself (labels, endpoints). Pipelining is off, so the policy is never
        sampled on a prompt whose answer is thrown away, nor asked for two turns at once."""
        named = self.model_dump(include={*SEED_FIELDS, *ADDED_FIELDS})
        chosen = {SEED_FIELDS.get(k, k): v for k, v in named.items()}
        chosen |= {THRESHOLD_FIELDS[k]: v for k, v in self.thresholds.model_dump().items()}
        return Settings(**{**chosen, "model": model, "pipeline": False, **fields})


def missing_extra(what: str, extra: str) -> ImportError:
    """The error of an adapter whose verifiers line is not installed: the extra to install."""
    return ImportError(f"{what} needs the [{extra}] extra: {install_hint(extra)}")
