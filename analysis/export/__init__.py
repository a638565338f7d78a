"""``aidanbench export``: a run's results in the formats researchers publish them in.

One table of writers (``WRITERS``): each format, the module of this package with its
``write(records, files, **options)``, and the command that opens what it wrote; a new format is
one module and one entry (``inspect``: Inspect logs; ``every-eval-ever``: Every Eval Ever
records; ``hf``: the Hub's ``.eval_results/*.yaml``). Every format reads the run through
``record.read_run`` only; their libraries are the ``[export]`` extra, imported when used.

An export is written whole or not at all: every file goes into a temporary folder beside the
output (``ExportSet``) and is moved into place only once all are written, so a full disk or a
crash leaves an earlier export as it was.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from aidanbench.analysis.export.record import RunRecord, read_run


class Writer(NamedTuple):
    """A format's writer: a module imported only when used (its library is an extra)."""

    module: str
    open_with: str | None = None
    """The command that opens an export (``{out}``: its folder)."""


WRITERS = {
    "inspect": Writer("inspect_log", "inspect view --log-dir {out}"),
    "every-eval-ever": Writer("every_eval_ever"),
    "hf": Writer("hf_results"),
}


def run_stem(record: RunRecord) -> str:
    """A file-name stem unique to the run: its name and a short hash of its path."""
    digest = hashlib.sha256(str(record.path.resolve()).encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in record.name)
    return f"{safe}-{digest}"


class ExportSet:
    """The files of one export under a temporary ``root``; a second row claiming a path is
    refused, naming both, before anything is moved."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.owners: dict[Path, str] = {}

    def path(self, relative: Path, owner: str) -> Path:
        """Where ``owner`` (a row, as the refusal names it) writes ``relative``."""
        if relative in self.owners:
            raise ValueError(
                f"{self.owners[relative]} and {owner} would both be written to {relative}; "
                "export them into separate folders"
            )
        self.owners[relative] = owner
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write(self, relative: Path, text: str, owner: str) -> None:
        """Write ``text`` as ``relative`` (UTF-8)."""
        self.path(relative, owner).write_text(text, encoding="utf-8")


def export(paths: Sequence[Path], fmt: str, out: Path, **options: Any) -> list[Path]:
    """Write every run of ``paths`` in ``fmt`` under ``out``, all read first so a bad input
    writes nothing (module docstring); raises ``OSError`` naming ``out`` when it cannot."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(WRITERS)}")
    records = [read_run(path) for path in paths]
    writer = importlib.import_module(f"{__name__}.{WRITERS[fmt].module}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        files = ExportSet(staging)
        try:
            writer.write(records, files, **options)
        except OSError as exc:
            raise OSError(f"cannot write the export to {out}: {exc.strerror or exc}") from exc
        if not out.exists():
            os.rename(staging, out)
        for relative in files.owners if staging.exists() else ():
            target = out / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / relative, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / relative for relative in files.owners]
