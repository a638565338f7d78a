"""AidanBench, the open-ended creativity benchmark, as a LangGraph workflow.

The code lives in the subpackages (``aidanbench.graph``, ``aidanbench.nodes``, …). This
module only exists so that ``vf-eval aidanbench`` finds the verifiers environment under
the benchmark's own name: verifiers imports the module named by the id and reads its
``__all__``. The names resolve on first access, so ``import aidanbench`` (and every
subpackage import) loads nothing, verifiers least of all: only the ``[verifiers]`` extra
installs it.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from aidanbench.verifiers_env import AidanBenchEnv, AidanBenchHarness, AidanBenchTaskset

__all__ = ["AidanBenchEnv", "AidanBenchHarness", "AidanBenchTaskset"]


def __getattr__(name: str) -> object:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("aidanbench.verifiers_env"), name)
    raise AttributeError(f"module 'aidanbench' has no attribute {name!r}")
