"""CPU per chat request of the two chat clients, ``ChatOpenAI`` and ``OpenAIChat``.

    python -m bench.chat_client [--requests 3000] [--concurrency 50] [--runs 3]

A server in another process answers every chat request at once with the same
completion (so its CPU is not counted); this process sends ``--requests`` requests,
``--concurrency`` at a time, through each client kind as ``services.clients`` builds it
on an aiohttp pool, and prints the CPU milliseconds per request of each, runs
interleaved. What is left is the client's own cost: building the request, the HTTP
round trip on the pool, reading the reply into a message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Literal

REPLY = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "<answer>" + "words " * 60 + "</answer>"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 400, "completion_tokens": 80, "total_tokens": 480},
}

SERVER = """
import sys
from aiohttp import web
body = sys.stdin.readline()
async def chat(request):
    await request.read()
    return web.Response(text=body, content_type="application/json")
async def main():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
import asyncio
asyncio.run(main())
"""


async def cpu_per_request(
    url: str, kind: Literal["langchain", "openai"], requests: int, concurrency: int
) -> float:
    from aidanbench.nodes.prompts import render_generate
    from aidanbench.services import clients
    from aidanbench.services.chat import OpenAIChat
    from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_settings

    os.environ.setdefault(TEST_KEY_VARIABLE, "bench")
    settings = stub_settings(url)
    pool = clients.http_pool(settings, "aiohttp", concurrency)
    client = clients.model_under_test(settings, pool, kind)
    prompt = render_generate("What is art?", [f"answer number {i} " * 30 for i in range(20)])
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            if isinstance(client, OpenAIChat):
                await client.reply(prompt)
            else:
                await client.ainvoke(prompt)

    try:
        await asyncio.gather(*(one() for _ in range(200)))  # warm the pool
        start = time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        return 1000 * (time.process_time() - start) / requests
    finally:
        await pool.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps(REPLY) + "\n")
    server.stdin.flush()
    url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    kinds: tuple[Literal["langchain", "openai"], ...] = ("langchain", "openai")
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        for _ in range(args.runs):
            for kind in kinds:
                ms = asyncio.run(cpu_per_request(url, kind, args.requests, args.concurrency))
                results[kind].append(ms)
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    for name, values in results.items():
        spread = " / ".join(f"{v:.2f}" for v in values)
        print(f"{name:<10} CPU per request {spread} ms ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
