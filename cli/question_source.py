"""Which question set a ``run`` asks for, from its options, and where it came from.

The options are ``--questions N`` (the first N bundled), ``--questions-file``,
``--questions-dataset`` (a Hugging Face dataset: hub name or local data, with
``--questions-split`` and ``--questions-field``), and the environment's ``-a questions``
/ ``questions_path`` / ``num_questions`` with ``-n`` (``aidanbench.cli.env_args`` folds
those into the same options first). A parquet or arrow file given to
``--questions-file`` is read as a dataset. The record of the source goes into metadata
beside the set's hash.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aidanbench.core.errors import UsageError
from aidanbench.graph.question_files import load_questions
from aidanbench.graph.question_sources import (
    DATASET_FILE_SUFFIXES,
    DEFAULT_FIELD,
    QuestionSet,
    QuestionSourceError,
    dataset_question_set,
    quiet_datasets,
    validated,
)


def register(parser: argparse.ArgumentParser, which: Any) -> None:
    """Add ``--questions-dataset`` (to the group ``which`` of exclusive sources) and its options."""
    which.add_argument(
        "--questions-dataset",
        metavar="NAME_OR_PATH",
        help="a Hugging Face dataset: hub name, data file, folder of data files, or a "
        "save_to_disk folder (needs the [hf] extra)",
    )
    parser.add_argument(
        "--questions-split",
        metavar="SPLIT",
        help="split of --questions-dataset (default: its only split)",
    )
    parser.add_argument(
        "--questions-field",
        metavar="FIELD",
        help=f"column holding the questions ({DEFAULT_FIELD})",
    )


def resolve_questions(args: argparse.Namespace) -> QuestionSet:
    """The question set the options ask for, validated, with its source record."""
    limit: int | None = args.questions
    inline: list[str] | None = getattr(args, "questions_list", None)
    dataset: str | None = getattr(args, "questions_dataset", None)
    path: Path | None = args.questions_file
    split: str | None = getattr(args, "questions_split", None)
    field: str | None = getattr(args, "questions_field", None)
    is_dataset = dataset is not None or (
        path is not None and path.suffix.lower() in DATASET_FILE_SUFFIXES
    )
    if not is_dataset and (split is not None or field is not None):
        flag = "--questions-split" if split is not None else "--questions-field"
        raise UsageError(f"{flag} applies only to --questions-dataset (or a parquet file)")
    if limit is not None and limit < 1:
        raise UsageError(f"--questions must be at least 1, got {limit}")
    try:
        if inline is not None:
            found = QuestionSet(validated(inline, "-a questions", limit), {"kind": "list"})
        elif is_dataset:
            quiet_datasets()
            found = dataset_question_set(
                dataset if dataset is not None else str(path),
                split=split,
                question_field=field or DEFAULT_FIELD,
                limit=limit,
            )
        else:
            kind = "bundled" if path is None else "file"
            record = {"kind": kind} if path is None else {"kind": kind, "path": str(path)}
            found = QuestionSet(load_questions(limit, path), record)
    except QuestionSourceError as exc:
        raise UsageError(str(exc)) from None
    return QuestionSet(found.questions, {**found.source, "limit": limit})
