"""A one-question run in its own process, for kill-and-resume tests.

    python -m tests.run_question RUN_DIR BASE_URL QUESTION [--no-pipeline]
        [--durability sync|async|exit] [--slow-commits SECONDS]

Checkpoints go to RUN_DIR/checkpoints.sqlite (through the run's checkpointer, with the
durability ``aidanbench run`` uses unless ``--durability`` says otherwise) and the score
cache to RUN_DIR/cache.sqlite. ``--slow-commits`` makes every checkpoint write take that
long first (a slow disk), so a step that does not wait for its checkpoint shows. A thread
that stopped mid-step resumes with ``None`` input; otherwise the question is
(re)submitted. Prints the output as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import Durability

from aidanbench.graph.question import build_question_graph
from aidanbench.runner.checkpoints import open_checkpointer
from aidanbench.runner.local import DURABILITY
from aidanbench.testing.settings import stub_settings


def slowed(
    write: Callable[..., Coroutine[Any, Any, Any]], seconds: float
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``write``, after a pause of ``seconds``."""

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(seconds)
        return await write(*args, **kwargs)

    return slow


async def main(args: argparse.Namespace) -> None:
    run_dir = Path(args.run_dir)
    settings = stub_settings(
        args.base_url, pipeline=args.pipeline, cache_path=str(run_dir / "cache.sqlite")
    )
    async with open_checkpointer(run_dir / "checkpoints.sqlite") as saver:
        if args.slow_commits:
            saver.aput = slowed(saver.aput, args.slow_commits)  # type: ignore[method-assign]
            saver.aput_writes = slowed(saver.aput_writes, args.slow_commits)  # type: ignore[method-assign]
        graph = build_question_graph().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": "question-1"}}
        snapshot = await graph.aget_state(config)
        start: Any = None if snapshot.next else {"question": args.question}
        durability = cast(Durability, args.durability)
        out = await graph.ainvoke(start, config, context=settings, durability=durability)
    print(json.dumps(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("base_url")
    parser.add_argument("question")
    parser.add_argument("--no-pipeline", dest="pipeline", action="store_false")
    parser.add_argument("--durability", choices=["sync", "async", "exit"], default=DURABILITY)
    parser.add_argument("--slow-commits", type=float, default=0.0)
    asyncio.run(main(parser.parse_args()))
