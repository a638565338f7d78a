"""Errors the user can fix: reported as one line, exit status 2 (defined in
``aidanbench.core.errors``, which every layer may raise from)."""

from __future__ import annotations

from aidanbench.core.errors import UsageError, printable

__all__ = ["UsageError", "printable"]
