"""The run directory's files: names, the lock, whole-file replacement, the outputs manifest.

Files are replaced atomically (written beside, then renamed). The results files are several
files, so a crash between two renames would leave them from different writes: the manifest
(``outputs.json``), written before them, records what each must hash to, and
``read_outputs`` refuses files that do not match it (the next run rewrites them from its
checkpoints). Nothing here imports LangGraph or a client: a command refuses a directory in
use (``refuse_if_in_use``) before it loads anything heavy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ValidationError

from aidanbench.core.errors import UsageError, printable

METADATA = "metadata.json"
RESULTS = "results.json"
ANSWERS = "answers.jsonl"
QUESTIONS = "questions.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "cache.sqlite"
LEDGER = "usage.jsonl"
LOCK = "lock"
OUTPUTS = "outputs.json"
REPORT = "report.html"
"""The run's offline HTML page (``aidanbench view``), rewritten at the end of every run."""

READ_ATTEMPTS = 5
"""Reads of the manifest and files before concluding they disagree (a run may be writing)."""


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock (creating the directory); a second writer is a
    ``UsageError``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / LOCK, "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(in_use_line(run_dir)) from None
        yield
    finally:
        handle.close()


def refuse_if_in_use(run_dir: Path) -> None:
    """``UsageError`` when another process holds ``run_dir``'s lock; creates nothing.
    Checked before any slower work; ``run_lock`` still decides when writing starts."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except OSError:  # no lock file (a new directory) or none readable: run_lock decides
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(in_use_line(run_dir)) from None
    finally:
        os.close(fd)  # closing releases a lock taken here


def in_use_line(run_dir: Path) -> str:
    """The refusal of a run directory another process is writing."""
    return f"run directory {printable(str(run_dir))} is in use by another aidanbench run"


def atomic_write(path: Path, content: str | Callable[[IO[bytes]], object]) -> None:
    """Replace ``path`` with ``content`` (a text, or a function writing bytes to the file
    it is given, e.g. ``savefig``) so readers see the old or the new file, never half; a
    write that fails (a full disk) leaves ``path`` as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(content, str):
                handle.write(content.encode("utf-8"))
            else:
                content(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def results_name(repeat: int) -> str:
    """File of one repeat in the original schema."""
    return RESULTS if repeat == 1 else f"results.repeat-{repeat}.json"


def remove_leftovers(run_dir: Path) -> list[Path]:
    """Delete temporary files of writes that were killed before their rename."""
    removed = []
    for path in run_dir.glob(".*.*"):
        name = path.name[1:].rsplit(".", 1)[0]
        if path.is_file() and (
            name in (METADATA, RESULTS, ANSWERS, QUESTIONS, OUTPUTS)
            or (name.startswith("results.repeat-") and name.endswith(".json"))
        ):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def read_only_uri(path: Path) -> str:
    """A SQLite URI that reads ``path`` without writing anything beside it (``immutable``),
    unless a killed run left a write-ahead log, whose committed steps only a normal
    read-only open sees."""
    quoted = urllib.parse.quote(str(path.absolute()))
    if Path(f"{path}-wal").exists():
        return f"file:{quoted}?mode=ro"
    return f"file:{quoted}?mode=ro&immutable=1"


class Manifest(BaseModel):
    """``outputs.json``: the sha256 each results file of the latest write must have."""

    files: dict[str, str]
    """File name → sha256 of its content."""


def digest(data: bytes) -> str:
    """The sha256 the manifest records for ``data``."""
    return hashlib.sha256(data).hexdigest()


def write_outputs(run_dir: Path, files: Mapping[str, str]) -> None:
    """Write the results files (name → text): the manifest first, then each file."""
    manifest = Manifest(files={name: digest(text.encode("utf-8")) for name, text in files.items()})
    atomic_write(run_dir / OUTPUTS, manifest.model_dump_json(indent=2))
    for name, text in files.items():
        atomic_write(run_dir / name, text)


def read_outputs(run_dir: Path, names: Sequence[str]) -> dict[str, bytes | None]:
    """The bytes of the named results files, all from one write (``None``: absent).

    Raises ``ValueError`` when they stay out of step with the manifest (a write interrupted
    between two renames). A directory without a manifest is read as it is.
    """
    stale: list[str] = []
    for attempt in range(READ_ATTEMPTS):
        manifest = _read_manifest(run_dir)
        data = {name: _read_bytes(run_dir / name) for name in names}
        if manifest is None:
            return data
        stale = [
            name
            for name, content in data.items()
            if content is not None and manifest.files.get(name) != digest(content)
        ]
        if not stale and _read_manifest(run_dir) == manifest:
            return data
        if attempt + 1 < READ_ATTEMPTS:
            time.sleep(0.05 * (attempt + 1))
    raise ValueError(
        f"the results files of {run_dir} are from an interrupted write "
        f"({', '.join(stale) or 'the marker changed'} does not match {OUTPUTS}); "
        "run the same 'aidanbench run' command again to rewrite them from the checkpoints"
    )


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _read_manifest(run_dir: Path) -> Manifest | None:
    data = _read_bytes(run_dir / OUTPUTS)
    if data is None:
        return None
    try:
        return Manifest.model_validate_json(data)
    except ValidationError:
        raise ValueError(f"{run_dir / OUTPUTS} is damaged; rerun the run to rewrite it") from None
