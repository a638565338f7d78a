"""An Inspect evaluation log per model: what ``inspect view`` opens and Every Eval Ever
converts.

One log per (model, temperature), one sample per question chain: its id is the question's
number, its epoch the repeat, its messages each answer's prompt as the model got it (the bare
question when the run's templates are not this package's) and the scored reply, its score the
valid answers. The log's results are the row's figures as ``report`` prints them; its spec names
the judge and embedding models (``model_roles``), thresholds, cap, hashes and cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import line_key, score_text
from aidanbench.analysis.export import ExportSet, run_stem
from aidanbench.analysis.export.record import (
    Row,
    RunRecord,
    answer_detail,
    installed_version,
    model_path,
    question_number,
    role_usage,
)
from aidanbench.core.errors import install_hint
from aidanbench.core.vocabulary import is_final
from aidanbench.nodes.prompts import prompts_sha256, render_generate
from aidanbench.record.lines import AnswerLine
from aidanbench.record.results import QuestionResult

TASK = "aidanbench"


def _inspect() -> Any:
    try:
        import inspect_ai.log
    except ImportError as exc:
        raise ImportError(f"--format inspect needs inspect-ai: {install_hint('export')}") from exc
    import inspect_ai

    return inspect_ai


def write(records: Sequence[RunRecord], files: ExportSet, **_: Any) -> None:
    """Write one ``.eval`` log per row of ``records``."""
    _inspect()
    from inspect_ai.log import write_eval_log

    for record in records:
        stem = run_stem(record)
        for row in record.rows:
            developer, model = model_path(row.model)
            name = Path(f"{stem}_{developer}__{model}_t{row.temperature:g}.eval")
            write_eval_log(eval_log(record, row), files.path(name, row.model), format="eval")


def eval_log(record: RunRecord, row: Row) -> Any:
    """The row as an ``inspect_ai.log.EvalLog``."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalError, EvalLog, EvalSpec, EvalStats
    from inspect_ai.model import GenerateConfig, ModelConfig

    roles: dict[str, ModelConfig | list[ModelConfig]] = {
        role: ModelConfig(model=name)
        for role, name in (("judge", record.judge_model), ("embedding", record.embedding_model))
        if name is not None
    }
    samples = [sample(record, row, line) for line in row.lines]
    unfinished = [line for line in row.lines if not is_final(line.stop_reason)]
    created = record.started_at or datetime.now(UTC).isoformat(timespec="seconds")
    spec = EvalSpec(
        created=created,
        task=TASK,
        task_version=1,
        dataset=EvalDataset(
            name=TASK,
            samples=len(record.questions),
            sample_ids=list(range(1, len(record.questions) + 1)),
        ),
        model=row.model,
        model_generate_config=GenerateConfig(temperature=row.temperature),
        model_roles=roles or None,
        config=EvalConfig(epochs=row.summary.repeats),
        revision=_revision(record),
        packages={"aidanbench": record.package_version or installed_version()},
        metadata={
            "aidanbench": record.provenance(),
            "row": row.summary.to_dict(),
            "cost": row.cost,
            "max_answers": record.max_answers(row.model),
        },
    )
    return EvalLog(
        status="success" if not unfinished else "error",
        eval=spec,
        results=results(record, row),
        stats=EvalStats(
            started_at=record.started_at or "",
            completed_at=record.finished_at or "",
            model_usage=model_usage(record, row),
        ),
        error=None
        if not unfinished
        else EvalError(
            message=f"{len(unfinished)} question line(s) ended on an error or did not finish",
            traceback="",
            traceback_ansi="",
        ),
        samples=samples,
    )


def _revision(record: RunRecord) -> Any:
    from inspect_ai.log import EvalRevision

    if record.git_commit is None:
        return None
    return EvalRevision(type="git", origin="", commit=record.git_commit)


def results(record: RunRecord, row: Row) -> Any:
    """The row's figures as ``report`` prints them (one number everywhere)."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    summary = row.summary
    bound = {"lower_bound": True} if summary.lower_bound else None

    def score(name: str, value: float, interval: tuple[float, float] | None, about: str) -> Any:
        metrics = {"total": EvalMetric(name="total", value=value, metadata=bound)}
        if interval is not None:
            metrics["ci_lower"] = EvalMetric(name="ci_lower", value=interval[0])
            metrics["ci_upper"] = EvalMetric(name="ci_upper", value=interval[1])
        metadata = {"definition": about, "lower_bound": summary.lower_bound}
        return EvalScore(name=name, scorer=TASK, metrics=metrics, metadata=metadata)

    return EvalResults(
        total_samples=len(row.lines),
        completed_samples=summary.finished,
        scores=[
            score(
                "score",
                summary.score,
                summary.score_interval,
                "valid answers summed over questions, mean over repeats",
            ),
            score(
                "novelty_sum",
                summary.novelty_sum,
                summary.novelty_sum_interval,
                "embedding novelty of valid answers, summed",
            ),
        ],
        metadata={
            "reward_mode": record.reward_mode,
            "headline": summary.reward,
            "headline_text": score_text(f"{summary.reward:g}", summary.lower_bound),
            **summary.mean_fields(),
            **(
                {"categories": [category.to_dict() for category in summary.categories]}
                if summary.categories
                else {}
            ),
        },
    )


def model_usage(
    record: RunRecord, row: Row, lines: list[QuestionResult] | None = None
) -> dict[str, Any]:
    """Tokens and dollars per model over ``lines`` (default: the row's), summing to the row's
    ``tokens`` and ``cost_usd`` (embeddings are the ledger's: a request serves many answers)."""
    from inspect_ai.model import ModelUsage

    names = {
        "generate": row.model,
        "speculative": row.model,
        "judge": record.judge_model or "judge",
        "similarity": record.judge_model or "judge",
    }
    chosen = row.lines if lines is None else lines
    usage: dict[str, Any] = {}
    calls: list[Mapping[str, Any]] = [a.calls or {} for line in chosen for a in line.answers]
    calls += [line.look_aheads for line in chosen]
    chat = ({r: s for r, s in c.items() if r in names} for c in calls)
    for role, figures in role_usage(chat).items():
        tokens_in, tokens_out = figures["input_tokens"], figures["output_tokens"]
        if tokens_in is None or tokens_out is None:
            continue
        name = names[role]
        known = usage.get(name)
        reasoning = figures["reasoning_tokens"]
        add = ModelUsage(
            input_tokens=int(tokens_in),
            output_tokens=int(tokens_out),
            total_tokens=int(tokens_in) + int(tokens_out),
            reasoning_tokens=None if reasoning is None else int(reasoning),
            total_cost=None if figures["cost_usd"] is None else float(figures["cost_usd"]),
        )
        usage[name] = add if known is None else known + add
    return usage


def sample(record: RunRecord, row: Row, line: QuestionResult) -> Any:
    """One question chain as an Inspect sample."""
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    prompts = sent_prompts(record, row, line)
    messages: list[Any] = [
        message
        for prompt, a in zip(prompts, line.answers, strict=True)
        for message in (
            ChatMessageUser(content=prompt),
            ChatMessageAssistant(content=_reply(a), model=row.model, metadata=answer_detail(a)),
        )
    ]
    cost = row.line_cost.get(line_key(line), {})
    last = line.answers[-1] if line.answers else None
    return EvalSample(
        id=question_number(record, line.question),
        epoch=line.repeat,
        input=prompts[0] if prompts else line.question,
        target="",
        messages=messages,
        output=ModelOutput.from_content(row.model, _reply(last) if last else ""),
        scores={
            "score": Score(
                value=line.score,
                explanation=f"{score_text(line.score, line.lower_bound)} valid answers; "
                f"stopped on {line.stop_reason or 'nothing (not finished)'}",
            ),
            "novelty_sum": Score(value=line.novelty_sum),
        },
        metadata={
            "question": line.question,
            "repeat": line.repeat,
            "stop_reason": line.stop_reason,
            "error": line.error,
            "cost_usd": cost.get("cost_usd"),
            "censored": cost.get("censored"),
            "score_is_lower_bound": line.lower_bound,
            "answers": [answer_detail(a) for a in line.answers],
        },
        model_usage=model_usage(record, row, [line]),
        total_time=last.elapsed_s if last else None,
        error=None
        if line.error is None
        else EvalError(message=line.error, traceback="", traceback_ansi=""),
    )


def sent_prompts(record: RunRecord, row: Row, line: QuestionResult) -> list[str]:
    """Each answer's generate prompt as the run rendered it (else the bare question)."""
    if record.prompts_sha256 not in (None, prompts_sha256()):
        return [line.question] * len(line.answers)
    cot = bool(record.scoring_settings(row.model).get("cot"))
    earlier = [a.answer for a in line.answers]
    return [render_generate(line.question, earlier[:k], cot=cot) for k in range(len(earlier))]


def _reply(answer: AnswerLine) -> str:
    return answer.raw_reply or answer.answer
