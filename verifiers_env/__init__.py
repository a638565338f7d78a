"""AidanBench as a verifiers environment: ``vf-eval aidanbench`` (``[verifiers]`` extra).

verifiers finds ``AidanBenchTaskset``, ``AidanBenchEnv`` and ``AidanBenchHarness`` through the
``aidanbench`` package's ``__all__``, resolved from here on first access.
"""

from __future__ import annotations

from aidanbench.core.seed_args import missing_extra

try:
    import verifiers.v1  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise missing_extra("the AidanBench verifiers environment", "verifiers") from exc

from aidanbench.verifiers_env.env import AidanBenchEnv, AidanBenchEnvConfig
from aidanbench.verifiers_env.harness import AidanBenchHarness, AidanBenchHarnessConfig
from aidanbench.verifiers_env.taskset import (
    AidanBenchTask,
    AidanBenchTaskData,
    AidanBenchTaskset,
    AidanBenchTasksetConfig,
)

__all__ = [
    "AidanBenchEnv",
    "AidanBenchEnvConfig",
    "AidanBenchHarness",
    "AidanBenchHarnessConfig",
    "AidanBenchTask",
    "AidanBenchTaskData",
    "AidanBenchTaskset",
    "AidanBenchTasksetConfig",
]
