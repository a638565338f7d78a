"""The AidanBench taskset: one task per question, and the run's scoring settings.

The settings carry the names the community environment's users know (``judge_model``,
``judge_api_base_url``, ``thresholds.coherence_score``…) and are set on the command line
as ``--env.taskset.<name>``. They describe the judge and the embedding model only: the
model under test, its endpoint, key and sampling belong to verifiers (``-m``,
``--client.*``, ``--sampling.*``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import verifiers.v1 as vf
from pydantic import Field, model_validator

from aidanbench.core.seed_args import seed_settings
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import load_questions
from aidanbench.nodes.prompts import render_generate
from aidanbench.verifiers_env.rewards import INFO_KEY, RewardMode, metrics, rewards


class ThresholdsConfig(vf.BaseConfig):
    """The pass rule's thresholds: an answer is valid when every score is strictly above."""

    coherence_score: float = Field(15.0, ge=0.0, le=100.0)
    """Valid when the judge's coherence (0-100) is > this."""
    embedding_dissimilarity_score: float | None = Field(None, ge=0.0, le=1.0)
    """Valid when embedding novelty is > this. None: the benchmark's 0.15 (or the value
    calibrated for ``embedding_model='local'``)."""
    llm_dissimilarity_score: float = Field(0.15, ge=0.0, le=1.0)
    """Valid when LLM novelty is > this (only with ``use_llm_similarity``)."""


class AidanBenchTasksetConfig(vf.TasksetConfig):
    """Which questions, and how answers are scored (``--env.taskset.*``)."""

    questions: list[str] | None = None
    """Questions to ask instead of the bundled 63."""
    questions_path: Path | None = None
    """A questions file: a JSON list, JSONL or CSV with a ``question`` field, or one
    question per line."""
    num_questions: int | None = Field(None, ge=1)
    """Only the first N questions."""
    judge_model: str = "o1-mini"
    """Judge of coherence (and of similarity with ``use_llm_similarity``)."""
    judge_api_base_url: str | None = None
    """OpenAI-compatible base URL of the judge; None: OpenAI."""
    judge_api_key_var: str = "OPENAI_API_KEY"
    """Environment variable holding the judge's key."""
    embedding_model: str = "text-embedding-3-large"
    """Embedding model for novelty; ``local`` runs all-MiniLM-L6-v2 here ([local] extra)."""
    embedding_api_base_url: str | None = None
    """OpenAI-compatible base URL of the embeddings; None: OpenAI."""
    embedding_api_key_var: str = "OPENAI_API_KEY"
    """Environment variable holding the embeddings' key."""
    use_llm_similarity: bool = False
    """Also ask the judge how similar each answer is to every earlier one."""
    thresholds: ThresholdsConfig = ThresholdsConfig()
    reward_mode: RewardMode = "count"
    """Reward: the number of valid answers, or the sum of their embedding novelty."""
    max_answers: int | None = Field(None, ge=1)
    """Stop a question after this many valid answers. None: no cap, as in the benchmark."""
    cot: bool = False
    """Ask with the benchmark's chain-of-thought generate prompt."""
    cache_path: str | None = None
    """SQLite file caching embeddings and similarity judgements across runs; None keeps
    them in memory for the run."""

    @model_validator(mode="after")
    def _one_question_source(self) -> AidanBenchTasksetConfig:
        if self.questions is not None and self.questions_path is not None:
            raise ValueError("give questions or questions_path, not both")
        return self

    def settings(self, model: str) -> Settings:
        """The project's run settings for these choices (``core.seed_args``); ``model``
        only names the policy."""
        return seed_settings(self, self.thresholds, model)


class AidanBenchTaskData(vf.TaskData):
    """One question; ``prompt`` is its first generate prompt, byte for byte."""

    question: str


class AidanBenchTask(vf.Task[AidanBenchTaskData, vf.State, vf.TaskConfig]):
    """A question. Its answers are scored by the environment as they arrive (the next
    prompt depends on the verdict); the rollout's reward and metrics are read from the
    result the environment leaves on the trace."""

    @property
    def key(self) -> str:
        """The question's hash: the same question is the same task in every run."""
        return hashlib.sha256(self.data.question.encode("utf-8")).hexdigest()

    @vf.reward(weight=1.0)
    async def aidanbench(self, trace: vf.Trace) -> dict[str, float]:
        """``aidanbench_score`` (valid answers) or ``sum_embedding_novelty``, by mode."""
        return rewards(trace.info[INFO_KEY])

    @vf.metric
    async def aidanbench_metrics(self, trace: vf.Trace) -> dict[str, float]:
        """The benchmark's per-question numbers under the community environment's names."""
        return metrics(trace.info[INFO_KEY])


def question_list(config: AidanBenchTasksetConfig) -> list[str]:
    """The questions the config names (a list, a file, or the bundled set), in order; a
    bad list is an error, never a fallback (``graph.questions``, the one validator)."""
    source = config.questions if config.questions is not None else config.questions_path
    return load_questions(source, limit=config.num_questions)


class AidanBenchTaskset(vf.Taskset[AidanBenchTask, AidanBenchTasksetConfig]):
    """The bundled 63 questions (or the user's), in the benchmark's order."""

    def load(self) -> Iterator[AidanBenchTask]:
        config = self.config
        for number, question in enumerate(question_list(config), start=1):
            data = AidanBenchTaskData(
                id=f"q{number:03d}",
                name=question,
                question=question,
                prompt=render_generate(question, [], cot=config.cot),
            )
            yield AidanBenchTask(data, config.task)
