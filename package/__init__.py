"""AidanBench, the open-ended creativity benchmark, as a LangGraph workflow.

The code lives in the subpackages (``aidanbench.graph``, ``aidanbench.nodes``, …). This
module only exists so that ``vf-eval aidanbench`` finds the verifiers environment under
the benchmark's own name: verifiers imports the module named by the id, and reads its
``__all__`` (verifiers 0.4, ``[verifiers]`` extra) or calls its ``load_environment``
(verifiers 0.1, the seed's command line, ``[verifiers-seed]`` extra; not in ``__all__``,
which 0.4 resolves whole). The names resolve on first access, so ``import aidanbench``
(and every subpackage import) loads nothing, verifiers least of all.
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
