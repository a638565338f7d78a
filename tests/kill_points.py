"""An ``aidanbench`` command killed (SIGKILL) just before its Nth change to the disk.

``python -m tests.kill_points N COUNT_FILE ARGS...`` runs ``aidanbench ARGS...`` and kills
the process with SIGKILL as it is about to make its Nth change: an ``os.replace``,
``os.rename``, ``os.unlink`` or ``os.fsync`` (every whole write ends in one), or a SQLite
statement that writes (``INSERT``, ``UPDATE``, ``DELETE``, ``COMMIT``). With N = 0 it runs
to the end and writes how many changes it made to COUNT_FILE, so a test can kill a command
at each of them in turn (``kill_points``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

WRITES = ("INSERT", "UPDATE", "DELETE", "COMMIT", "REPLACE")
"""SQLite statements that change a database."""


def install(kill_at: int) -> list[int]:
    """Count (and at ``kill_at``, die before) every change to the disk; the count."""
    count = [0]

    def change() -> None:
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def counted(call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            change()
            return call(*args, **kwargs)

        return wrapper

    for name in ("replace", "rename", "unlink", "remove", "fsync"):
        setattr(os, name, counted(getattr(os, name)))
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_trace_callback(
            lambda statement: change() if statement.lstrip().upper().startswith(WRITES) else None
        )
        return db

    sqlite3.connect = traced  # type: ignore[assignment]
    return count


def main() -> int:
    kill_at, count_file, *args = sys.argv[1:]
    count = install(int(kill_at))
    from aidanbench.cli.main import main as aidanbench

    try:
        status = aidanbench(args)
    finally:
        Path(count_file).write_text(str(count[0]))
    return status


def killed(
    kill_at: int, count_file: Path, args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``aidanbench args`` killed before its ``kill_at``th change (0: not killed)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.kill_points", str(kill_at), str(count_file), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


if __name__ == "__main__":
    sys.exit(main())
