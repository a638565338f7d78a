"""The run directory's files: names, the lock, whole-file replacement, the outputs manifest.

Files are replaced atomically (written beside, then renamed). The results files are several
files, written as one commit (``write_outputs``): each is first written whole beside its
place (``.NAME.staged``), then the manifest (``outputs.json``) naming what each must hash
to is written, which commits them, then each is moved into place. A kill before the
manifest leaves the previous commit whole; a kill after it leaves a commit that readers
already see whole (``read_outputs`` takes a file's staged copy while the manifest names
it) and that the next writer moves into place (``settle``). So a reader sees one commit or
the next, never a mix, and a kill never asks for anything to be run again. Nothing here
imports LangGraph or a client: a command refuses a directory in use (``refuse_if_in_use``)
before it loads anything heavy.
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

PAGE_ASIDE = f".{REPORT}.forgetting"
"""Where ``forget`` moves ``report.html`` before its commit, so that a page showing a
forgotten model is never there once the model is forgotten (``settle`` puts it back when
the commit never happened)."""

STAGED = "staged"
"""Suffix of a commit's file written beside its place (``.NAME.staged``)."""

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


def staged(path: Path) -> Path:
    """Where a commit writes ``path`` before the manifest names it (``write_outputs``)."""
    return path.with_name(f".{path.name}.{STAGED}")


def _own(name: str) -> bool:
    """Whether ``name`` is one of the files a run directory's writes make."""
    return name in (METADATA, RESULTS, ANSWERS, QUESTIONS, OUTPUTS, REPORT) or (
        name.startswith("results.repeat-") and name.endswith(".json")
    )


def settle(run_dir: Path) -> None:
    """Finish what killed writes left, holding the lock: a committed write's staged files
    are moved into place, a page set aside by a forget that never committed is put back,
    and the temporary files of writes killed before their rename are deleted."""
    try:
        manifest = _read_manifest(run_dir)
    except ValueError:  # a damaged manifest: the readers say so
        manifest = None
    wanted = manifest.files if manifest is not None else {}
    for name, sha in wanted.items():
        found = _read_bytes(staged(run_dir / name))
        if found is None or digest(found) != sha:
            continue
        current = _read_bytes(run_dir / name)
        if current is None or digest(current) != sha:
            os.replace(staged(run_dir / name), run_dir / name)
    aside = run_dir / PAGE_ASIDE
    if aside.exists() and (manifest is None or manifest.forgetting is None):
        if (run_dir / REPORT).exists():
            aside.unlink()
        else:
            os.replace(aside, run_dir / REPORT)
    for path in run_dir.glob(".*.*"):
        if path.name == PAGE_ASIDE or not path.is_file():
            continue
        if _own(path.name[1:].rsplit(".", 1)[0]):
            path.unlink(missing_ok=True)


def read_only_uri(path: Path) -> str:
    """A SQLite URI that reads ``path`` without writing anything beside it (``immutable``),
    unless a killed run left a write-ahead log, whose committed steps only a normal
    read-only open sees."""
    quoted = urllib.parse.quote(str(path.absolute()))
    if Path(f"{path}-wal").exists():
        return f"file:{quoted}?mode=ro"
    return f"file:{quoted}?mode=ro&immutable=1"


class Manifest(BaseModel):
    """``outputs.json``: the sha256 each file of the latest commit must have."""

    files: dict[str, str]
    """File name → sha256 of its content (``metadata.json`` only while a ``forget``
    that rewrote it is unfinished: every other write of it is one file, replaced whole)."""
    forgetting: list[str] | None = None
    """Models a committed ``forget`` has taken out of these files whose checkpoint
    threads and page are still to go (``runner.forget``); the next writer finishes it."""

    def text(self) -> str:
        """``outputs.json``'s text (without ``forgetting`` when none is pending)."""
        return self.model_dump_json(indent=2, exclude_none=True)


def digest(data: bytes) -> str:
    """The sha256 the manifest records for ``data``."""
    return hashlib.sha256(data).hexdigest()


def write_outputs(
    run_dir: Path, files: Mapping[str, str], *, forgetting: Sequence[str] | None = None
) -> None:
    """Write ``files`` (name → text) as one commit (module docstring), recording the
    ``forgetting`` a forget leaves to finish."""
    manifest = Manifest(
        files={name: digest(text.encode("utf-8")) for name, text in files.items()},
        forgetting=None if forgetting is None else list(forgetting),
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_staged(staged(run_dir / name), text.encode("utf-8"))
    atomic_write(run_dir / OUTPUTS, manifest.text())
    for name in files:
        os.replace(staged(run_dir / name), run_dir / name)


def _write_staged(path: Path, data: bytes) -> None:
    """Write a staged file in place: one cut short never matches the manifest, so it is
    never read (and ``settle`` deletes it); a failed write deletes it at once."""
    try:
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def pending_forget(run_dir: Path) -> list[str]:
    """The models of a committed ``forget`` left unfinished (none: nothing is pending)."""
    manifest = _read_manifest(run_dir)
    return [] if manifest is None else list(manifest.forgetting or [])


def end_forget(run_dir: Path) -> None:
    """Record that the committed ``forget`` is finished: the manifest names the results
    files only again (every file is in place: ``settle`` ran under the same lock), and
    ``metadata.json`` is one file, replaced whole, again."""
    manifest = _read_manifest(run_dir)
    if manifest is None or manifest.forgetting is None:
        return
    kept = {name: sha for name, sha in manifest.files.items() if name != METADATA}
    if not kept:  # a directory of threads only: it had no manifest
        (run_dir / OUTPUTS).unlink()
        return
    atomic_write(run_dir / OUTPUTS, Manifest(files=kept).text())


def read_outputs(run_dir: Path, names: Sequence[str]) -> dict[str, bytes | None]:
    """The bytes of the named files, all from one commit (``None``: absent); a file the
    manifest does not name is read as it is.

    Raises ``ValueError`` when they stay out of step with the manifest (a file changed
    by hand, or left by an older version killed between two renames). A directory
    without a manifest is read as it is.
    """
    stale: list[str] = []
    for attempt in range(READ_ATTEMPTS):
        manifest = _read_manifest(run_dir)
        data = {name: _read_bytes(run_dir / name) for name in names}
        if manifest is None:
            return data
        stale = []
        for name, content in data.items():
            sha = manifest.files.get(name)
            if sha is None or (content is not None and digest(content) == sha):
                continue
            found = _read_bytes(staged(run_dir / name))  # committed, not yet in place
            if found is not None and digest(found) == sha:
                data[name] = found
            elif content is not None:
                stale.append(name)
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
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read_manifest(run_dir: Path) -> Manifest | None:
    data = _read_bytes(run_dir / OUTPUTS)
    if data is None:
        return None
    try:
        return Manifest.model_validate_json(data)
    except ValidationError:
        raise ValueError(f"{run_dir / OUTPUTS} is damaged; rerun the run to rewrite it") from None
