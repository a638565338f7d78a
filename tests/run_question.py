"""A one-question run in its own process, for kill-and-resume tests.

    python -m tests.run_question RUN_DIR BASE_URL QUESTION [--no-pipeline]

Checkpoints go to RUN_DIR/checkpoints.sqlite (through the run's checkpointer, as
``aidanbench run`` writes them) and the score cache to
RUN_DIR/cache.sqlite. A thread that stopped mid-step resumes with ``None`` input;
otherwise the question is (re)submitted. Prints the output as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from aidanbench.cli.checkpoints import open_checkpointer
from aidanbench.graph.question import build_question_graph
from aidanbench.testing.settings import stub_settings


async def main(run_dir: Path, base_url: str, question: str, pipeline: bool) -> None:
    settings = stub_settings(base_url, pipeline=pipeline, cache_path=str(run_dir / "cache.sqlite"))
    async with open_checkpointer(run_dir / "checkpoints.sqlite") as saver:
        graph = build_question_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "question-1"}}
        snapshot = await graph.aget_state(config)
        start = None if snapshot.next else {"question": question}
        out = await graph.ainvoke(start, config, context=settings)
    print(json.dumps(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), args[1], args[2], "--no-pipeline" not in args))
