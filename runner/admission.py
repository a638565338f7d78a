"""How many questions a session keeps in flight: the one place the number is decided.

A question is a chain of turns, each a few HTTP requests, and spends nearly all its time
waiting on them, so the more chains in flight the sooner a run ends, up to what the
endpoints take. What they take is found and held by each endpoint's adaptive limit
(``services.limits``): a chain beyond it waits for a request slot, not for the run. So
no user should have to guess a number: unless one is given (``--concurrency N``,
``RunSpec.concurrency``), every question of the session is in flight, up to a ceiling:

* on this machine, memory: each chain in flight holds its state (answers and their
  vectors, its next prompt, the graph's step), ``BYTES_PER_CHAIN``, and all of them
  together at most ``memory_budget()``;
* on a LangGraph server (``--server``), ``REMOTE_IN_FLIGHT``: this client holds one
  connection per run it follows, from the SDK's pool.

Which started chain goes first when the machine, not the endpoint, is the bottleneck is
not decided here: the drive loop admits chains, the limiters order requests.
"""

from __future__ import annotations

import os

BYTES_PER_CHAIN = 512 * 1024
"""Memory one more chain in flight costs: the slope of resident memory over chains in
flight that ``bench.in_flight_memory`` measures with every chain holding 20 answers (about
the published run's mean) and their vectors of 3,072 floats, rounded up (README,
Performance). Longer chains cost more, by about an answer and its vector each."""

MEMORY_BUDGET_BYTES = 2**30
"""Memory the chains in flight may hold together, at most (a quarter of the machine's
physical memory, when that is less)."""

REMOTE_IN_FLIGHT = 64
"""Runs followed at once on a LangGraph server. The SDK's HTTP client has a pool of 100
connections and fails a request that waits 5 s for one; each run followed holds one
(its event stream, kept alive by the server's heartbeats while it is pending), and
the rest are left for the thread lookups and state reads around them."""


def chains_in_flight(requested: int | None, chains: int, *, remote: bool = False) -> int:
    """Questions kept in flight: ``requested`` when given, else all ``chains`` of the
    session up to the ceiling (``remote``: a LangGraph server runs them)."""
    if requested is not None:
        return requested
    return max(1, min(chains, ceiling(remote=remote)))


def ceiling(*, remote: bool = False) -> int:
    """The most questions kept in flight when no number is given."""
    if remote:
        return REMOTE_IN_FLIGHT
    return max(1, memory_budget() // BYTES_PER_CHAIN)


def memory_budget() -> int:
    """``MEMORY_BUDGET_BYTES``, or a quarter of physical memory when that is less."""
    physical = physical_memory()
    if physical is None:
        return MEMORY_BUDGET_BYTES
    return min(MEMORY_BUDGET_BYTES, physical // 4)


def physical_memory() -> int | None:
    """The machine's physical memory in bytes, None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
