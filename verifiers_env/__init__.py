"""AidanBench as a verifiers environment: ``vf-eval aidanbench`` (``[verifiers]`` extra).

verifiers finds the taskset, the environment and the harness through the ``aidanbench``
package's ``__all__``, which resolves them from here on first access.

- ``AidanBenchTaskset``: one task per question (the bundled 63 or the user's), with the
  judge, embedding, threshold and reward settings (``--env.taskset.*``).
- ``AidanBenchEnv``: runs the project's per-question graph with the policy agent as the
  model under test, then records the reward and metrics.
- ``AidanBenchHarness``: one streamed chat request per answer, of its fresh prompt alone.
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
