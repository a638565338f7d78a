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
      lock                 held while a run writes here

Files other programs read are replaced atomically (written beside, then renamed), so a
crash mid-write leaves the previous version intact.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aidanbench.analysis.results import AnswerRow, QuestionResult
from aidanbench.graph.thresholds import Thresholds

METADATA = "metadata.json"
RESULTS = "results.json"
ANSWERS = "answers.jsonl"
QUESTIONS = "questions.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "cache.sqlite"
LOCK = "lock"


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
    repeats = sorted({int(q["repeat"]) for q in questions}) or [1]
    for repeat in repeats:
        chosen = [q for q in questions if int(q["repeat"]) == repeat]
        atomic_write(
            run_dir / results_name(repeat), json.dumps(aidanbench_schema(chosen), indent=2)
        )
    answer_lines = []
    question_lines = []
    for q in questions:
        key = {k: q[k] for k in ("model", "temperature", "question", "repeat")}
        for answer in q["answers"]:
            answer_lines.append(json.dumps({**key, **answer}, ensure_ascii=False))
        summary = {k: v for k, v in q.items() if k != "answers"}
        question_lines.append(json.dumps(summary, ensure_ascii=False))
    atomic_write(run_dir / ANSWERS, "".join(line + "\n" for line in answer_lines))
    atomic_write(run_dir / QUESTIONS, "".join(line + "\n" for line in question_lines))


def call_tokens(calls: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Input plus output tokens over a ``{role: CallStats}`` mapping."""
    if not calls:
        return 0
    return sum(
        int(c.get("input_tokens", 0)) + int(c.get("output_tokens", 0)) for c in calls.values()
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    lines = []
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
    return lines


def read_run_dir(run_dir: Path) -> list[QuestionResult]:
    """Every question of a run directory, in the order the run listed them."""
    questions_path, answers_path = run_dir / QUESTIONS, run_dir / ANSWERS
    if not questions_path.exists():
        raise ValueError(f"{run_dir} is not a run directory (no {QUESTIONS})")
    metadata = read_metadata(run_dir)
    settings = metadata.get("settings", {}) if metadata else {}
    answers: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    if answers_path.exists():
        for line in _read_jsonl(answers_path):
            key = (line["model"], line["temperature"], line["question"], line["repeat"])
            answers.setdefault(key, []).append(line)
    results = []
    for q in _read_jsonl(questions_path):
        key = (q["model"], q["temperature"], q["question"], q["repeat"])
        thresholds = q.get("thresholds") or settings.get("thresholds")
        rows = tuple(
            AnswerRow(
                index=a["index"],
                answer=a["answer"],
                coherence=a["coherence"],
                novelty=a["novelty"],
                llm_novelty=a.get("llm_novelty"),
                valid=a["valid"],
                elapsed_s=a.get("elapsed_s"),
                used_answer_tag=a.get("used_answer_tag"),
                tokens=call_tokens(a.get("calls")),
                extra={k: a[k] for k in ("raw_reply", "calls", "flags", "stop_reason") if k in a},
            )
            for a in sorted(answers.get(key, []), key=lambda a: a["index"])
        )
        error = q.get("error")
        results.append(
            QuestionResult(
                model=q["model"],
                temperature=float(q["temperature"]),
                question=q["question"],
                answers=rows,
                stop_reason=q.get("stop_reason"),
                repeat=int(q["repeat"]),
                error=error["message"] if isinstance(error, dict) else error,
                embedding_model=q.get("embedding_model") or settings.get("embedding_model"),
                thresholds=Thresholds(**thresholds) if thresholds else None,
                speculative_tokens=call_tokens({"speculative": q.get("speculative") or {}}),
            )
        )
    return results


def read_metadata(run_dir: Path) -> dict[str, Any] | None:
    """``metadata.json`` of a run directory, if present."""
    path = run_dir / METADATA
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def read_results(path: Path, thresholds: Thresholds | None = None) -> list[QuestionResult]:
    """A run directory or an original-schema results file, whichever ``path`` is."""
    from aidanbench.analysis.results import read_aidanbench_file

    if path.is_dir():
        return read_run_dir(path)
    if not path.exists():
        raise ValueError(f"no such file or directory: {path}")
    return read_aidanbench_file(path, thresholds)
