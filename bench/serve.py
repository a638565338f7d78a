"""Run the local OpenAI-compatible server in its own process (a remote API's stand-in).

    python -m bench.serve LG LJ LE ANSWERS ANSWER_SIZE

Prints the base URL on the first line of stdout and serves until stdin closes, so the
benchmark's own process is measured without the server's CPU.
"""

from __future__ import annotations

import sys

from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain


def main() -> None:
    lg, lj, le = (float(x) for x in sys.argv[1:4])
    answers, size = int(sys.argv[4]), int(sys.argv[5])
    brain = ScriptedBrain(default_length=answers, answer_size=size)
    with OpenAIStub(brain, latency=Latency(generate=lg, coherence=lj, embed=le)) as stub:
        print(stub.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
