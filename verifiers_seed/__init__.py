"""AidanBench for the verifiers 0.1 command line (``[verifiers-seed]`` extra).

The seed's quickstart, ``vf-eval aidanbench -m MODEL -n N -r R -T TEMP -a JSON`` (with
``-b`` and ``-k``), is the command line of verifiers 0.1, which loads an environment by
importing the module named by the id and calling its ``load_environment``. The
``aidanbench`` package root resolves that name from here on first access. The
current-verifiers environment (``--env.taskset.*``) is ``aidanbench.verifiers_env``.
"""

from __future__ import annotations

try:
    from verifiers import MultiTurnEnv  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "the seed's vf-eval command line needs the [verifiers-seed] extra (verifiers 0.1): "
        "pip install -e '.[verifiers-seed]'"
    ) from exc

from aidanbench.verifiers_seed.args import EnvArgs, Thresholds
from aidanbench.verifiers_seed.env import AidanBenchSeedEnv, load_environment

__all__ = ["AidanBenchSeedEnv", "EnvArgs", "Thresholds", "load_environment"]
