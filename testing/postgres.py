"""A throwaway PostgreSQL server on 127.0.0.1, for tests and benchmarks of ``run --store``.

Debian's PostgreSQL 15 in a temporary directory with password authentication, on a free
port; run as root (as the tests are), the server runs as ``postgres`` through ``runuser``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"


@dataclass(frozen=True)
class LocalPostgres:
    """A running server; ``stop`` and ``start`` it again on the same port and data (an outage)."""

    port: int
    password: str
    pg: Callable[..., None]
    """Runs one of the server's programs on its data directory (``local_postgres``)."""
    options: str
    """The server's options (port, socket, address)."""
    log: Path

    def stop(self) -> None:
        """Stop the server as a restart does (``fast``: connections are cut)."""
        self.pg("pg_ctl", "-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Start it again, waiting until it takes connections."""
        self.pg("pg_ctl", "-o", self.options, "-w", "-l", str(self.log), "start")

    def url(self, database: str) -> str:
        """A store URL for ``database``, with the password."""
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database: its store URL."""
        import psycopg

        name = f"campaign_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def available() -> bool:
    """Whether the server's programs are installed."""
    return (PG_BIN / "pg_ctl").exists()


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_postgres(password: str, durable: bool = False) -> Iterator[LocalPostgres]:
    """Start a server for the block; stop it and delete its files at the end. ``durable``
    keeps PostgreSQL's fsync (benchmarks); tests turn it off."""
    as_postgres = ["runuser", "-u", USER, "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="aidanbench-pg-"))
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if as_postgres:
        for path in (root, pwfile):
            shutil.chown(path, USER, USER)
    data, port = root / "data", free_port()

    def pg(program: str, *args: str, check: bool = True) -> None:
        command = [*as_postgres, str(PG_BIN / program), "-D", str(data), *args]
        subprocess.run(command, check=check, capture_output=True)

    try:
        pg("initdb", "-U", USER, "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8")
        pwfile.unlink()
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
        if not durable:
            options += " -c fsync=off"
        server = LocalPostgres(port, password, pg, options, root / "log")
        server.start()
        try:
            yield server
        finally:
            pg("pg_ctl", "-m", "immediate", "stop", check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
