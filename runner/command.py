"""A session run as the command runs it: ``aidanbench run`` and ``aidanbench demo`` call
``run_session``, which checks and runs one session through the engine and turns its ends
into what a command says. Ctrl-C or SIGTERM (the driver writes what is known and closes the
checkpointer first) is the one line saying how to resume, returned as the exit status (130,
143); a full disk is a one-line ``UsageError``: every step completed before it is saved.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Collection
from typing import TypeVar

from aidanbench.core.errors import UsageError, printable
from aidanbench.runner.engine import RunResult, execute, prepare
from aidanbench.runner.spec import RunSpec
from aidanbench.services import ServicesFactory

T = TypeVar("T")


def run_session(
    spec: RunSpec,
    services: ServicesFactory | None = None,
    cells: Collection[tuple[str, float, str]] | None = None,
) -> RunResult | int:
    """Check, then run one session through the run engine as ``run`` does (every refusal before the
    live table appears); ``cells`` as ``runner.engine.prepare`` takes them. Ctrl-C or SIGTERM is the
    one line saying how to resume, returned as the exit status (130, 143); a full disk is a
    ``UsageError``."""

    async def session() -> RunResult:
        return await execute(await prepare(spec, cells=cells), services=services)

    try:
        return asyncio.run(until_terminated(session()))
    except (KeyboardInterrupt, Terminated) as exc:
        where: object = spec.run_dir
        if spec.server is not None:
            where = f"the server's threads ({spec.server})"
        elif spec.store is not None:
            from aidanbench.runner.campaign import redacted

            where = f"the store {printable(redacted(spec.store))}"
        print(
            f"\nInterrupted. Every completed step is saved in {where}; run the same "
            "command again to resume.",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, Terminated) else 130
    except (OSError, sqlite3.Error) as exc:
        if not is_disk_full(exc):
            raise
        raise UsageError(
            f"no space left to write in {printable(str(spec.run_dir))} ({one_line(exc)}); "
            "every step completed before is saved: free space and run the same command again"
        ) from None


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_disk_full(exc: BaseException) -> bool:
    """An error meaning the disk (or the file size limit) is full."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL_ERRNOS
    text = str(exc).lower()
    return "disk is full" in text or "disk i/o error" in text


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return printable(" ".join(str(exc).split()) or type(exc).__name__)


class Terminated(Exception):
    """SIGTERM arrived during the run: handled like Ctrl-C, with exit status 143."""


async def until_terminated(work: Awaitable[T]) -> T:
    """``await work``; SIGTERM cancels it as Ctrl-C does (raising ``Terminated``), so the driver
    writes what is known and closes the checkpointer."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_term() -> None:
        received.append(signal.SIGTERM)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError):  # no signal handlers on this platform/thread
        return await work
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
