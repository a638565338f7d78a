"""The ``aidanbench`` command: run, estimate, demo, report, view, rescore, plot, calibrate,
export, forget."""

from __future__ import annotations

import importlib
from types import ModuleType

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


def commands() -> list[ModuleType]:
    """The command modules; each has ``register(subparsers)``."""
    return [importlib.import_module(f"aidanbench.cli.{name}") for name in COMMANDS]
