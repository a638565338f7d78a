"""The benchmark's stand-in for a remote API, in its own process.

    python -m bench.serve LG LJ LE ANSWERS ANSWER_SIZE

Prints the base URL on the first line of stdout and serves until stdin closes, so the
benchmark's own process is measured without the server's CPU.

It speaks the same wire format and answers from the same ``ScriptedBrain`` as the
tests' ``OpenAIStub`` (``aidanbench.testing.protocol``), but on one asyncio event loop
instead of a thread per request: with a few hundred requests in flight, the threaded
stub's GIL hand-offs added a median 15-40 ms to each configured latency (measured with
63-190 concurrent generate requests at Lg 300 ms), which a remote API would not add and
the benchmark would have charged to the graph. It has no fault injection or request log;
the tests' stub keeps those.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from aiohttp import web

from aidanbench.testing import ScriptedBrain, protocol
from aidanbench.testing.brain import Brain, Kind, classify


async def chat_request(request: web.Request) -> tuple[dict[str, Any], str, str]:
    """A chat completion request's body, model and prompt."""
    body = protocol.parse_json(await request.read())
    return body, protocol.model_of(body), protocol.chat_prompt(body)


async def embeddings_request(request: web.Request) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """An embeddings request's body, model and texts."""
    body = protocol.parse_json(await request.read())
    return body, protocol.model_of(body), protocol.embedding_inputs(body)


def chat_response(
    brain: Brain, kind: Kind, model: str, prompt: str, body: dict[str, Any], response_id: str
) -> web.Response:
    """``brain``'s reply to the prompt as a (not streamed) chat completion."""
    reply = brain.chat(kind, model, prompt, body)
    payload = protocol.chat_completion(
        reply, model, prompt, response_id, stream=False, usage_chunk=False
    )
    assert not isinstance(payload, protocol.EventStream)
    return web.Response(body=json.dumps(payload), content_type="application/json")


def embeddings_response(
    brain: Brain, model: str, texts: tuple[str, ...], body: dict[str, Any]
) -> web.Response:
    """``brain``'s vectors for the texts, in the encoding the request asked for."""
    payload = protocol.embeddings_response(
        brain.embed(model, texts), model, texts, encoding_format=body.get("encoding_format")
    )
    return web.Response(body=json.dumps(payload), content_type="application/json")


def app(brain: ScriptedBrain, lg: float, lj: float, le: float) -> web.Application:
    """Chat completions and embeddings, each answered after its latency."""
    delay = {"generate": lg, "coherence": lj, "similarity": lj, "other": 0.0}

    async def chat(request: web.Request) -> web.Response:
        body, model, prompt = await chat_request(request)
        kind = classify(prompt)
        await asyncio.sleep(delay[kind])
        return chat_response(brain, kind, model, prompt, body, "chatcmpl-bench")

    async def embeddings(request: web.Request) -> web.Response:
        body, model, texts = await embeddings_request(request)
        await asyncio.sleep(le)
        return embeddings_response(brain, model, texts, body)

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_post("/v1/embeddings", embeddings)
    return application


async def serve(lg: float, lj: float, le: float, answers: int, size: int) -> None:
    brain = ScriptedBrain(default_length=answers, answer_size=size)
    runner = web.AppRunner(app(brain, lg, lj, le), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    lg, lj, le = (float(x) for x in sys.argv[1:4])
    answers, size = int(sys.argv[4]), int(sys.argv[5])
    asyncio.run(serve(lg, lj, le, answers, size))


if __name__ == "__main__":
    main()
