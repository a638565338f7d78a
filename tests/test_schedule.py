"""``bench.schedule``: workload (b) simulated under its provider's limits."""

from __future__ import annotations

import math

import pytest

from bench.schedule import (
    LOOKAHEADS,
    ORDERS,
    Chain,
    Lane,
    Lookahead,
    Order,
    Simulation,
    floors,
    pipelined_bound,
    simulate,
)


def even(answers: int, latency: float, model: str = "model") -> Chain:
    """A chain of ``answers`` answers (the failing one last) whose requests all take
    ``latency``, its embeddings in the score cache (no request)."""
    return Chain(
        generate=(latency,) * (answers + 1),
        judge=(latency,) * answers,
        embed=(None,) * answers,
        model=model,
    )


@pytest.mark.parametrize("lookahead", LOOKAHEADS)
@pytest.mark.parametrize("order", ORDERS)
def test_a_chain_alone_takes_its_pipelined_bound(order: Order, lookahead: Lookahead) -> None:
    chain = Chain(generate=(1.0, 2.0, 0.5), judge=(1.5, 0.2), embed=(0.1, 3.0))
    assert pipelined_bound(chain) == 1.0 + 2.0 + 3.0
    assert simulate([chain], rate=None, order=order, lookahead=lookahead) == 6.0


def test_requests_beyond_the_rate_wait_for_the_bucket() -> None:
    """100 one-answer chains of instant requests: 3 requests each (the first generation,
    the judge and the look-ahead), 10 of them at once, then 10 a second."""
    chains = [even(1, 0.0)] * 100
    assert simulate(chains, rate=10, burst=10, lookahead="always") == pytest.approx(29.0)


def test_a_failing_answer_known_at_once_asks_no_lookahead() -> None:
    """The same chains, each failing answer a repeat (its embedding cached): with the
    look-ahead cancelled, 2 requests each."""
    chains = [even(1, 0.0)] * 100
    assert simulate(chains, rate=10, burst=10, lookahead="cancelled") == pytest.approx(19.0)


def test_a_lookahead_still_waiting_when_its_answer_fails_is_never_sent() -> None:
    """One slot: the first generation (1 s), then the embedding batch (0.5 s), the judge
    (1 s; the answer fails) and the look-ahead wait their turn. Cancelled, the look-ahead
    is dropped when the judge fails the answer; always asked, it takes its second."""
    chain = Chain(generate=(1.0, 1.0), judge=(1.0,), embed=(0.5,))
    runs = {
        how: Simulation([chain], "global", Lane(ceiling=1), "arrival", how) for how in LOOKAHEADS
    }
    assert {how: run.run() for how, run in runs.items()} == {"always": 3.5, "cancelled": 2.5}
    assert {how: run.requests for how, run in runs.items()} == {"always": 4, "cancelled": 3}


def test_requests_beyond_the_ceiling_wait_for_a_slot() -> None:
    assert simulate([even(1, 1.0)] * 10, rate=None, ceiling=1, lookahead="always") == 30.0


def test_an_embedding_batch_takes_a_slot_like_any_request() -> None:
    """One slot: the first generation, then the judge, the embedding batch and the
    look-ahead one after another."""
    chain = Chain(generate=(1.0, 1.0), judge=(1.0,), embed=(1.0,))
    assert simulate([chain], rate=None, ceiling=1, lookahead="always") == 4.0


def test_per_model_limits_give_each_model_its_own_bucket() -> None:
    """Two models of ten instant one-answer chains, 10 requests a second per bucket: one
    bucket for everything holds 60 requests (5 s beyond its first 10); per model, each
    model's 20 generations and the judge's 20 requests each have a bucket (1 s)."""
    chains = [even(1, 0.0, "a")] * 10 + [even(1, 0.0, "b")] * 10
    each = {"rate": 10, "burst": 10, "lookahead": "always"}
    assert simulate(chains, limits="global", **each) == pytest.approx(5.0)  # type: ignore[arg-type]
    assert simulate(chains, limits="per-model", **each) == pytest.approx(1.0)  # type: ignore[arg-type]


def test_the_floors_count_each_answer_generated_and_judged_once() -> None:
    """Two models of ten one-answer chains of 1 s requests: 40 requests needed (no
    look-ahead, no embedding), 40 request-seconds."""
    chains = [even(1, 1.0, "a")] * 10 + [even(1, 1.0, "b")] * 10
    one = floors(chains, "global", Lane(ceiling=4, rate=10, burst=10))
    assert (one.bound, one.rate, one.slots, one.lower) == (2.0, 3.0, 10.0, 10.0)
    each = floors(chains, "per-model", Lane(ceiling=4, rate=10, burst=10))
    assert (each.rate, each.slots) == (1.0, 5.0)
    assert floors(chains, "global", Lane()).lower == 2.0 == pipelined_bound(chains[0])
    assert Lane().ceiling == math.inf


def test_the_oracle_lets_the_longest_chain_go_first() -> None:
    """Ten instant chains asked before a slow one of three answers, one request a
    second: in arrival order the slow chain starts after them and queues behind their
    requests; longest first it starts at once and waits only for the bucket's tokens (a
    second for its judge and two for its next generation, each turn)."""
    chains = [even(1, 0.0)] * 10 + [even(3, 10.0)]
    assert pipelined_bound(chains[-1]) == 40.0
    asked = {"rate": 1, "burst": 1, "lookahead": "always"}
    assert simulate(chains, order="longest", **asked) == pytest.approx(46.0)  # type: ignore[arg-type]
    assert simulate(chains, order="arrival", **asked) == pytest.approx(64.0)  # type: ignore[arg-type]
