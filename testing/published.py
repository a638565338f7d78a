"""The published AidanBench run as a local API, for ``aidanbench demo``: a ``ReplayBrain`` over
every model of the bundled run, generate requests taking the published time times a scale.

``python -m aidanbench.testing.published SCALE [MODEL…]`` serves on 127.0.0.1 (listing the
run's models and the MODELs named, the caller's judge and embedder), prints the base URL on
stdout's first line and stops when stdin closes: its work is not charged to the run it serves.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from aidanbench import reference
from aidanbench.record.results import QuestionResult, read_aidanbench_file
from aidanbench.testing.replay import ReplayBrain
from aidanbench.testing.server import OpenAIStub


def published_chains() -> list[QuestionResult]:
    """The bundled published run's question chains, in file order."""
    return read_aidanbench_file(reference.published_run())


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the published run until stdin closes (the demo's child process)."""
    args = list(sys.argv[1:] if argv is None else argv)
    scale = float(args[0]) if args else 0.0
    chains = published_chains()
    served = [*dict.fromkeys(c.model for c in chains), *args[1:]]
    with OpenAIStub(ReplayBrain(chains, scale), models=served) as stub:
        print(stub.base_url, flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
