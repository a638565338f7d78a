"""Every Eval Ever records: an aggregate JSON and a per-chain JSONL per model.

Every Eval Ever (evaleval/every_eval_ever) keeps an aggregate record per model
(``eval.schema.json``) beside one instance record per sample (``instance_level_eval``), laid
out as its datastore's ``data/<benchmark>/<developer>/<model>/<uuid>.json`` and
``<uuid>_samples.jsonl``, so the files can be copied into a checkout as they are. The aggregate
holds the score and the novelty sum with the run's setup; each instance is one question chain.
``is_correct``, which the schema requires, is true when the chain has at least one valid answer
(AidanBench has no right answer). Values the schema wants as strings are JSON text; an unknown
figure is ``unknown``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import line_key
from aidanbench.analysis.export import ExportSet
from aidanbench.analysis.export.record import (
    Row,
    RunRecord,
    answer_detail,
    installed_version,
    model_path,
    question_number,
)
from aidanbench.analysis.judge_noise import panel_text
from aidanbench.analysis.summary import CategoryRow
from aidanbench.nodes.prompts import prompt_texts, prompts_sha256, render_generate

SCHEMA_VERSION = "0.3.0"
"""The ``eval.schema.json`` and ``instance_level_eval.schema.json`` version written."""

BENCHMARK = "aidanbench"
SOURCE_URL = "https://github.com/aidanmclaughlin/AidanBench"
"""The published benchmark: its questions and prompts, bundled in ``reference/``."""


def write(
    records: Sequence[RunRecord], files: ExportSet, organization: str = "unknown", **_: Any
) -> None:
    """Write the aggregate and instance files of every row of ``records``."""
    for record in records:
        for row in record.rows:
            developer, model_dir = model_path(row.model)
            folder = Path("data", BENCHMARK, developer, model_dir)
            name = record_uuid(record, row)
            instances = instance_records(record, row)
            samples_text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in instances)
            samples_path = folder / f"{name}_samples.jsonl"
            files.write(samples_path, samples_text, row.model)
            aggregate = aggregate_record(record, row, organization)
            aggregate["detailed_evaluation_results"] = {
                "format": "jsonl",
                "file_path": samples_path.as_posix(),
                "hash_algorithm": "sha256",
                "checksum": hashlib.sha256(samples_text.encode("utf-8")).hexdigest(),
                "total_rows": len(instances),
            }
            text = json.dumps(aggregate, indent=2, ensure_ascii=False) + "\n"
            files.write(folder / f"{name}.json", text, row.model)


def record_uuid(record: RunRecord, row: Row) -> str:
    """A version-4-form UUID fixed by the run and row, so exporting again replaces the files."""
    key = f"{record.path.resolve()}|{row.model}|{row.temperature!r}"
    digest = hashlib.sha256(key.encode("utf-8")).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def evaluation_id(record: RunRecord, row: Row) -> str:
    return f"{BENCHMARK}/{row.model}/{retrieved(record)}"


def retrieved(record: RunRecord) -> str:
    """Unix seconds of the run's end (of the results file's modification for a file)."""
    if record.finished_at:
        return str(int(datetime.fromisoformat(record.finished_at).timestamp()))
    return str(int(record.path.stat().st_mtime))


def strings(values: dict[str, Any]) -> dict[str, str]:
    """A string-valued map: strings as they are, None as ``unknown``, the rest as JSON."""
    return {
        key: "unknown" if v is None else v if isinstance(v, str) else json.dumps(v)
        for key, v in values.items()
    }


def _templates(record: RunRecord) -> dict[str, str] | None:
    """The prompt templates the run used, when they are the bundled ones (by hash)."""
    return prompt_texts() if record.prompts_sha256 == prompts_sha256() else None


def _model_info(name: str, **details: Any) -> dict[str, Any]:
    developer, _ = model_path(name)
    return {
        "name": name,
        "id": name,
        "developer": developer,
        "additional_details": {
            "deployment_type": "unknown",
            "model_availability": "unknown",
            **strings(details),
        },
    }


def aggregate_record(record: RunRecord, row: Row, organization: str) -> dict[str, Any]:
    """The row's ``eval.schema.json`` record (without its samples' reference)."""
    provenance = record.provenance()
    summary = row.summary
    source_data = {
        "dataset_name": "AidanBench questions",
        "source_type": "url",
        "url": [SOURCE_URL],
        "additional_details": strings(
            {
                "questions_sha256": record.questions_sha256,
                "questions": len(record.questions),
                "questions_source": provenance["questions_source"],
            }
        ),
    }
    templates = _templates(record)
    judge = record.judge_model
    llm_scoring = (
        None
        if judge is None
        else {
            "judges": [{"model_info": _model_info(judge)}],
            "input_prompt": templates["judge_coherence"] if templates else "unknown",
            "additional_details": strings(
                {"scores": "coherence 0-100", "prompts_sha256": record.prompts_sha256}
            ),
        }
    )
    settings = record.scoring_settings(row.model)
    generation_args: dict[str, Any] = {"temperature": row.temperature}
    if isinstance(settings.get("cot"), bool):
        generation_args["reasoning"] = settings["cot"]
    if templates:
        generation_args["prompt_template"] = templates["generate_with_previous"]
    shared_details = strings(
        {
            "judge_model": judge,
            "embedding_model": record.embedding_model,
            "thresholds": provenance["thresholds"],
            "prompts_sha256": record.prompts_sha256,
            "questions_sha256": record.questions_sha256,
            "repeats": summary.repeats,
            "reward_mode": record.reward_mode,
            "counting": provenance["counting"],
        }
    )

    def result(
        metric: str,
        value: float,
        interval: Any,
        description: str,
        category: CategoryRow | None = None,
    ) -> dict[str, Any]:
        """One metric of the row, or of the row's questions of ``category``."""
        questions = summary.question_count if category is None else category.questions
        uncertainty: dict[str, Any] = {"num_samples": questions}
        if interval is not None:
            method = provenance["interval_method"]
            uncertainty["confidence_interval"] = {
                "lower": interval[0],
                "upper": interval[1],
                "confidence_level": method["level"],
                "method": method["method"],
            }
            uncertainty["num_bootstrap_samples"] = method["resamples"]
        config: dict[str, Any] = {
            "evaluation_description": description,
            "metric_id": f"{BENCHMARK}.{metric}",
            "metric_name": metric,
            "metric_kind": "sum",
            "metric_unit": "valid answers" if metric == "score" else "novelty",
            "lower_is_better": False,
            "score_type": "continuous",
            "min_score": 0,
            "max_score": "Infinity",
            "additional_details": shared_details,
        }
        if llm_scoring is not None:
            config["llm_scoring"] = llm_scoring
        details: dict[str, Any] = {
            "repeat_values": list(
                summary.repeat_scores if metric == "score" else summary.repeat_novelty_sums
            ),
            "questions": summary.question_count,
            "question_lines": summary.lines,
            "finished": summary.finished,
            "errored": summary.errored,
            "stop_reasons": summary.stop_reasons,
            "cost_usd": (row.cost or {}).get("cost_usd"),
            **{f"cost_{part}_usd": value for part, value in summary.cost_parts.items()},
            "score_is_lower_bound": summary.lower_bound,
            **summary.mean_fields(),
            **({"judge_panel": panel_text(summary.judge_panel)} if summary.judge_panel else {}),
        }
        result_id = f"{BENCHMARK}.{metric}"
        if category is not None:
            config["metric_parameters"] = {"category": category.category}
            details = {
                "category": category.category,
                "questions": category.questions,
                "score_is_lower_bound": category.lower_bound,
            }
            result_id += f".category.{category.category}"
        return {
            "evaluation_result_id": result_id,
            "evaluation_name": BENCHMARK,
            "source_data": source_data,
            **({"evaluation_timestamp": record.started_at} if record.started_at else {}),
            "metric_config": config,
            "score_details": {
                "score": value,
                "details": strings(details),
                "uncertainty": uncertainty,
            },
            "generation_config": {
                "generation_args": generation_args,
                "additional_details": strings(
                    {**settings, "max_answers": record.max_answers(row.model)}
                ),
            },
        }

    aggregate: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": evaluation_id(record, row),
        "retrieved_timestamp": retrieved(record),
        "source_metadata": {
            "source_name": "AidanBench",
            "source_type": "evaluation_run",
            "source_organization_name": organization,
            "source_organization_url": SOURCE_URL,
            "evaluator_relationship": "third_party",
            "additional_details": strings(
                {
                    "run": provenance["source"],
                    "kind": provenance["kind"],
                    **({"warnings": provenance["warnings"]} if provenance["warnings"] else {}),
                }
            ),
        },
        "eval_library": {
            "name": "aidanbench",
            "version": record.package_version or installed_version(),
            "additional_details": strings({"git_commit": record.git_commit}),
        },
        "model_info": _model_info(row.model, temperature=row.temperature),
        "evaluation_results": [
            result(
                "score",
                summary.score,
                summary.score_interval,
                "AidanBench score: valid answers (every score strictly above its threshold) "
                "summed over questions, mean over repeats",
            ),
            result(
                "novelty_sum",
                summary.novelty_sum,
                summary.novelty_sum_interval,
                "Embedding novelty of the valid answers summed over questions, mean over repeats",
            ),
            *(
                result(
                    "score",
                    category.score,
                    category.score_interval,
                    f"AidanBench score of the questions of category {category.category}: "
                    "valid answers summed over them, mean over repeats",
                    category,
                )
                for category in summary.categories
            ),
        ],
    }
    if record.started_at:
        aggregate["evaluation_timestamp"] = record.started_at
    return aggregate


def instance_records(record: RunRecord, row: Row) -> list[dict[str, Any]]:
    """One ``instance_level_eval.schema.json`` record per question chain of the row."""
    templates = _templates(record)
    cot = record.scoring_settings(row.model).get("cot")
    found: list[dict[str, Any]] = []
    for line in row.lines:
        messages: list[dict[str, Any]] = [{"turn_idx": 0, "role": "user", "content": line.question}]
        attribution = []
        for turn, answer in enumerate(line.answers, start=1):
            messages.append(
                {
                    "turn_idx": turn,
                    "role": "assistant",
                    "content": answer.raw_reply or answer.answer,
                }
            )
            attribution.append(
                {
                    "turn_idx": turn,
                    "source": f"messages[{turn}].content",
                    "extracted_value": answer.answer,
                    "extraction_method": "answer_tag"
                    if answer.used_answer_tag
                    else "whole_reply"
                    if answer.used_answer_tag is False
                    else "unknown",
                    "is_terminal": turn == len(line.answers),
                }
            )
        cost = row.line_cost.get(line_key(line), {})
        found.append(
            {
                "schema_version": SCHEMA_VERSION,
                "evaluation_id": evaluation_id(record, row),
                "model_id": row.model,
                "evaluation_name": BENCHMARK,
                "evaluation_result_id": f"{BENCHMARK}.score",
                "sample_id": f"q{question_number(record, line.question):03d}",
                "sample_hash": hashlib.sha256(line.question.encode("utf-8")).hexdigest(),
                "interaction_type": "multi_turn",
                "input": {
                    "raw": line.question,
                    "formatted": render_generate(line.question, [], cot=cot)
                    if templates and isinstance(cot, bool)
                    else None,
                    "reference": [],
                },
                "output": None,
                "messages": messages,
                "answer_attribution": attribution,
                "evaluation": {
                    "score": line.score,
                    "is_correct": line.score > 0,
                    "num_turns": len(messages),
                },
                "error": line.error,
                "metadata": strings(
                    {
                        "repeat": line.repeat,
                        "stop_reason": line.stop_reason,
                        "novelty_sum": line.novelty_sum,
                        "cost_usd": cost.get("cost_usd"),
                        "censored": cost.get("censored"),
                        "score_is_lower_bound": line.lower_bound,
                        "answers": [answer_detail(a) for a in line.answers],
                    }
                ),
            }
        )
    return found
