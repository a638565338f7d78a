"""The AidanBench taskset: one task per question, and the run's scoring settings.

The settings carry the community environment's names (``judge_model``,
``thresholds.coherence_score``…), set as ``--env.taskset.<name>``, and describe the judge and the
embedding model only: the model under test, its endpoint, key and sampling are verifiers' (``-m``,
``--client.*``, ``--sampling.*``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import verifiers.v1 as vf
from pydantic import Field

from aidanbench.core.seed_args import SeedArgs, SeedThresholds
from aidanbench.graph.questions import load_questions
from aidanbench.nodes.prompts import render_generate
from aidanbench.verifiers_env.rewards import INFO_KEY, metrics, rewards


class ThresholdsConfig(SeedThresholds, vf.BaseConfig):
    """The pass rule: an answer is valid when every score is strictly above its threshold."""


class AidanBenchTasksetConfig(SeedArgs, vf.TasksetConfig):
    """Which questions, and how answers are scored (``--env.taskset.*``): the seed's
    names (``core.seed_args``)."""

    thresholds: ThresholdsConfig = Field(default_factory=ThresholdsConfig)


class AidanBenchTaskData(vf.TaskData):
    """One question; ``prompt`` is its first generate prompt, byte for byte."""

    question: str


class AidanBenchTask(vf.Task[AidanBenchTaskData, vf.State, vf.TaskConfig]):
    """A question, its answers scored by the environment as they arrive (the next prompt depends on
    the verdict); reward and metrics are read from the result left on the trace."""

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


class AidanBenchTaskset(vf.Taskset[AidanBenchTask, AidanBenchTasksetConfig]):
    """The bundled 63 questions (or the user's), in the benchmark's order."""

    def load(self) -> Iterator[AidanBenchTask]:
        config = self.config
        questions = load_questions(config.question_source, limit=config.num_questions)
        for number, question in enumerate(questions, start=1):
            data = AidanBenchTaskData(
                id=f"q{number:03d}",
                name=question,
                question=question,
                prompt=render_generate(question, [], cot=config.cot),
            )
            yield AidanBenchTask(data, config.task)
