"""The suite's offline rule for a command the tests start as a subprocess (``vf-eval``).

``outside_guard`` writes a ``sitecustomize`` that a Python subprocess imports at start
when its folder is on ``PYTHONPATH``: any connection beyond loopback is refused and
written to the file named by ``AIDANBENCH_OUTSIDE_LOG``, so the test can assert there
was none.
"""

from __future__ import annotations

from pathlib import Path

OUTSIDE_GUARD = """\
import ipaddress, os, socket

_log = os.environ["AIDANBENCH_OUTSIDE_LOG"]
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _outside(address):
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _refuse(address):
    with open(_log, "a") as f:
        f.write(repr(address) + "\\n")
    raise ConnectionRefusedError(f"offline test: refused {address!r}")


def connect(self, address):
    if _outside(address):
        _refuse(address)
    return _connect(self, address)


def connect_ex(self, address):
    if _outside(address):
        _refuse(address)
    return _connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
"""
"""A ``sitecustomize`` for the ``vf-eval`` subprocess: the suite's offline rule, there."""


def outside_guard(tmp_path: Path) -> Path:
    """A folder holding the guard's ``sitecustomize.py``, to put first on ``PYTHONPATH``."""
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(OUTSIDE_GUARD)
    return guard
