"""AidanBench, the open-ended creativity benchmark, as a LangGraph workflow.

The code lives in the subpackages. This module exists so that ``vf-eval aidanbench`` finds
the verifiers environment under the benchmark's own name: verifiers 0.4 reads ``__all__``,
verifiers 0.1 (the seed) calls ``load_environment``, kept out of ``__all__`` because 0.4
resolves it whole. Names resolve on first access, so ``import aidanbench`` loads nothing.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from aidanbench.verifiers_env import AidanBenchEnv, AidanBenchHarness, AidanBenchTaskset
    from aidanbench.verifiers_seed import load_environment as load_environment

__all__ = ["AidanBenchEnv", "AidanBenchHarness", "AidanBenchTaskset"]


def __getattr__(name: str) -> object:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("aidanbench.verifiers_env"), name)
    if name == "load_environment":
        import importlib

        return importlib.import_module("aidanbench.verifiers_seed").load_environment
    raise AttributeError(f"module 'aidanbench' has no attribute {name!r}")
