"""Question sets from any of the benchmark's sources: a list, a file, a Hugging Face dataset.

The benchmark's environment names three sources of questions (a list, a file, a dataset
with a ``question`` field). ``load_question_set`` turns any of them into a validated list
and a record of where it came from (kind, name, split, field, revision or fingerprint),
which a run stores beside the set's hash so the same set can be found again.

Datasets are read through the ``datasets`` library, an optional extra (``[hf]``): it is
large, and only this module imports it, on first use. Hub names are downloaded and
cached as ``datasets`` does; local parquet / JSON / CSV files, folders of data files and
``save_to_disk`` folders are read in place.

A hub lookup on a network that drops packets would wait on ``datasets``' own time-outs
and retries (about 25 s to the first ``ConnectionError``). Before asking ``datasets``
for a hub name, one HTTP request to the hub's API with a short time-out says at once
whether the hub answers, and the error names the endpoint and why; with
``HF_HUB_OFFLINE=1`` no request is made and a name not in the cache fails at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from aidanbench.core.errors import printable
from aidanbench.record.lines import normal_question, spelling_note

MAX_QUESTION_CHARS = 2000
"""Longest question accepted; the benchmark's longest is under 150 characters."""

DEFAULT_FIELD = "question"
"""The column the environment reads questions from."""

DATA_FILE_BUILDERS = {
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
}
"""Data-file extensions ``--questions-dataset`` reads, and the ``datasets`` builder of each."""

DATASET_FILE_SUFFIXES = frozenset({".parquet", ".arrow"})
"""File kinds that only ``datasets`` reads, so a questions *file* of this kind is a dataset."""

HUB_PROBE_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
"""How long the hub is given to answer before a name is declared unreachable."""

HF_EXTRA_HINT = "pip install 'aidanbench[hf]'"


class QuestionSourceError(ValueError):
    """A question source that cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class QuestionSet:
    """Validated questions and where they came from."""

    questions: list[str]
    """The questions, in the source's order, after any limit."""
    source: dict[str, Any] = field(default_factory=dict)
    """``kind`` (``bundled``, ``list``, ``file``, ``dataset``) and what identifies it."""


def load_questions(
    source: Sequence[str] | str | os.PathLike[str],
    *,
    split: str | None = None,
    question_field: str = DEFAULT_FIELD,
    limit: int | None = None,
) -> list[str]:
    """The questions of ``source``: a list of strings, a file, or a dataset name or path.

    Raises ``QuestionSourceError`` (one line) when the source cannot be read or holds a
    non-string, blank, repeated or over-long question.
    """
    return load_question_set(
        source, split=split, question_field=question_field, limit=limit
    ).questions


def load_question_set(
    source: Sequence[str] | str | os.PathLike[str],
    *,
    split: str | None = None,
    question_field: str = DEFAULT_FIELD,
    limit: int | None = None,
) -> QuestionSet:
    """Like ``load_questions``, with the source's record.

    A string or path naming an existing file is a questions file (parquet and arrow files
    are datasets); an existing folder is a dataset; any other string is a dataset name on
    the Hugging Face Hub.
    """
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_file() and path.suffix.lower() not in DATASET_FILE_SUFFIXES:
            return question_file_set(path, limit)
        return dataset_question_set(
            os.fspath(source), split=split, question_field=question_field, limit=limit
        )
    return QuestionSet(validated(list(source), "question list", limit), {"kind": "list"})


def question_file_set(path: Path, limit: int | None = None) -> QuestionSet:
    """A questions file in the command line's formats (JSON list, JSONL, CSV, lines)."""
    from aidanbench.core.errors import UsageError
    from aidanbench.graph.question_files import read_questions_file

    try:
        questions = read_questions_file(path)
    except UsageError as exc:
        raise QuestionSourceError(str(exc)) from None
    return QuestionSet(
        validated(questions, f"questions file {path}", limit), {"kind": "file", "path": str(path)}
    )


def validated(questions: Sequence[object], where: str, limit: int | None = None) -> list[str]:
    """The first ``limit`` questions, each checked and normalised (``normal_question``): a
    string, not blank, valid Unicode, not huge, and distinct from every other once
    normalised (a repeat is refused naming both).

    Every question is checked before the limit applies, so a set is valid or not
    whatever part of it a run asks for.
    """
    if limit is not None and limit < 1:
        raise QuestionSourceError(f"the number of questions must be at least 1, got {limit}")
    if not questions:
        raise QuestionSourceError(f"{where} holds no questions")
    seen: dict[str, tuple[int, str]] = {}
    checked: list[str] = []
    for number, question in enumerate(questions, 1):
        if not isinstance(question, str):
            raise QuestionSourceError(
                f"{where}: question {number} is {type(question).__name__} "
                f"{printable(repr(question))[:80]}, not a string"
            )
        if not question.strip():
            raise QuestionSourceError(f"{where}: question {number} is empty")
        try:
            question.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise QuestionSourceError(
                f"{where}: question {number} holds an invalid character "
                f"(a lone surrogate {question[exc.start]!r}); fix its \\u escape"
            ) from None
        if len(question) > MAX_QUESTION_CHARS:
            raise QuestionSourceError(
                f"{where}: question {number} is {len(question)} characters "
                f"(at most {MAX_QUESTION_CHARS})"
            )
        key = normal_question(question)
        if key in seen:
            first, spelled = seen[key]
            raise QuestionSourceError(
                f"{where}: question {number} repeats question {first} "
                f"{printable(repr(key[:60]))}{spelling_note(spelled, question)}"
            )
        seen[key] = (number, question)
        checked.append(key)
    return checked if limit is None else checked[:limit]


def dataset_question_set(
    name_or_path: str,
    *,
    split: str | None = None,
    question_field: str = DEFAULT_FIELD,
    limit: int | None = None,
) -> QuestionSet:
    """Questions from one split and column of a Hugging Face dataset (hub name or local)."""
    datasets = _import_datasets()
    path = Path(name_or_path)
    revision: str | None = None
    if path.exists():
        (dataset, chosen), kind = _load_local(datasets, path, split), "local"
    elif path.suffix.lower() in DATA_FILE_BUILDERS or name_or_path.startswith((".", "/", "~")):
        raise QuestionSourceError(f"dataset file or folder not found: {name_or_path}")
    else:
        (loaded, revision), kind = _load_hub(datasets, name_or_path), "hub"
        dataset, chosen = _one_split(datasets, loaded, split, name_or_path)
    where = f"dataset {name_or_path}" + (f" (split {chosen})" if chosen else "")
    columns = list(dataset.column_names)
    if question_field not in columns:
        raise QuestionSourceError(
            f"{where} has no field {question_field!r} (fields: {', '.join(columns) or 'none'}); "
            "choose one with --questions-field"
        )
    questions = validated(dataset[question_field], where, limit)
    source: dict[str, Any] = {
        "kind": "dataset",
        "name": name_or_path if kind == "hub" else str(path.resolve()),
        "split": chosen,
        "field": question_field,
        "rows": len(dataset),
        "fingerprint": getattr(dataset, "_fingerprint", None),
    }
    if kind == "hub":
        source["revision"] = revision
    return QuestionSet(questions, source)


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise QuestionSourceError(
            f"reading Hugging Face datasets needs the [hf] extra: {HF_EXTRA_HINT}"
        ) from None
    return datasets


def quiet_datasets() -> None:
    """Turn off ``datasets``' progress bars and notices, for callers whose stderr is for errors.

    The command line calls it (its errors are one line on stderr); the graph API leaves a
    library user's process as it was.
    """
    try:
        import datasets
    except ImportError:
        return
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _load_local(datasets: Any, path: Path, split: str | None) -> tuple[Any, str | None]:
    """One split of a ``save_to_disk`` folder, a folder of data files, or one data file.

    A saved ``DatasetDict`` is read one split at a time (each is a saved dataset), and
    an empty saved dataset or data file is reported before ``datasets`` reads it: it
    fails on empty data with errors that do not say so.
    """
    try:
        if (path / "dataset_dict.json").is_file():
            names = json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"]
            chosen = _choose_split(list(names), split, str(path))
            return _load_saved(datasets, path / chosen, f"dataset {path} (split {chosen})"), chosen
        if (path / "dataset_info.json").is_file():
            if split is not None:
                raise QuestionSourceError(
                    f"dataset {path} has no splits (a single saved dataset); leave out "
                    "--questions-split"
                )
            return _load_saved(datasets, path, f"dataset {path}"), None
        if path.is_dir():
            return _one_split(datasets, datasets.load_dataset(str(path)), split, str(path))
        builder = DATA_FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise QuestionSourceError(
                f"dataset file {path} is not {', '.join(sorted(DATA_FILE_BUILDERS))}"
            )
        if _empty_file(path, builder):
            raise QuestionSourceError(f"dataset {path} holds no questions")
        loaded = datasets.load_dataset(builder, data_files=str(path))
        return _one_split(datasets, loaded, split, str(path))
    except QuestionSourceError:
        raise
    except Exception as exc:  # datasets raises many kinds; each is a bad source here
        raise QuestionSourceError(f"cannot read dataset {path}: {_one_line(exc)}") from None


def _load_saved(datasets: Any, folder: Path, where: str) -> Any:
    state = json.loads((folder / "state.json").read_text("utf-8"))
    if not state.get("_data_files"):
        raise QuestionSourceError(f"{where} holds no questions")
    return datasets.load_from_disk(str(folder))


def _empty_file(path: Path, builder: str) -> bool:
    if builder == "parquet":
        import pyarrow.parquet as pq

        return bool(pq.ParquetFile(path).metadata.num_rows == 0)
    if builder in ("json", "csv"):
        lines = [x for x in path.read_text("utf-8").splitlines() if x.strip()]
        return not lines or (builder == "csv" and len(lines) == 1)
    return False


def _load_hub(datasets: Any, name: str) -> tuple[Any, str | None]:
    """A dataset by hub name, and the hub commit it was loaded at when known.

    Offline it comes from the cache (revision unknown); online, after the hub has
    answered, at the commit the hub named, so the recorded revision is the one read.
    """
    offline = bool(datasets.config.HF_HUB_OFFLINE)
    revision = None if offline else _probe_hub(name)
    try:
        return datasets.load_dataset(name, revision=revision), revision
    except Exception as exc:  # network, not-found and format errors all end the same way
        if offline:
            raise QuestionSourceError(
                f"dataset {name} is not in the Hugging Face cache and HF_HUB_OFFLINE is set "
                f"({_one_line(exc)})"
            ) from None
        raise QuestionSourceError(f"cannot load dataset {name}: {_one_line(exc)}") from None


def hub_endpoint() -> str:
    """The hub's base URL, as ``huggingface_hub`` reads it (``HF_ENDPOINT``)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _probe_hub(name: str) -> str | None:
    """One request to the hub's dataset API: the dataset's commit, if the answer names it.

    Raises at once when the hub does not answer. Any HTTP answer will do otherwise (a
    missing or private dataset is for ``datasets`` to report, with the user's token):
    this tells a dead network from a live one.
    """
    endpoint = hub_endpoint()
    host = urlsplit(endpoint).netloc or endpoint
    advice = "set HF_HUB_OFFLINE=1 to use only datasets already in the local cache"
    try:
        response = httpx.get(f"{endpoint}/api/datasets/{name}", timeout=HUB_PROBE_TIMEOUT)
    except httpx.TimeoutException:
        raise QuestionSourceError(
            f"cannot load dataset {name}: the Hugging Face Hub ({host}) did not answer "
            f"(time-out: {HUB_PROBE_TIMEOUT.connect:g} s to connect, "
            f"{HUB_PROBE_TIMEOUT.read:g} s to reply); {advice}"
        ) from None
    except httpx.HTTPError as exc:
        reason = _one_line(exc) or type(exc).__name__
        raise QuestionSourceError(
            f"cannot load dataset {name}: cannot reach the Hugging Face Hub ({host}): "
            f"{reason}; {advice}"
        ) from None
    try:
        answer = response.json() if response.status_code == 200 else None
    except ValueError:
        answer = None
    sha = answer.get("sha") if isinstance(answer, dict) else None
    return sha if isinstance(sha, str) and sha else None


def _one_split(datasets: Any, loaded: Any, split: str | None, name: str) -> tuple[Any, str | None]:
    """The split asked for, or the only one, of what ``load_dataset`` returned."""
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded, None
    chosen = _choose_split(list(loaded), split, name)
    return loaded[chosen], chosen


def _choose_split(splits: list[str], split: str | None, name: str) -> str:
    """``split`` if the dataset has it, else its only split; an error lists the splits."""
    if split is None:
        if len(splits) != 1:
            raise QuestionSourceError(
                f"dataset {name} has splits {', '.join(splits) or 'none'}; choose one with "
                "--questions-split"
            )
        return splits[0]
    if split not in splits:
        raise QuestionSourceError(
            f"dataset {name} has no split {split!r} (splits: {', '.join(splits)})"
        )
    return split


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("…" if len(text) > 300 else "")
