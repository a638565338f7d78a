"""AidanBench for the verifiers 0.1 command line (``[verifiers-seed]`` extra).

The seed's quickstart, ``vf-eval aidanbench -m MODEL -n N -r R -T TEMP -a JSON`` (with ``-b`` and
``-k``), imports the module the id names and calls its ``load_environment``; the ``aidanbench``
package root resolves that name from here on first access. The current-verifiers environment is
``aidanbench.verifiers_env``.
"""

from __future__ import annotations

from aidanbench.core.seed_args import missing_extra

try:
    from verifiers import MultiTurnEnv  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise missing_extra("the seed's vf-eval (verifiers 0.1)", "verifiers-seed") from exc

from aidanbench.verifiers_seed.env import AidanBenchSeedEnv, EnvArgs, load_environment

__all__ = ["AidanBenchSeedEnv", "EnvArgs", "load_environment"]
