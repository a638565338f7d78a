"""What two provider faults cost a run: a 429 storm under a rate limit, a dripping reply.

    python -m bench.provider_faults

``rate``: four questions at ``requests_per_minute=30`` against a stub that answers every
generate request 429 on its first three attempts; prints how many requests the endpoint
saw in the first 40 seconds (at most 30 when every attempt counts against the rate).
``drip``: one judge reply trickling one byte every 0.3 s at ``request_timeout=5`` and
``max_retries=1``; prints how long the question was held, on both transports.
"""

from __future__ import annotations

import asyncio
import os
import time

from aidanbench.graph.question import build_question_graph
from aidanbench.graph.questions import bundled_questions
from aidanbench.services import OpenAIServices, ServicesFactory, default_services
from aidanbench.testing import OpenAIStub, ScriptedBrain, drip, rate_limited, when
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_settings

RATE_WINDOW_S = 40.0


async def rate() -> None:
    """Requests seen in the first 40 s at 30 requests a minute under a 429 storm."""
    questions = bundled_questions(4)
    brain = ScriptedBrain({q: 20 for q in questions})
    storm = when("generate", rate_limited(0.01), times=3)
    with OpenAIStub(brain, faults=storm) as stub:
        settings = stub_settings(stub.base_url, requests_per_minute=30, max_retries=4)
        graph = build_question_graph(default_services).compile()
        tasks = [
            asyncio.ensure_future(graph.ainvoke({"question": q}, context=settings))
            for q in questions
        ]
        await asyncio.sleep(RATE_WINDOW_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        requests = stub.requests
    start = min(r.started for r in requests)
    seen = [r for r in requests if r.started - start <= RATE_WINDOW_S]
    limited = sum(r.status == 429 for r in seen)
    print(f"rate: {len(seen)} requests ({limited} 429s) in {RATE_WINDOW_S:g} s, limit 30/min")


async def dripping() -> None:
    """How long a judge reply dripping one byte every 0.3 s holds a question."""
    question = "What could a spoon be used for?"
    factories: list[tuple[str, ServicesFactory]] = [
        ("httpx", default_services),
        ("aiohttp", OpenAIServices("aiohttp")),
    ]
    for name, factory in factories:
        with OpenAIStub(ScriptedBrain({question: 2}), faults=when("coherence", drip(0.3))) as stub:
            settings = stub_settings(stub.base_url, request_timeout=5, max_retries=1)
            started = time.monotonic()
            graph = build_question_graph(factory).compile()
            out = await graph.ainvoke({"question": question}, context=settings)
            held = time.monotonic() - started
            print(f"drip ({name}): question held {held:.1f} s, {out['error']['message']}")
        if isinstance(factory, OpenAIServices):
            await factory.aclose()


async def main() -> None:
    os.environ.setdefault(TEST_KEY_VARIABLE, "bench-key")
    await rate()
    await dripping()


if __name__ == "__main__":
    asyncio.run(main())
