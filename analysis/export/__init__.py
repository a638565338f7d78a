"""``aidanbench export``: a run's results in the formats researchers publish them in.

- ``inspect``: Inspect evaluation logs (``inspect view``; Every Eval Ever converts them).
- ``every-eval-ever``: Every Eval Ever records (aggregate JSON and per-chain JSONL).
- ``hf``: the Hugging Face Hub's ``.eval_results/*.yaml`` model-repo files.

Every format reads the run through ``record.read_run`` only. The libraries of the
formats are the ``[export]`` extra, imported when a format is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.analysis.export.record import RunRecord, read_run

FORMATS = ("inspect", "every-eval-ever", "hf")


def run_stem(record: RunRecord) -> str:
    """A file-name stem unique to the run: its name and a short hash of its path."""
    digest = hashlib.sha256(str(record.path.resolve()).encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in record.name)
    return f"{safe}-{digest}"


def export(paths: Sequence[Path], fmt: str, out: Path, **options: Any) -> list[Path]:
    """Write every run of ``paths`` in ``fmt`` under ``out``; return the files written.

    All runs are read before anything is written, so a bad input writes nothing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    records = [read_run(path) for path in paths]
    written: list[Path] = []
    if fmt == "inspect":
        from aidanbench.analysis.export import inspect_log

        for record in records:
            written += inspect_log.write(record, out, run_stem(record))
    elif fmt == "every-eval-ever":
        from aidanbench.analysis.export import every_eval_ever

        for record in records:
            written += every_eval_ever.write(record, out)
    else:
        from aidanbench.analysis.export import hf_results

        written += hf_results.write(records, out, **options)
    return written
