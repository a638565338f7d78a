"""``bench.schedule``: workload (b) simulated under its provider's rate and ceiling."""

from __future__ import annotations

import pytest

from bench.schedule import ORDERS, Chain, Order, pipelined_bound, simulate


def even(answers: int, latency: float) -> Chain:
    """A chain of ``answers`` answers (the failing one last) whose requests all take
    ``latency``, embeddings none."""
    return Chain(
        generate=(latency,) * (answers + 1),
        judge=(latency,) * answers,
        embed=(0.0,) * answers,
    )


@pytest.mark.parametrize("order", ORDERS)
def test_a_chain_alone_takes_its_pipelined_bound(order: Order) -> None:
    chain = Chain(generate=(1.0, 2.0, 0.5), judge=(1.5, 0.2), embed=(0.1, 3.0))
    assert pipelined_bound(chain) == 1.0 + 2.0 + 3.0
    assert simulate([chain], rate=None, order=order) == 6.0


def test_requests_beyond_the_rate_wait_for_the_bucket() -> None:
    """100 one-answer chains of instant requests: 3 requests each (the first generation,
    the judge and the look-ahead), 10 of them at once, then 10 a second."""
    assert simulate([even(1, 0.0)] * 100, rate=10, burst=10) == pytest.approx(29.0)


def test_requests_beyond_the_ceiling_wait_for_a_slot() -> None:
    assert simulate([even(1, 1.0)] * 10, rate=None, ceiling=1) == 30.0


def test_the_oracle_lets_the_longest_chain_go_first() -> None:
    """Ten instant chains asked before a slow one of three answers, one request a
    second: in arrival order the slow chain starts after them and queues behind their
    requests; longest first it starts at once and waits only for the bucket's tokens (a
    second for its judge and two for its next generation, each turn)."""
    chains = [even(1, 0.0)] * 10 + [even(3, 10.0)]
    assert pipelined_bound(chains[-1]) == 40.0
    assert simulate(chains, rate=1, burst=1, order="longest") == pytest.approx(46.0)
    assert simulate(chains, rate=1, burst=1, order="arrival") == pytest.approx(64.0)
