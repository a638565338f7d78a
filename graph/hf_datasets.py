"""Questions from a Hugging Face dataset: one split and column, a hub name or local data.

``datasets`` is an optional extra (``[hf]``) because it is large; only this module imports
it, on first use. Local files and folders are read in place; ``graph.questions`` validates
the values as every source's.

``datasets`` alone waits out its own time-outs and retries on a dead network (see
``docs/questions.md``), so one short HTTP request to the hub's API comes first and says at
once whether the hub answers; with ``HF_HUB_OFFLINE=1`` no request is made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from aidanbench.core.errors import QuestionSourceError, install_hint
from aidanbench.services.errors import short

DATA_FILE_BUILDERS = {
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
}
"""Data-file extensions ``--questions-dataset`` reads, and the ``datasets`` builder of each."""

HUB_PROBE_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
"""How long the hub is given to answer before a name is declared unreachable."""


def read_dataset(
    name_or_path: str, *, split: str | None, question_field: str, category_field: str
) -> tuple[list[object], list[object], str, dict[str, Any]]:
    """One split and column of a dataset: its values, each row's category (its
    ``category_field`` column, when it has one), its name for a refusal, its record."""
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
    categories = (
        list(dataset[category_field]) if category_field in columns else [None] * len(dataset)
    )
    return list(dataset[question_field]), categories, where, source


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise QuestionSourceError(
            f"reading Hugging Face datasets needs the [hf] extra: {install_hint('hf')}"
        ) from None
    return datasets


def quiet_datasets() -> None:
    """Turn off ``datasets``' progress bars and notices, for callers whose stderr is for
    errors (the command line); the graph API leaves a library user's process as it was."""
    try:
        import datasets
    except ImportError:
        return
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _load_local(datasets: Any, path: Path, split: str | None) -> tuple[Any, str | None]:
    """One split of a ``save_to_disk`` folder, a folder of data files, or one data file.
    Empty data is refused before ``datasets`` reads it: its errors on it do not say so."""
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
        raise QuestionSourceError(f"cannot read dataset {path}: {short(str(exc), 300)}") from None


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
        lines = [x for x in path.read_text("utf-8").split("\n") if x.strip()]
        return not lines or (builder == "csv" and len(lines) == 1)
    return False


def _load_hub(datasets: Any, name: str) -> tuple[Any, str | None]:
    """A dataset by hub name, and the hub commit it was loaded at (unknown offline): the
    commit the probe named, so the recorded revision is the one read."""
    offline = bool(datasets.config.HF_HUB_OFFLINE)
    revision = None if offline else _probe_hub(name)
    try:
        return datasets.load_dataset(name, revision=revision), revision
    except Exception as exc:  # network, not-found and format errors all end the same way
        if offline:
            raise QuestionSourceError(
                f"dataset {name} is not in the Hugging Face cache and HF_HUB_OFFLINE is set "
                f"({short(str(exc), 300)})"
            ) from None
        raise QuestionSourceError(f"cannot load dataset {name}: {short(str(exc), 300)}") from None


def _probe_hub(name: str) -> str | None:
    """One request to the hub's dataset API: the dataset's commit, if the answer names it.
    Raises at once when the hub does not answer; any HTTP answer tells a live network (a
    missing or private dataset is for ``datasets`` to report, with the user's token)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
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
        reason = short(str(exc), 300) or type(exc).__name__
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
