"""The Hugging Face Hub's evaluation results: ``.eval_results/*.yaml`` in model repos.

The Hub's convention (``huggingface_hub.EvalResultEntry``) keeps a model's scores as YAML files
in its repo's ``.eval_results/`` folder, each naming a benchmark dataset and task, the value,
the date, an optional source link and free-text notes; the Hub shows them on the model page and
the benchmark's leaderboard. Written here: ``DIR/<model>/.eval_results/aidanbench.yaml`` per
model (``aidanbench_t<T>.yaml`` per temperature when it ran at several: the convention wants
each variant in its own file). The value is the row's headline; the notes carry the setup. The
format has no room for per-question detail: link the Inspect log with ``--hf-source-url``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import score_text
from aidanbench.analysis.export import ExportSet
from aidanbench.analysis.export.record import Row, RunRecord, model_path
from aidanbench.analysis.judge_noise import panel_text
from aidanbench.analysis.summary import describe_thresholds
from aidanbench.core.errors import install_hint
from aidanbench.core.thresholds import label_of

BENCHMARK_FILE = "aidanbench"


def _hub() -> Any:
    try:
        import huggingface_hub
        import yaml  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"--format hf needs huggingface-hub: {install_hint('export')}") from exc
    return huggingface_hub


def write(
    records: Sequence[RunRecord],
    files: ExportSet,
    *,
    dataset: str | None = None,
    task: str = "default",
    source_url: str | None = None,
    **_: Any,
) -> None:
    """Write each model's ``.eval_results`` file for the rows of ``records``."""
    if not dataset:
        raise ValueError(
            "--format hf needs --hf-dataset REPO_ID: the Hub benchmark dataset the results "
            "are of (the question set)"
        )
    hub = _hub()
    import yaml

    rows = [(record, row) for record in records for row in record.rows]
    seen: dict[tuple[str, float], RunRecord] = {}
    for record, row in rows:
        key = (row.model, row.temperature)
        if key in seen:
            raise ValueError(
                f"{row.model} at temperature {row.temperature} is in both {seen[key].path} "
                f"and {record.path}; export them separately"
            )
        seen[key] = record
    temperatures: dict[str, set[float]] = {}
    for _record, row in rows:
        temperatures.setdefault(row.model, set()).add(row.temperature)
    for record, row in rows:
        entry = hub.EvalResultEntry(
            dataset_id=dataset,
            task_id=task,
            value=row.summary.reward,
            date=record.finished_at or record.started_at,
            source_url=source_url,
            source_name="AidanBench run" if source_url else None,
            notes=notes(record, row),
        )
        developer, model_dir = model_path(row.model)
        folder = Path(model_dir if developer == "unknown" else f"{developer}__{model_dir}")
        name = BENCHMARK_FILE
        if len(temperatures[row.model]) > 1:
            name += f"_t{row.temperature:g}"
        data = hub.eval_result_entries_to_yaml([entry])
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        files.write(folder / ".eval_results" / f"{name}.yaml", text, row.model)


def notes(record: RunRecord, row: Row) -> str:
    """The row's setup and figures in one line (``unknown`` where not recorded)."""
    summary = row.summary
    thresholds = record.thresholds

    def known(value: Any) -> str:
        return "unknown" if value is None else str(value)

    parts = [
        f"{BENCHMARK_FILE} {record.reward_mode} "
        + ("(valid answers)" if record.reward_mode == "count" else "(novelty sum)"),
        *(
            [
                f"score {score_text(f'{summary.reward:g}', True)} (a lower bound: "
                f"{summary.lines - summary.finished} of {summary.lines} question lines did "
                "not finish)"
            ]
            if summary.lower_bound
            else []
        ),
        f"model {row.model}",
        f"temperature {row.temperature:g}",
        f"judge {known(record.judge_model)}",
        *([panel_text(summary.judge_panel)] if summary.judge_panel else []),
        f"embeddings {known(record.embedding_model)}",
        "thresholds " + ("unknown" if thresholds is None else describe_thresholds(thresholds)),
        *(
            f"mean {label_of(name)} " + ("unknown" if mean is None else f"{mean:.3g}")
            for name, mean in summary.means.items()
        ),
        f"{summary.question_count} questions (sha256 {record.questions_sha256[:12]})",
        f"prompts sha256 {(record.prompts_sha256 or 'unknown')[:12]}",
        f"{summary.repeats} repeat{'s' if summary.repeats != 1 else ''}",
        f"answer cap {record.max_answers(row.model)}",
    ]
    for category in summary.categories:
        figure = score_text(f"{category.score:g}", category.lower_bound)
        parts.append(f"category {category.category}: score {figure}")
    interval = summary.reward_interval
    if interval is not None:
        parts.append(f"95% CI {interval[0]:g}-{interval[1]:g} (bootstrap over questions)")
    dollars = (row.cost or {}).get("cost_usd")
    parts.append("cost unknown" if dollars is None else f"cost ${dollars:.2f}")
    parts += [f"warning: {text}" for text in record.warnings]
    return "; ".join(parts)
