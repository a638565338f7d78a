"""The brainstorm agent (``aidanbench.graph.examples``) in its own process, for kill tests.

    python -m tests.run_agent RUN_DIR BASE_URL TOPIC {direct|wrapped}

Checkpoints go to RUN_DIR/checkpoints.sqlite and the score cache to RUN_DIR/cache.sqlite
(an in-memory cache would die with the process, and the resumed run would have to embed
finished answers again). A thread that stopped mid-step resumes with ``None`` input;
otherwise the topic is submitted. Prints the agent's output as JSON.

Checkpoints are written before each next step starts (durability ``sync``), so what a
kill loses is exactly the step in flight. With the default ``async`` they are written in
the background and a loaded machine can lose a few more finished steps: still correct on
resume, but not a sharp test.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from aidanbench.core.settings import Settings
from aidanbench.graph.examples import BrainstormContext, build_direct_agent, build_wrapped_agent
from aidanbench.testing.settings import stub_settings

MIN_IDEAS = 5


def settings(run_dir: Path, base_url: str) -> Settings:
    """Every role at the stub, the cache in the run directory."""
    return stub_settings(base_url, cache_path=str(run_dir / "cache.sqlite"))


async def run(run_dir: Path, base_url: str, topic: str, wiring: str) -> dict[str, Any]:
    """Start or resume the agent's thread in ``run_dir``; return its output."""
    check = settings(run_dir, base_url)
    context: Any = check if wiring == "direct" else BrainstormContext(creativity=check)
    builder = build_direct_agent() if wiring == "direct" else build_wrapped_agent()
    async with AsyncSqliteSaver.from_conn_string(str(run_dir / "checkpoints.sqlite")) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "agent-1"}}
        snapshot = await graph.aget_state(config)
        start = None if snapshot.next else {"topic": topic, "min_ideas": MIN_IDEAS}
        out: dict[str, Any] = await graph.ainvoke(start, config, context=context, durability="sync")
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(asyncio.run(run(Path(args[0]), args[1], args[2], args[3]))))
