"""One run as every export format reads it: provenance, rows, question lines, cost.

The only place the exporters read a run: ``read_run`` gathers the records, ``analysis.summary``
rows and ``analysis.cost`` dollars into one ``RunRecord``. A figure the run did not record (a
results file has no judge, prompts or cost) stays ``None``, and every format writes it unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aidanbench.analysis import cost
from aidanbench.analysis.inputs import read_input
from aidanbench.analysis.summary import (
    COUNTING,
    INTERVAL_METHOD,
    SummaryRow,
    shared,
    summarise,
    warnings,
)
from aidanbench.core.scores import declared
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.lines import AnswerLine
from aidanbench.record.metadata import Metadata, question_set_hash
from aidanbench.record.results import QuestionResult, answer_cap

LineKey = tuple[str, float, str, int]
"""(model, temperature, question, repeat): one question line."""


@dataclass(frozen=True)
class Row:
    """One model at one temperature of a run: its summary and its question lines."""

    summary: SummaryRow
    lines: list[QuestionResult]
    """Question lines in question order, then repeat."""
    cost: Mapping[str, Any] | None
    """The row's cost fields as ``report --json`` gives them; None for a results file."""
    line_cost: Mapping[LineKey, Mapping[str, Any]] = field(default_factory=dict)
    """Each line's ``cost_usd`` (None: unknown) and ``censored``."""

    @property
    def model(self) -> str:
        """The model as the run names it (a variant keeps its ``NAME@LABEL``)."""
        return self.summary.model

    @property
    def temperature(self) -> float:
        return self.summary.temperature


@dataclass(frozen=True)
class RunRecord:
    """A run directory or an original-schema results file, with its provenance."""

    path: Path
    metadata: Metadata | None
    """``metadata.json``; None for a results file."""
    rows: list[Row]
    questions: list[str]
    """The question set in the run's order."""
    reward_mode: str

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def is_run_dir(self) -> bool:
        return self.metadata is not None

    @property
    def _meta(self) -> Metadata:
        return self.metadata or Metadata()

    @property
    def judge_model(self) -> str | None:
        settings = self._meta.settings
        return (settings.judge_model if settings else None) or shared(
            line.judge_model for row in self.rows for line in row.lines
        )

    @property
    def embedding_model(self) -> str | None:
        settings = self._meta.settings
        return (settings.embedding_model if settings else None) or shared(
            line.embedding_model for row in self.rows for line in row.lines
        )

    @property
    def thresholds(self) -> Thresholds | None:
        """The thresholds every line was scored with (a results file's: the benchmark's);
        None when the lines differ."""
        return shared(line.thresholds or Thresholds() for row in self.rows for line in row.lines)

    @property
    def prompts_sha256(self) -> str | None:
        return self._meta.prompts_sha256 or shared(
            line.prompts_sha256 for row in self.rows for line in row.lines
        )

    @property
    def questions_sha256(self) -> str:
        """The recorded hash of the question set, or the same hash of the file's set."""
        return self._meta.questions_sha256 or question_set_hash(self.questions)

    @property
    def repeats(self) -> int:
        return max((row.summary.repeats for row in self.rows), default=1)

    @property
    def started_at(self) -> str | None:
        """When the run started (ISO 8601); None for a results file."""
        return _iso(self._meta.started_at)

    @property
    def finished_at(self) -> str | None:
        """When the run last ended (ISO 8601); None for a results file or a run still going."""
        return _iso(self._meta.finished_at)

    @property
    def package_version(self) -> str | None:
        return self._meta.package_version

    @property
    def git_commit(self) -> str | None:
        return self._meta.git_commit

    def scoring_settings(self, model: str) -> dict[str, Any]:
        """The model's scoring settings as the run recorded them; empty for a results file."""
        return dict((self._meta.scoring_settings or {}).get(model) or {})

    def max_answers(self, model: str) -> int | str:
        """The model's answer cap: a number, ``none`` (the benchmark's) or ``unknown``."""
        return answer_cap(self._meta, model)

    def provenance(self) -> dict[str, Any]:
        """What every export records about the run (JSON-ready; unknown is None)."""
        thresholds = self.thresholds
        return {
            "source": str(self.path),
            "kind": "run directory" if self.is_run_dir else "results file (original schema)",
            "judge_model": self.judge_model,
            "embedding_model": self.embedding_model,
            "thresholds": None
            if thresholds is None
            else {
                **thresholds.record(),
                "rule": "an answer is valid when every score is strictly greater (>)",
            },
            "prompts_sha256": self.prompts_sha256,
            "questions_sha256": self.questions_sha256,
            "questions": len(self.questions),
            "repeats": self.repeats,
            "reward_mode": self.reward_mode,
            "counting": COUNTING,
            "interval_method": INTERVAL_METHOD,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "aidanbench_version": self.package_version,
            "git_commit": self.git_commit,
            "questions_source": self._meta.questions_source,
            "warnings": self.warnings,
        }

    @property
    def warnings(self) -> list[str]:
        """What ``report`` warns about this run (``analysis.summary.warnings``)."""
        return warnings([line for row in self.rows for line in row.lines])


def read_run(path: Path) -> RunRecord:
    """The run at ``path``; raises ``ValueError`` (or ``OSError``) naming the problem."""
    source = read_input(path)
    reward_mode = source.reward_mode or "count"
    metadata = source.metadata
    questions = list(dict.fromkeys(line.question for line in source.results))
    order = {q: n for n, q in enumerate(questions)}
    by_key = cost.run_fields(source.results) if metadata is not None else {}
    line_cost = cost.question_fields(source.results) if metadata is not None else {}
    rows = []
    for summary in summarise(source.results, reward_mode):
        lines = sorted(
            (
                line
                for line in source.results
                if (line.model, line.temperature) == (summary.model, summary.temperature)
            ),
            key=lambda line: (order[line.question], line.repeat),
        )
        key = (summary.model, summary.temperature)
        rows.append(
            Row(
                summary=summary,
                lines=lines,
                cost=by_key.get(key),
                line_cost={k: v for k, v in line_cost.items() if k[:2] == key},
            )
        )
    return RunRecord(
        path=path, metadata=metadata, rows=rows, questions=questions, reward_mode=reward_mode
    )


def role_usage(
    calls: Iterable[Mapping[str, Mapping[str, Any]]],
) -> dict[str, dict[str, int | float | None]]:
    """Per role: requests, tokens and dollars; a figure a made call did not record is None."""
    totals: dict[str, dict[str, int | float | None]] = {}
    for by_role in calls:
        for role, stats in by_role.items():
            row = totals.setdefault(
                role,
                {
                    "calls": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "reasoning_tokens": 0,
                    "cost_usd": 0.0,
                },
            )
            made = int(stats.get("calls") or 0)
            row["calls"] = int(row["calls"] or 0) + made
            if not made:
                continue
            for name in ("input_tokens", "output_tokens", "reasoning_tokens", "cost_usd"):
                value, total = stats.get(name), row[name]
                row[name] = None if value is None or total is None else total + value
    return totals


def question_number(record: RunRecord, question: str) -> int:
    """1-based position of ``question`` in the run's question set."""
    return record.questions.index(question) + 1


def _iso(value: Any) -> str | None:
    """A recorded time in ISO 8601's extended form (``+00:00``), None when absent."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).isoformat()
    except ValueError:
        return None


def installed_version() -> str:
    """This package's installed version (a results file records none of its own)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aidanbench")
    except PackageNotFoundError:
        return "unknown"


def model_path(model: str) -> tuple[str, str]:
    """(developer, model folder): ``openai/gpt-4o`` → ``openai``, ``gpt-4o``; else ``unknown``."""
    developer, _, rest = model.partition("/") if "/" in model else ("unknown", "", model)
    return _safe(developer), _safe(rest.replace("/", "__"))


def _safe(part: str) -> str:
    cleaned = "".join(c if c.isprintable() and c not in '\\:*?"<>|' else "_" for c in part)
    return cleaned.strip(". ") or "_"


def answer_detail(answer: AnswerLine) -> dict[str, Any]:
    """One answer's scores as every export records them."""
    return {
        "index": answer.index,
        "answer": answer.answer,
        **{
            score.name: value
            for score in declared()
            if (value := score.value(answer)) is not None or score.always_recorded
        },
        "valid": answer.valid,
        "stop_reason": answer.stop_reason,
        "used_answer_tag": answer.used_answer_tag,
        "elapsed_s": answer.elapsed_s,
    }
