"""The run directory: what ``aidanbench run`` leaves on disk, written and read here only.

    RUN_DIR/
      metadata.json        provenance: settings, versions, prompt and question hashes, totals
      results.json         original AidanBench schema (first repeat), failing answer last
      results.repeat-K.json  the same for repeat K > 1
      answers.jsonl        one line per scored answer, with everything known about it
      questions.jsonl      one line per (model, temperature, question, repeat): stop reason,
                           error, score and metrics
      checkpoints.sqlite   LangGraph checkpoints, one thread per question line
      cache.sqlite         embeddings and similarity judgements, by content hash
      outputs.json         generation marker: the sha256 of each results file of the
                           latest write, written before them
      lock                 held while a run (or ``forget``) writes here

Files other programs read are replaced atomically (written beside, then renamed), so a
crash mid-write leaves the previous version intact. The results files are several files,
so a crash between two renames would leave them from different writes: the marker
records what each file of the write in progress must hash to, and the readers here refuse
files that do not match it (the next run rewrites them from its checkpoints). Temporary
files of a killed write are removed by the next run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aidanbench.core.errors import UsageError, printable
from aidanbench.core.records import answer_dollars, distinct, question_dollars, question_result
from aidanbench.core.results import QuestionResult, truncated_answers
from aidanbench.core.thresholds import Thresholds
from aidanbench.core.vocabulary import is_censored

METADATA = "metadata.json"
RESULTS = "results.json"
ANSWERS = "answers.jsonl"
QUESTIONS = "questions.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "cache.sqlite"
LOCK = "lock"
OUTPUTS = "outputs.json"

READ_ATTEMPTS = 5
"""Reads of the marker and files before concluding they disagree (a run may be writing)."""


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock (creating the directory); a second writer is refused
    with ``UsageError``, not interleaved."""
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
    """``UsageError`` at once when another process holds ``run_dir``'s lock; creates
    nothing. A command checks this before any slower work, so a directory in use is
    refused in well under a second; ``run_lock`` still decides when it starts writing."""
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


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
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


def temperature_key(temperature: float) -> str:
    """Temperature as the original schema keys it (``"0.7"``)."""
    return repr(float(temperature))


def aidanbench_schema(questions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"models": {MODEL: {TEMPERATURE: {QUESTION: [answer, …]}}}}`` of question lines."""
    models: dict[str, Any] = {}
    for line in questions:
        by_temp = models.setdefault(line["model"], {})
        by_question = by_temp.setdefault(temperature_key(line["temperature"]), {})
        records = []
        for answer in line["answers"]:
            record = {
                "answer_num": answer["index"],
                "answer": answer["answer"],
                "coherence_score": answer["coherence"],
                "embedding_dissimilarity_score": answer["novelty"],
                "processing_time": answer["elapsed_s"],
            }
            if answer.get("llm_novelty") is not None:
                record["llm_dissimilarity_score"] = answer["llm_novelty"]
            records.append(record)
        by_question[line["question"]] = records
    return {"models": models}


def write_outputs(run_dir: Path, questions: Sequence[Mapping[str, Any]]) -> None:
    """Write results files, ``answers.jsonl`` and ``questions.jsonl`` from question lines.

    A question line has ``model``, ``temperature``, ``question``, ``repeat``, ``answers``
    (answer records of the graph's output) and the graph's other output keys.
    """
    files: dict[str, str] = {}
    repeats = sorted({int(q["repeat"]) for q in questions}) or [1]
    for repeat in repeats:
        chosen = [q for q in questions if int(q["repeat"]) == repeat]
        files[results_name(repeat)] = json.dumps(aidanbench_schema(chosen), indent=2)
    answer_lines = []
    question_lines = []
    for q in questions:
        key = {k: q[k] for k in ("model", "temperature", "question", "repeat")}
        for answer in q["answers"]:
            dollars = answer_dollars(answer.get("calls") or {})
            line = {**key, **answer, "cost_usd": dollars}
            answer_lines.append(json.dumps(line, ensure_ascii=False))
        summary = {k: v for k, v in q.items() if k != "answers"}
        summary |= question_cost_fields(q)
        question_lines.append(json.dumps(summary, ensure_ascii=False))
    files[ANSWERS] = "".join(line + "\n" for line in answer_lines)
    files[QUESTIONS] = "".join(line + "\n" for line in question_lines)
    marker = {"files": {name: _digest(text.encode("utf-8")) for name, text in files.items()}}
    atomic_write(run_dir / OUTPUTS, json.dumps(marker, indent=2))
    for name, text in files.items():
        atomic_write(run_dir / name, text)


def question_cost_fields(line: Mapping[str, Any]) -> dict[str, Any]:
    """A question line's dollars (null when unknown), whether a cap cut it short
    (``censored``: its score is a lower bound), and how many of its answers the token
    limit cut (``truncated_answers``: null when none recorded whether it did)."""
    answers = line.get("answers") or []
    return {
        "cost_usd": question_dollars(answers, line.get("speculative")),
        "censored": is_censored(line.get("stop_reason")),
        "truncated_answers": truncated_answers(a.get("truncated") for a in answers),
    }


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def read_outputs(run_dir: Path, names: Sequence[str]) -> dict[str, bytes | None]:
    """The bytes of the named results files, all from one write (``None``: absent).

    Raises ``ValueError`` when they stay out of step with the generation marker: a write
    was interrupted between two renames, and only a rerun of the run rewrites them. A run
    directory without a marker (written before markers existed) is read as it is.
    """
    for attempt in range(READ_ATTEMPTS):
        marker = _read_marker(run_dir)
        data = {name: _read_bytes(run_dir / name) for name in names}
        if marker is None:
            return data
        expected = marker.get("files", {})
        stale = [
            name
            for name, content in data.items()
            if content is not None and expected.get(name) != _digest(content)
        ]
        if not stale and _read_marker(run_dir) == marker:
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


def _read_marker(run_dir: Path) -> dict[str, Any] | None:
    data = _read_bytes(run_dir / OUTPUTS)
    if data is None:
        return None
    try:
        marker = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        marker = None
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        raise ValueError(f"{run_dir / OUTPUTS} is damaged; rerun the run to rewrite it")
    return marker


def read_only_uri(path: Path) -> str:
    """A SQLite URI that reads ``path`` without writing anything beside it.

    ``immutable`` skips the lock and shared-memory files a read-only open would create;
    when a write-ahead log exists (a run was killed before folding it back), it holds
    committed steps, so the database is opened read-only in the normal way to see them.
    """
    quoted = urllib.parse.quote(str(path.absolute()))
    if Path(f"{path}-wal").exists():
        return f"file:{quoted}?mode=ro"
    return f"file:{quoted}?mode=ro&immutable=1"


def _read_jsonl(path: Path, data: bytes) -> list[dict[str, Any]]:
    lines = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 (byte {exc.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")
            lines.append(record)
    return lines


LINE_KEY = ("model", "temperature", "question", "repeat")
"""What names a question line, in ``questions.jsonl`` and on each ``answers.jsonl`` line."""


def read_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The question lines as ``write_outputs`` was given them, answers joined back in.

    A run that continues a run directory starts from these, so the lines of threads a
    later session does not run are written again unchanged.
    """
    files = read_outputs(run_dir, [QUESTIONS, ANSWERS])
    questions_data, answers_data = files[QUESTIONS], files[ANSWERS]
    if questions_data is None:
        raise ValueError(f"{run_dir} is not a run directory (no {QUESTIONS})")
    answers: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    if answers_data is not None:
        for line in _read_jsonl(run_dir / ANSWERS, answers_data):
            key = tuple(line[k] for k in LINE_KEY)
            answers.setdefault(key, []).append({k: v for k, v in line.items() if k not in LINE_KEY})
    lines = []
    for q in _read_jsonl(run_dir / QUESTIONS, questions_data):
        q["answers"] = answers.get(tuple(q[k] for k in LINE_KEY), [])
        lines.append(q)
    return lines


def read_run_dir(run_dir: Path) -> list[QuestionResult]:
    """Every question of a run directory, in the order the run listed them, each
    (model, temperature, question, repeat) once (``records.distinct``)."""
    return distinct(read_run_dir_lines(run_dir))[0]


def read_run_dir_lines(run_dir: Path) -> list[QuestionResult]:
    """Every question line of a run directory as stored, in the order the run listed them."""
    questions_path, answers_path = run_dir / QUESTIONS, run_dir / ANSWERS
    if not questions_path.exists():
        raise ValueError(f"{run_dir} is not a run directory (no {QUESTIONS})")
    metadata = read_metadata(run_dir)
    settings = metadata.get("settings", {}) if metadata else {}
    if not isinstance(settings, dict):
        raise ValueError(f"{run_dir / METADATA} is damaged ('settings' is not an object)")
    files = read_outputs(run_dir, [QUESTIONS, ANSWERS])
    answers: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    answers_data = files[ANSWERS]
    if answers_data is not None:
        for line in _read_jsonl(answers_path, answers_data):
            key = (line["model"], line["temperature"], line["question"], line["repeat"])
            answers.setdefault(key, []).append(line)
    results = []
    questions_data = files[QUESTIONS]
    if questions_data is None:
        raise ValueError(f"{run_dir} is not a run directory (no {QUESTIONS})")
    for q in _read_jsonl(questions_path, questions_data):
        key = (q["model"], q["temperature"], q["question"], q["repeat"])
        results.append(question_result(q, answers.get(key, []), metadata))
    return results


def read_metadata(run_dir: Path) -> dict[str, Any] | None:
    """``metadata.json`` of a run directory, if present.

    Raises ``ValueError`` saying the file is damaged when it is not a JSON object.
    """
    path = run_dir / METADATA
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is damaged (not UTF-8 at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is damaged (not valid JSON: {exc.msg} at line {exc.lineno}; truncated?)"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} is damaged (a JSON {type(data).__name__}, not the object a run writes)"
        )
    return data


def read_results(path: Path, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """A run directory or an original-schema results file, whichever ``path`` is; a
    question line is counted once however its question was spelled (``records.distinct``)."""
    return read_results_noted(path, thresholds)[0]


def read_results_noted(
    path: Path, thresholds: Thresholds | None = None
) -> tuple[list[QuestionResult], list[str]]:
    """``read_results``, and a note for each line it counted once for two spellings."""
    from aidanbench.core.results import read_aidanbench_file

    if path.is_dir():
        return distinct(read_run_dir_lines(path))
    if not path.exists():
        raise ValueError(f"no such file or directory: {path}")
    return distinct(read_aidanbench_file(path, thresholds))
