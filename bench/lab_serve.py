"""The lab benchmark's provider: latency distributions and a rate limit, in its own process.

    python -m bench.lab_serve published|lab [--lg S --lj S --le S --sigma X --rate N ...]

Prints the base URL on the first line of stdout and serves until stdin closes. On one
asyncio loop (see ``bench.serve`` for why not the threaded test stub).

* ``published`` answers as the five models, judge and embedder of the bundled published
  run (``ReplayBrain``); ``lab`` as ``--models`` models whose chains are scripted
  (``LabBrain``: distinct answers per model, lengths drawn per model and question).
* Each request waits a latency drawn from a log-normal distribution with the kind's
  median (``--lg``, ``--lj``, ``--le``) and ``--sigma`` (0: always the median). The draw
  is a function of what is asked (model, question, answer), so every run, the graph and
  the plain loop alike, meets the same latencies, and the benchmark can compute each
  question's pipelined bound exactly (``latency``). An embeddings batch waits as long as
  its slowest text.
* ``--rate N`` answers 429 (``Retry-After`` one second over N) to every request beyond
  N per second (a token bucket holding ``--burst`` requests), as providers do. With
  ``--limits per-model`` each model under test has a bucket of its own, and so have the
  judge and the embedder (each ``--rate``), as real providers limit per account and model;
  ``global`` (the default) is one bucket for every request.
* ``--endpoints N`` serves on N more ports, printed after the first URL on the first
  line: a client limits its requests per endpoint (host and port), so each model under
  test, the judge and the embedder can have an endpoint of their own.
* ``--trace FILE`` appends one JSON line per request answered: kind, model, question
  and answers so far (generate), arrival, drawn latency, end (monotonic seconds); it
  shows where a chain waited (the gap between one generate's end and the next's
  arrival is time spent in the client, not the provider).
* ``--hold-at N`` holds every generate request of a chain that already has ``N``
  answers until the server stops (``bench.in_flight_memory``: every chain in flight, each
  holding ``N`` answers); ``--dim`` and ``--answer-size`` set the lab's vector length and
  answer size.
* ``GET /stats`` reports requests, 429s, prompt characters received, requests held and
  ``asked``: chat requests of a question (generate, judge; not a preflight's probe);
  ``POST /stats`` resets them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any, TextIO

from aiohttp import web

from aidanbench.nodes.parsing import extract_answer
from aidanbench.testing import ScriptedBrain
from aidanbench.testing.brain import (
    Kind,
    Reply,
    classify,
    parse_coherence_prompt,
    parse_generate_prompt,
)
from bench.serve import chat_request, chat_response, embeddings_request, embeddings_response

_UNIT = NormalDist()


def draw(median: float, sigma: float, *key: object) -> float:
    """A log-normal latency for ``key``: the same key always waits the same time."""
    if median <= 0:
        return 0.0
    digest = hashlib.sha256(repr(key).encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return median * math.exp(sigma * _UNIT.inv_cdf(u))


def model_mean(model: str, mean: float, spread: float) -> float:
    """``model``'s mean chain length: ``mean``, or with a ``spread`` above one a mean drawn
    per model, log-uniformly between ``mean / spread`` and ``mean * spread`` (real models'
    lengths differ tenfold: the published run's means run from 4.5 to 42 answers)."""
    if spread <= 1:
        return mean
    digest = hashlib.sha256(f"mean|{model}".encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return float(mean * spread ** (2 * u - 1))


def chain_length(model: str, question: str, mean: float, cap: int) -> int:
    """Valid answers of ``model`` on ``question``: geometric-like with ``mean``, capped."""
    digest = hashlib.sha256(f"{model}|{question}".encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return min(cap, int(-math.log(u) * mean))


class LabBrain:
    """Scripted chains per model: model-tagged answers, per-model lengths."""

    def __init__(
        self,
        models: Sequence[str],
        questions: Sequence[str],
        mean: float,
        cap: int,
        *,
        dim: int = 256,
        answer_size: int = 400,
        spread: float = 1.0,
    ):
        self.brains = {
            m: ScriptedBrain(
                {q: chain_length(m, q, model_mean(m, mean, spread), cap) for q in questions},
                answer_size=answer_size,
                dim=dim,
            )
            for m in models
        }
        self.any = next(iter(self.brains.values()))

    def generate(self, model: str, question: str, previous: Sequence[str]) -> str:
        reply = self.brains[model].generate(question, previous)
        answer, _ = extract_answer(reply)
        if answer in previous or "INCOHERENT" in answer:
            return reply
        return f"<answer>[{model}] {answer}</answer>"

    def chat(self, kind: Kind, model: str, prompt: str, body: Mapping[str, Any]) -> Reply:
        if kind == "generate":
            return Reply(self.generate(model, *parse_generate_prompt(prompt)))
        return self.any.chat(kind, model, prompt, body)

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        return self.any.embed(model, texts)


def latency(
    kind: str,
    model: str,
    prompt: str,
    texts: Sequence[str],
    medians: Mapping[str, float],
    sigma: float,
) -> float:
    """What a request waits: drawn from what it asks (see the module docstring)."""
    if kind == "generate":
        question, previous = parse_generate_prompt(prompt)
        return draw(medians["generate"], sigma, "g", model, question, len(previous))
    if kind == "coherence":
        return draw(medians["coherence"], sigma, "j", *parse_coherence_prompt(prompt))
    if kind == "similarity":
        return draw(medians["coherence"], sigma, "s", prompt)
    if kind == "embed":
        return max((draw(medians["embed"], sigma, "e", t) for t in texts), default=0.0)
    return 0.0


def held(hold_at: int | None, kind: str, prompt: str) -> bool:
    """Whether a request is a generate request of a chain with ``hold_at`` answers or more."""
    return (
        hold_at is not None
        and kind == "generate"
        and len(parse_generate_prompt(prompt)[1]) >= hold_at
    )


def lane(limits: str, kind: str, model: str) -> str:
    """Which bucket a request of ``kind`` to ``model`` draws from under ``limits``."""
    if limits == "global":
        return "provider"
    return model if kind == "generate" else ("embed" if kind == "embed" else "judge")


class Buckets:
    """One ``Bucket`` per lane (``lane``), each ``rate`` a second and ``burst`` at once."""

    def __init__(self, limits: str, rate: float | None, burst: float) -> None:
        self.limits, self.rate, self.burst = limits, rate, burst
        self.buckets: dict[str, Bucket] = {}

    def admit(self, kind: str, model: str) -> bool:
        key = lane(self.limits, kind, model)
        if key not in self.buckets:
            self.buckets[key] = Bucket(self.rate, self.burst)
        return self.buckets[key].admit()

    def refill(self) -> None:
        self.buckets.clear()


class Bucket:
    """A token bucket: ``rate`` requests per second, ``burst`` at once."""

    def __init__(self, rate: float | None, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def admit(self) -> bool:
        if self.rate is None:
            return True
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def app(
    brain: Any,
    medians: Mapping[str, float],
    sigma: float,
    bucket: Buckets,
    trace: TextIO | None = None,
    hold_at: int | None = None,
) -> web.Application:
    stats = {"requests": 0, "rate_limited": 0, "prompt_chars": 0, "held": 0, "asked": 0}

    def refused(kind: str, model: str) -> web.Response | None:
        stats["requests"] += 1
        if bucket.admit(kind, model):
            return None
        stats["rate_limited"] += 1
        retry = f"{1.0 / bucket.rate:.3f}" if bucket.rate else "1"
        body = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
        return web.json_response(body, status=429, headers={"Retry-After": retry})

    async def chat(request: web.Request) -> web.Response:
        body, model, prompt = await chat_request(request)
        kind = classify(prompt)
        if (refusal := refused(kind, model)) is not None:
            return refusal
        stats["prompt_chars"] += len(prompt)
        if kind != "other":
            stats["asked"] += 1
        if held(hold_at, kind, prompt):
            stats["held"] += 1
            await asyncio.Event().wait()  # until the server stops
        arrived = time.monotonic()
        await asyncio.sleep(wait := latency(kind, model, prompt, (), medians, sigma))
        if trace is not None:
            what = parse_generate_prompt(prompt) if kind == "generate" else ("", [])
            line = [kind, model, what[0][:50], len(what[1]), arrived, wait, time.monotonic()]
            trace.write(json.dumps(line) + "\n")
        return chat_response(brain, kind, model, prompt, body, "chatcmpl-lab")

    async def embeddings(request: web.Request) -> web.Response:
        body, model, texts = await embeddings_request(request)
        if (refusal := refused("embed", model)) is not None:
            return refusal
        arrived = time.monotonic()
        await asyncio.sleep(wait := latency("embed", model, "", texts, medians, sigma))
        if trace is not None:
            line = ["embed", model, "", len(texts), arrived, wait, time.monotonic()]
            trace.write(json.dumps(line) + "\n")
        return embeddings_response(brain, model, texts, body)

    async def read_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def reset_stats(request: web.Request) -> web.Response:
        stats.update(requests=0, rate_limited=0, prompt_chars=0, held=0, asked=0)
        bucket.refill()
        return web.json_response(stats)

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_post("/v1/embeddings", embeddings)
    application.router.add_get("/stats", read_stats)
    application.router.add_post("/stats", reset_stats)
    return application


def make_brain(args: argparse.Namespace) -> Any:
    if args.mode == "published":
        from aidanbench.testing.published import published_chains
        from aidanbench.testing.replay import ReplayBrain

        return ReplayBrain(published_chains())
    from aidanbench.graph.questions import bundled_questions

    models = [f"lab-model-{i}" for i in range(args.models)]
    questions = bundled_questions(args.questions)
    return LabBrain(
        models,
        questions,
        args.mean_length,
        args.max_length,
        dim=args.dim,
        answer_size=args.answer_size,
        spread=args.spread,
    )


async def serve(args: argparse.Namespace) -> None:
    medians = {"generate": args.lg, "coherence": args.lj, "embed": args.le}
    bucket = Buckets(args.limits, args.rate, args.burst)
    trace = open(args.trace, "a") if args.trace else None  # noqa: SIM115, ASYNC230 (once)
    application = app(make_brain(args), medians, args.sigma, bucket, trace, args.hold_at)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    for _ in range(1 + args.endpoints):
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=4096).start()
    print(" ".join(f"http://127.0.0.1:{port}/v1" for _, port in runner.addresses), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()
    if trace is not None:
        trace.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("mode", choices=("published", "lab"))
    p.add_argument("--lg", type=float, default=0.3)
    p.add_argument("--lj", type=float, default=0.25)
    p.add_argument("--le", type=float, default=0.05)
    p.add_argument("--sigma", type=float, default=0.0)
    p.add_argument("--rate", type=float, default=None)
    p.add_argument("--burst", type=float, default=20.0)
    p.add_argument("--limits", choices=("global", "per-model"), default="global")
    p.add_argument("--endpoints", type=int, default=0, help="ports served besides the first")
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--questions", type=int, default=63)
    p.add_argument("--mean-length", type=float, default=4.0)
    p.add_argument("--max-length", type=int, default=20)
    p.add_argument(
        "--spread", type=float, default=1.0, help="models' mean lengths differ this much"
    )
    p.add_argument("--trace", help="append a JSON line per request served to this file")
    p.add_argument("--hold-at", type=int, help="hold generate requests after N answers")
    p.add_argument("--dim", type=int, default=256, help="embedding length of the lab brain")
    p.add_argument("--answer-size", type=int, default=400, help="characters per lab answer")
    return p


def main() -> None:
    # A provider answers from other machines; this one shares the run's two cores, so it
    # keeps its collector out of the way as the run does (runner.drive.collecting_seldom):
    # its requests' objects are freed by reference counting.
    gc.freeze()
    gc.set_threshold(100_000, *gc.get_threshold()[1:])
    asyncio.run(serve(parser().parse_args()))


if __name__ == "__main__":
    main()
