"""Workload (b) scheduled on paper: how fast its provider's limits let any order of requests go.

    python -m bench.schedule [--models 80] [--scale 1] [--limits per-model|global]
                             [--rate 400] [--burst 400] [--ceiling 0]

``bench.lab`` sets a run of workload (b) against floors that each count one limit alone:
the bound (the longest chain by itself, pipelined, never waiting), the rate floor (each
bucket's requests at its rate, every request without its chain) and the slot floor (each
endpoint's request-seconds over its slots). A real run meets them all at once: a chain's
next request waits for its last answers, a request beyond a rate waits for the bucket and
one beyond the slots for a slot, so while a limit is saturated every chain goes slower
than its bound. This simulates them together, with the lab provider's own chain lengths
and latency draws (``bench.lab_serve``), for the loop the engine runs (each answer's
judge, embedding and the next answer's look-ahead generation at once; ``pipelined_bound``)
and a scheduler better than any real one: it knows the rates (no 429s) and costs no CPU.
Embeddings go as the engine's batcher sends them (``services.batching``: two batches in
flight, the rest waiting together), each batch a request like any other; an answer the
chain already holds (the lab's failing repeat) is in the score cache and sends nothing.

``--limits`` sets what the provider limits (``lanes``):

* ``global``: one bucket and one endpoint for every model, the judge and the embedder
  (the lab provider before, and a run through one key of one provider);
* ``per-model``: each model under test its own bucket and endpoint, one shared judge
  bucket and endpoint and one shared embedding bucket and endpoint, each ``--rate``:
  real providers limit per account and model, and the judge and the embedder are one
  model each, shared by every model under test.

The requests waiting at a limit go in one of these orders (``ORDERS``):

* ``arrival``: in the order they are asked, as a FIFO limiter serves them;
* ``deepest``: the chain with the most answers so far first, and ``prior``: the chain
  whose model's chains have been longest so far first (a per-model length prior learned
  during the run; ties in arrival order): what a run can know;
* ``longest``: the chain with the most answers left first, and ``critical``: the chain
  with the longest pipelined path left first; oracles that know every chain's future
  (no real scheduler does), so a run slower than them is not slowed by its order alone.

And the look-ahead generation (``LOOKAHEADS``) is ``always`` asked with its answer's
scoring, as before, or ``cancelled`` (the engine's): asked at once, but dropped while it
still waits for its limit if its answer fails meanwhile. A failing answer whose embedding
is cached (the lab's repeats) is known to fail at once, before its look-ahead is asked.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench.lab_serve import LabBrain, chain_length, draw, model_mean

Order = Literal["arrival", "deepest", "prior", "longest", "critical"]
ORDERS: tuple[Order, ...] = ("arrival", "deepest", "prior", "longest", "critical")
Lookahead = Literal["always", "cancelled"]
LOOKAHEADS: tuple[Lookahead, ...] = ("always", "cancelled")
Limits = Literal["global", "per-model"]
LAB_MEDIANS = {"generate": 3.0, "coherence": 2.0, "embed": 0.3}
"""Median latencies of workload (b) at scale 1, in seconds (``bench.lab``)."""
BATCHES_IN_FLIGHT = 2
"""The embedding batcher's batches in flight (``services.batching.MAX_BATCHES_IN_FLIGHT``)."""
TEXTS_PER_BATCH = 128
"""Texts per embedding batch (``services.batching.MAX_TEXTS_PER_BATCH``)."""


@dataclass(frozen=True)
class Chain:
    """One question's requests as the lab provider times them, answer by answer (the
    failing answer last)."""

    generate: tuple[float, ...]
    """Generation k's latency, one more than there are answers: the look-ahead after
    the failing answer."""
    judge: tuple[float, ...]
    embed: tuple[float | None, ...]
    """Each answer's embedding; None when the chain already holds its text (cached)."""
    model: str = "model"

    @property
    def answers(self) -> int:
        return len(self.judge)

    def fails_at_once(self) -> bool:
        """Whether the failing answer is known to fail before any request: its embedding
        is cached (a repeat, novelty 0)."""
        return self.embed[-1] is None


def pipelined_bound(chain: Chain) -> float:
    """The chain alone: its first generation, then for each answer the longest of its
    judge, its embedding and the next generation."""
    total = chain.generate[0]
    for k in range(chain.answers):
        total += max(chain.judge[k], chain.embed[k] or 0.0, chain.generate[k + 1])
    return total


def lab_chains(
    models: Sequence[str],
    questions: Sequence[str],
    *,
    mean_length: float,
    max_length: int,
    scale: float,
    sigma: float,
    spread: float = 1.0,
) -> list[Chain]:
    """Every chain of workload (b), with the latencies ``bench.lab_serve`` will draw for
    its requests (keyed as the provider keys them: generations by model, question and
    turn, judgments by question and answer, embeddings by answer)."""
    from aidanbench.nodes.parsing import extract_answer

    generate, judge, embed = (LAB_MEDIANS[k] * scale for k in ("generate", "coherence", "embed"))
    brain = LabBrain(models, questions, mean_length, max_length, spread=spread)
    chains = []
    for model in models:
        mean = model_mean(model, mean_length, spread)
        for question in questions:
            answers: list[str] = []
            for _ in range(chain_length(model, question, mean, max_length) + 1):
                answers.append(extract_answer(brain.generate(model, question, answers))[0])
            chains.append(
                Chain(
                    generate=tuple(
                        draw(generate, sigma, "g", model, question, k)
                        for k in range(len(answers) + 1)
                    ),
                    judge=tuple(draw(judge, sigma, "j", question, a) for a in answers),
                    embed=tuple(
                        None if a in answers[:k] else draw(embed, sigma, "e", a)
                        for k, a in enumerate(answers)
                    ),
                    model=model,
                )
            )
    return chains


@dataclass(frozen=True)
class Lane:
    """One limit a request passes: an endpoint's slots and its bucket's rate."""

    ceiling: float = math.inf
    """Requests in flight at most (``math.inf``: no ceiling)."""
    rate: float | None = None
    """Requests a second (None: no rate limit)."""
    burst: float | None = None
    """Requests the bucket holds at once (None: one second of ``rate``)."""

    @property
    def capacity(self) -> float:
        return self.burst if self.burst is not None else (self.rate or 0.0)


def lanes(
    limits: Limits, chains: Sequence[Chain], lane: Lane
) -> tuple[dict[str, Lane], Callable[[Chain, str], str]]:
    """The provider's limits under ``limits``, each like ``lane``, and which one a request
    of a chain (``generate``, ``judge``, ``embed``) passes."""
    if limits == "global":
        return {"provider": lane}, lambda chain, kind: "provider"
    models = {chain.model: lane for chain in chains}
    return {
        **models,
        "judge": lane,
        "embed": lane,
    }, lambda chain, kind: chain.model if kind == "generate" else kind


def needed(chains: Sequence[Chain], route: Callable[[Chain, str], str]) -> dict[str, list[float]]:
    """The latencies of the requests no run can do without, by lane: each answer
    generated and judged once; embeddings batched away entirely."""
    requests: dict[str, list[float]] = {}
    for chain in chains:
        requests.setdefault(route(chain, "generate"), []).extend(chain.generate[:-1])
        requests.setdefault(route(chain, "judge"), []).extend(chain.judge)
    return requests


def rate_floor(requests: int, lane: Lane) -> float:
    """The least wall time ``lane``'s bucket lets ``requests`` take: beyond its first
    ``burst``, ``rate`` a second. 0 without a rate limit."""
    if not lane.rate:
        return 0.0
    return max(0.0, requests - lane.capacity) / lane.rate


def slot_floor(latencies: Sequence[float], lane: Lane) -> float:
    """The least wall time ``lane``'s slots let requests of these latencies take."""
    return sum(latencies) / lane.ceiling


@dataclass(frozen=True)
class Floors:
    """What workload (b) takes at least, one limit at a time."""

    bound: float
    rate: float
    slots: float

    @property
    def lower(self) -> float:
        return max(self.bound, self.rate, self.slots)


def floors(chains: Sequence[Chain], limits: Limits, lane: Lane) -> Floors:
    """The pipelined bound, and the rate and slot floors of the busiest lane."""
    limits_of, route = lanes(limits, chains, lane)
    requests = needed(chains, route)
    return Floors(
        bound=max(pipelined_bound(chain) for chain in chains),
        rate=max(rate_floor(len(r), limits_of[name]) for name, r in requests.items()),
        slots=max(slot_floor(r, limits_of[name]) for name, r in requests.items()),
    )


@dataclass(eq=False)
class _Request:
    chain: int
    kind: str
    """``generate``, ``judge`` or ``embed`` (a batch)."""
    k: int
    """The answer it generates or scores (for a batch: its texts' (chain, answer))."""
    latency: float
    lane: str
    texts: list[tuple[int, int]] = field(default_factory=list)
    sent: bool = False
    cancelled: bool = False


@dataclass
class _LaneState:
    lane: Lane
    tokens: float
    refilled: float = 0.0
    in_flight: int = 0
    due: bool = False
    """Whether a wake-up for its next token is set."""
    waiting: list[tuple[tuple[float, ...], int, _Request]] = field(default_factory=list)


class Simulation:
    """Workload (b) under its provider's limits, event by event (``simulate``)."""

    def __init__(
        self,
        chains: Sequence[Chain],
        limits: Limits,
        lane: Lane,
        order: Order,
        lookahead: Lookahead,
    ) -> None:
        self.chains = chains
        self.order = order
        self.lookahead = lookahead
        limits_of, self.route = lanes(limits, chains, lane)
        self.lanes = {name: _LaneState(limit, limit.capacity) for name, limit in limits_of.items()}
        self.sequence = itertools.count()
        self.now = 0.0
        self.events: list[tuple[float, int, _Request]] = []
        self.tokens_due: list[tuple[float, int, str]] = []
        self.ready: set[str] = set()
        self.pending = [0] * len(chains)
        """Requests of each chain's turn not answered yet."""
        self.scoring = [0] * len(chains)
        """The answer each chain scores now."""
        self.next_generation: list[_Request | None] = [None] * len(chains)
        self.texts: list[tuple[int, int]] = []
        self.batches = 0
        self.requests = 0
        self.finished = 0.0
        self.lengths: dict[str, tuple[int, int]] = {}
        """Answers and chains of each model's stopped chains (``prior``)."""
        self.remaining = [self._remaining(chain) for chain in chains]

    @staticmethod
    def _remaining(chain: Chain) -> list[float]:
        """Each turn's pipelined path to the chain's end (``critical``)."""
        path = [0.0] * (chain.answers + 1)
        for k in reversed(range(chain.answers)):
            turn = max(chain.judge[k], chain.embed[k] or 0.0, chain.generate[k + 1])
            path[k] = path[k + 1] + turn
        return path

    def rank(self, chain: int, k: int) -> float:
        if k < 0:
            return -math.inf  # an embedding batch: every chain in it waits for it
        if self.order == "deepest":
            return -k
        if self.order == "prior":
            total, count = self.lengths.get(self.chains[chain].model, (0, 0))
            return -total / count if count else 0.0
        if self.order == "longest":
            return k - self.chains[chain].answers
        if self.order == "critical":
            return -self.remaining[chain][min(k, self.chains[chain].answers)]
        return 0.0

    def ask(self, request: _Request, k: int) -> None:
        lane = self.lanes[request.lane]
        key = (self.rank(request.chain, k),)
        heapq.heappush(lane.waiting, (key, next(self.sequence), request))
        self.ready.add(request.lane)

    def generation(self, chain: int, k: int) -> _Request:
        c = self.chains[chain]
        request = _Request(chain, "generate", k, c.generate[k], self.route(c, "generate"))
        self.ask(request, k)
        return request

    def score(self, chain: int, k: int) -> None:
        """Answer ``k`` of ``chain`` is generated: its judge, embedding and look-ahead."""
        c = self.chains[chain]
        self.scoring[chain], self.pending[chain] = k, 2
        self.ask(_Request(chain, "judge", k, c.judge[k], self.route(c, "judge")), k)
        if c.embed[k] is None:
            self.pending[chain] -= 1
        else:
            self.texts.append((chain, k))
            self.batch()
        last = k + 1 == c.answers
        if self.lookahead == "cancelled" and last and c.fails_at_once():
            self.next_generation[chain] = None
            return
        self.pending[chain] += 1
        self.next_generation[chain] = self.generation(chain, k + 1)

    def batch(self) -> None:
        while self.texts and (
            self.batches < BATCHES_IN_FLIGHT or len(self.texts) >= TEXTS_PER_BATCH
        ):
            texts, self.texts = self.texts[:TEXTS_PER_BATCH], self.texts[TEXTS_PER_BATCH:]
            latency = max(self.chains[c].embed[k] or 0.0 for c, k in texts)
            chain, k = texts[0]
            request = _Request(chain, "embed", k, latency, self.route(self.chains[chain], "embed"))
            request.texts = texts
            self.batches += 1
            self.ask(request, -1)

    def dispatch(self, name: str) -> None:
        state = self.lanes[name]
        lane = state.lane
        if lane.rate:
            state.tokens = min(
                lane.capacity, state.tokens + (self.now - state.refilled) * lane.rate
            )
            state.refilled = self.now
        while state.waiting and state.in_flight < lane.ceiling:
            if state.waiting[0][2].cancelled:
                heapq.heappop(state.waiting)
                continue
            if lane.rate and state.tokens < 1.0 - 1e-9:
                if not state.due:
                    due = self.now + (1.0 - state.tokens) / lane.rate
                    heapq.heappush(self.tokens_due, (due, next(self.sequence), name))
                    state.due = True
                return
            _, _, request = heapq.heappop(state.waiting)
            state.tokens -= 1.0 if lane.rate else 0.0
            state.in_flight += 1
            request.sent = True
            self.requests += 1
            heapq.heappush(self.events, (self.now + request.latency, next(self.sequence), request))

    def answered(self, request: _Request) -> None:
        self.lanes[request.lane].in_flight -= 1
        self.ready.add(request.lane)
        if request.kind == "embed":
            self.batches -= 1
            for chain, _ in request.texts:
                self.turn_part_done(chain)
            self.batch()
            return
        chain = request.chain
        if request.kind == "generate" and self.next_generation[chain] is not request:
            self.score(chain, request.k)  # the chain's first generation
            return
        if request.kind == "judge" and self.lookahead == "cancelled":
            self.judged(chain, request.k)
        self.turn_part_done(chain)

    def judged(self, chain: int, k: int) -> None:
        """The judge's verdict: a failing answer's look-ahead, still waiting, is dropped."""
        c = self.chains[chain]
        waiting = self.next_generation[chain]
        if k + 1 == c.answers and waiting is not None and not waiting.sent:
            waiting.cancelled = True
            self.next_generation[chain] = None
            self.pending[chain] -= 1

    def turn_part_done(self, chain: int) -> None:
        self.pending[chain] -= 1
        if self.pending[chain] > 0:
            return
        k = self.scoring[chain]
        self.finished = self.now
        c = self.chains[chain]
        if k + 1 < c.answers:
            self.score(chain, k + 1)
        else:
            total, count = self.lengths.get(c.model, (0, 0))
            self.lengths[c.model] = (total + c.answers, count + 1)

    def run(self) -> float:
        for chain in range(len(self.chains)):
            self.generation(chain, 0)
        while True:
            for name in sorted(self.ready):
                self.dispatch(name)
            self.ready.clear()
            event = self.events[0][0] if self.events else math.inf
            token = self.tokens_due[0][0] if self.tokens_due else math.inf
            if event == token == math.inf:
                return self.finished
            if token < event:
                self.now, _, name = heapq.heappop(self.tokens_due)
                self.lanes[name].due = False
                self.ready.add(name)
                continue
            self.now, _, request = heapq.heappop(self.events)
            self.answered(request)


def simulate(
    chains: Sequence[Chain],
    *,
    rate: float | None,
    burst: float | None = None,
    ceiling: float = math.inf,
    order: Order = "arrival",
    limits: Limits = "global",
    lookahead: Lookahead = "cancelled",
) -> float:
    """Seconds until every chain has stopped, every chain started at 0: each request
    (generation, judgment, embedding batch) takes a slot of its lane (at most
    ``ceiling`` in flight) and a token of its bucket (``rate`` a second, ``burst`` at
    most; None: no rate limit), and the requests waiting for either go in ``order``."""
    lane = Lane(ceiling=ceiling, rate=rate, burst=burst)
    return Simulation(chains, limits, lane, order, lookahead).run()


def lab_models(n: int) -> list[str]:
    return [f"lab-model-{i}" for i in range(n)]


def chains_of(args: argparse.Namespace) -> list[Chain]:
    """Workload (b)'s chains (``lab_chains``), from ``workload_arguments``' options."""
    from aidanbench.graph.questions import bundled_questions

    return lab_chains(
        lab_models(args.models),
        bundled_questions(args.questions),
        mean_length=args.mean_length,
        max_length=args.max_length,
        scale=args.scale,
        sigma=args.sigma,
        spread=args.spread,
    )


def workload_arguments(p: argparse.ArgumentParser, *, models: int, scale: float) -> None:
    """Workload (b)'s options, shared with ``bench.lab``: its chains, latencies and
    provider."""
    p.add_argument("--models", type=int, default=models)
    p.add_argument("--questions", type=int, default=63)
    p.add_argument("--mean-length", type=float, default=4.0)
    p.add_argument("--max-length", type=int, default=20)
    p.add_argument(
        "--spread",
        type=float,
        default=1.0,
        help="each model's mean length drawn between --mean-length over and times this",
    )
    p.add_argument("--scale", type=float, default=scale, help="latency scale factor")
    p.add_argument("--sigma", type=float, default=0.5, help="log-normal sigma (tail)")
    p.add_argument("--rate", type=float, default=400.0, help="each bucket's requests/s (0: none)")
    p.add_argument(
        "--burst",
        type=float,
        default=None,
        help="requests a bucket holds at once (default: one second of --rate)",
    )
    p.add_argument(
        "--limits",
        choices=("per-model", "global"),
        default="global",
        help="per-model: a bucket and an endpoint per model under test, one for the judge "
        "and one for the embedder; global: one of each for everything",
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload_arguments(p, models=80, scale=1.0)
    p.add_argument(
        "--ceiling", type=float, default=0, help="requests in flight per endpoint (0: no ceiling)"
    )
    args = p.parse_args(argv)

    chains = chains_of(args)
    lane = Lane(ceiling=args.ceiling or math.inf, rate=args.rate or None, burst=args.burst)
    turns = sum(c.answers for c in chains)
    floor = floors(chains, args.limits, lane)
    print(
        f"(b) {args.models} models x {args.questions} questions, {len(chains)} chains, "
        f"{turns} answers, scale {args.scale:g}, limits {args.limits}: bound "
        f"{floor.bound:.1f} s, rate floor {floor.rate:.1f} s, slot floor {floor.slots:.1f} s, "
        f"lower bound {floor.lower:.1f} s"
    )
    for lookahead in LOOKAHEADS:
        for order in ORDERS:
            simulation = Simulation(chains, args.limits, lane, order, lookahead)
            wall = simulation.run()
            print(
                f"  {lookahead:<9} {order:<8} {wall:7.1f} s  {wall / floor.bound:5.2f}x bound  "
                f"{wall / floor.lower:5.2f}x lower bound  "
                f"{simulation.requests / turns:5.3f} requests per answer"
            )


if __name__ == "__main__":
    main()
