"""The ``aidanbench`` command line: one module per command, listed in ``COMMANDS``."""

from __future__ import annotations

from typing import Any

COMMANDS = (
    "run",
    "estimate",
    "demo",
    "report",
    "view",
    "rescore",
    "plot",
    "calibrate",
    "export",
    "forget",
)
"""Command modules of this package, in the order ``--help`` lists them."""

SUMMARIES = {
    "run": "score models on AidanBench (resumable)",
    "estimate": "tokens and dollars a planned run would cost (no API call)",
    "demo": "run the benchmark offline on the published run (no key; a self-test)",
    "report": "summarise scores of run directories or results files",
    "view": "write one offline HTML report (leaderboard, heat map, chains, comparison)",
    "rescore": "recompute scores under other thresholds (or a judge: --judge-model)",
    "plot": "draw PNG charts of scores, per-question scores, a trajectory and stop reasons",
    "calibrate": "calibrate a judge or an embedding model's threshold against a reference run",
    "export": "write runs as Inspect logs, Every Eval Ever records or Hub eval results",
    "forget": "remove a model's threads and results from a run directory",
}
"""Each command's one-line help, for its own parser and the top-level list alike."""


def add_command(subparsers: Any, name: str, description: str) -> Any:
    """The parser of command ``name``, with its summary, for the module's ``register`` to fill."""
    return subparsers.add_parser(name, help=SUMMARIES[name], description=description)
