"""Workload (b) scheduled on paper: how fast its provider lets any order of requests go.

    python -m bench.schedule [--models 80] [--scale 1] [--rate 400] [--burst 400]

``bench.lab`` sets a run of workload (b) against two floors, each counting one limit
alone: the bound (the longest chain by itself, pipelined, never waiting for a slot) and
the rate floor (the provider's rate, every request without its chain). A real run meets
both at once: a chain's next request waits for its last answers, and a request beyond
the rate waits for the bucket, so while the provider is saturated every chain goes
slower than its bound, and what is left when it stops being saturated runs at the
chains' own pace. This simulates both limits together, with the lab provider's own
chain lengths and latency draws (``bench.lab_serve``), for the loop the engine runs (each
answer's judge, embedding and the next answer's generation at once; ``pipelined_bound``)
and a scheduler better than any real one: it knows the rate (no 429s), costs no CPU,
and embeds for free (one batch could carry every answer). Two orders for the requests
waiting for the provider:

* ``arrival``: in the order they are asked, as the engine's endpoint limiter serves them;
* ``deepest``: the chain with the most answers so far first, the one other order a run
  could use;
* ``longest``: the chain with the most answers left first, an oracle that knows every
  chain's length before it starts (no real scheduler does).

The last is no proof of the least possible time (ordering such chains is a
precedence-constrained scheduling problem), but it is the usual good rule with
everything known, so a run slower than it is not slowed by its order alone.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.lab_serve import LabBrain, chain_length, draw

Order = Literal["arrival", "deepest", "longest"]
ORDERS: tuple[Order, ...] = ("arrival", "deepest", "longest")
LAB_MEDIANS = {"generate": 3.0, "coherence": 2.0, "embed": 0.3}
"""Median latencies of workload (b) at scale 1, in seconds (``bench.lab``)."""


@dataclass(frozen=True)
class Chain:
    """One question's requests as the lab provider times them, answer by answer (the
    failing answer last)."""

    generate: tuple[float, ...]
    """Generation k's latency, one more than there are answers: the look-ahead after
    the failing answer is asked too, before the answer is known to fail."""
    judge: tuple[float, ...]
    embed: tuple[float, ...]

    @property
    def answers(self) -> int:
        return len(self.judge)


def pipelined_bound(chain: Chain) -> float:
    """The chain alone: its first generation, then for each answer the longest of its
    judge, its embedding and the next generation."""
    total = chain.generate[0]
    for k in range(chain.answers):
        total += max(chain.judge[k], chain.embed[k], chain.generate[k + 1])
    return total


def lab_chains(
    models: Sequence[str],
    questions: Sequence[str],
    *,
    mean_length: float,
    max_length: int,
    scale: float,
    sigma: float,
) -> list[Chain]:
    """Every chain of workload (b), with the latencies ``bench.lab_serve`` will draw for
    its requests (keyed as the provider keys them: generations by model, question and
    turn, judgments by question and answer, embeddings by answer)."""
    from aidanbench.nodes.parsing import extract_answer

    generate, judge, embed = (LAB_MEDIANS[k] * scale for k in ("generate", "coherence", "embed"))
    brain = LabBrain(models, questions, mean_length, max_length)
    chains = []
    for model in models:
        for question in questions:
            answers: list[str] = []
            for _ in range(chain_length(model, question, mean_length, max_length) + 1):
                answers.append(extract_answer(brain.generate(model, question, answers))[0])
            chains.append(
                Chain(
                    generate=tuple(
                        draw(generate, sigma, "g", model, question, k)
                        for k in range(len(answers) + 1)
                    ),
                    judge=tuple(draw(judge, sigma, "j", question, a) for a in answers),
                    embed=tuple(draw(embed, sigma, "e", a) for a in answers),
                )
            )
    return chains


def rate_floor(turns: int, rate: float | None, burst: float | None) -> float:
    """The least wall time the provider's rate limit allows the run: every answer needs at
    least a generate and a judge request (embeddings may all be batched, the look-ahead
    left out), and beyond the bucket's first ``burst`` the provider takes ``rate`` a
    second. 0 without a rate limit."""
    if not rate:
        return 0.0
    return max(0.0, 2 * turns - (burst or rate)) / rate


def simulate(
    chains: Sequence[Chain],
    *,
    rate: float | None,
    burst: float | None = None,
    ceiling: int = 1024,
    order: Order = "arrival",
) -> float:
    """Seconds until every chain has stopped, every chain started at 0.

    Generations and judgments each take a request slot (at most ``ceiling`` in flight)
    and a token of the provider's bucket (``rate`` a second, ``burst`` at most; None: no
    rate limit); the requests waiting for either go in ``order``. Embeddings take
    neither."""
    sequence = itertools.count()
    done: list[tuple[float, int, int, str, int]] = []  # (time, seq, chain, kind, answer)
    waiting: list[tuple[tuple[float, int], int, str, int]] = []
    candidate = [0] * len(chains)  # the answer each chain is scoring
    pending = [0] * len(chains)  # its requests not yet answered for that answer
    capacity = burst if burst is not None else (rate or 0.0)
    tokens, refilled, in_flight, now, last = capacity, 0.0, 0, 0.0, 0.0

    def ask(chain: int, kind: str, k: int) -> None:
        rank = {
            "arrival": 0,
            "deepest": -candidate[chain],
            "longest": candidate[chain] - chains[chain].answers,
        }[order]
        key = (rank, next(sequence))
        heapq.heappush(waiting, (key, chain, kind, k))

    def score(chain: int, k: int) -> None:
        candidate[chain], pending[chain] = k, 3
        ask(chain, "judge", k)
        ask(chain, "generate", k + 1)
        heapq.heappush(done, (now + chains[chain].embed[k], next(sequence), chain, "embed", k))

    for chain in range(len(chains)):
        ask(chain, "first", 0)
    while waiting or done:
        if rate:
            tokens, refilled = min(capacity, tokens + (now - refilled) * rate), now
        while waiting and in_flight < ceiling and (not rate or tokens >= 1.0):
            _, chain, kind, k = heapq.heappop(waiting)
            tokens -= 1.0 if rate else 0.0
            in_flight += 1
            latency = chains[chain].judge[k] if kind == "judge" else chains[chain].generate[k]
            heapq.heappush(done, (now + latency, next(sequence), chain, kind, k))
        next_token = now + (1.0 - tokens) / rate if rate and waiting else math.inf
        if waiting and in_flight < ceiling and next_token < (done[0][0] if done else math.inf):
            now, refilled, tokens = next_token, next_token, 1.0  # the next token, exactly
            continue
        now, _, chain, kind, k = heapq.heappop(done)
        in_flight -= 0 if kind == "embed" else 1
        if kind == "first":
            score(chain, 0)
            continue
        pending[chain] -= 1
        if pending[chain] == 0:
            last = now
            if candidate[chain] + 1 < chains[chain].answers:
                score(chain, candidate[chain] + 1)
    return last


def workload_arguments(p: argparse.ArgumentParser, *, models: int, scale: float) -> None:
    """Workload (b)'s options, shared with ``bench.lab``: its chains, latencies and
    provider."""
    p.add_argument("--models", type=int, default=models)
    p.add_argument("--questions", type=int, default=63)
    p.add_argument("--mean-length", type=float, default=4.0)
    p.add_argument("--max-length", type=int, default=20)
    p.add_argument("--scale", type=float, default=scale, help="latency scale factor")
    p.add_argument("--sigma", type=float, default=0.5, help="log-normal sigma (tail)")
    p.add_argument("--rate", type=float, default=400.0, help="provider's requests/s (0: none)")
    p.add_argument(
        "--burst",
        type=float,
        default=None,
        help="requests the provider's bucket holds at once (default: one second of --rate)",
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload_arguments(p, models=80, scale=1.0)
    p.add_argument("--ceiling", type=int, default=1024, help="requests in flight at most")
    args = p.parse_args(argv)

    from aidanbench.graph.questions import bundled_questions

    chains = lab_chains(
        [f"lab-model-{i}" for i in range(args.models)],
        bundled_questions(args.questions),
        mean_length=args.mean_length,
        max_length=args.max_length,
        scale=args.scale,
        sigma=args.sigma,
    )
    bound = max(pipelined_bound(c) for c in chains)
    rate = args.rate or None
    turns = sum(c.answers for c in chains)
    floor = rate_floor(turns, rate, args.burst)
    print(
        f"(b) {args.models} models x {args.questions} questions, {len(chains)} chains, "
        f"{turns} answers, scale {args.scale:g}: bound {bound:.1f} s, rate floor {floor:.1f} s"
    )
    for order in ORDERS:
        wall = simulate(chains, rate=rate, burst=args.burst, ceiling=args.ceiling, order=order)
        print(f"  {order:<8} {wall:7.1f} s  {wall / bound:5.2f}x bound")


if __name__ == "__main__":
    main()
