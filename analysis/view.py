"""One self-contained HTML file to look at results: leaderboard, heat map, chains, comparison.

The page works from ``file://`` with no network: script, styles, data and SVG charts are
inline. It reads results through the same readers and statistics as ``aidanbench report``, so
its numbers are the report's: each row's figures are its ``SummaryRow``'s, formatted here as
the report formats them, never recomputed in the page. There is no total across models: a sum
of different models' scores measures nothing.

Answer texts are the bulk of a run, so they never enter the initial DOM: each (model,
temperature) keeps its chains in its own JSON script element, parsed only when one of its
chains is opened, which keeps lab-scale runs quick to open.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from itertools import combinations
from pathlib import Path
from typing import Any

from aidanbench.analysis.cost import dollars_text, parts_text, tokens_text
from aidanbench.analysis.inputs import Source, read_input, token_limit_field_of
from aidanbench.analysis.judge_noise import noise_text, panel_text, unreadable_words
from aidanbench.analysis.report import cap_text, truncation_text
from aidanbench.analysis.summary import (
    describe_thresholds,
    group_label,
    group_results,
    paired_comparison,
    question_differences,
    question_order,
    summarise,
    warnings,
)
from aidanbench.analysis.summary_table import caption
from aidanbench.core.scores import Score, declared
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.files import atomic_write
from aidanbench.record.lines import AnswerLine
from aidanbench.record.metadata import Metadata, is_replay
from aidanbench.record.results import QuestionResult, measured_scores

TEMPLATE = "view_template.html"
"""The page's markup, styles and script; ``build_html`` fills its two slots."""

DATA_SLOT = "/*DATA*/null"
"""Where the summary JSON goes (inside a ``<script type="application/json">``)."""

CHAINS_SLOT = "<!--CHAINS-->"
"""Where the per-group chain scripts go."""


def load_source(path: Path, thresholds: Thresholds | None = None) -> Source:
    """Results and metadata at ``path`` (a run directory or an original-schema file); raises
    ``ValueError`` naming the problem when the path cannot be read or holds nothing."""
    try:
        source = read_input(path, thresholds)
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
        raise ValueError(f"cannot read results at {path}: {detail}") from exc
    if not source.results:
        raise ValueError(f"no question results at {path}")
    return source


def _distinct(sources: Sequence[Source]) -> list[list[QuestionResult]]:
    """Each source's results; a model that two sources share becomes ``MODEL [NAME]``, so two
    paths with the same model and temperature do not merge into one row."""
    counts = Counter(key for source in sources for key in group_results(source.results))
    return [
        [
            dataclasses.replace(r, model=f"{r.model} [{source.path.name}]")
            if counts[(r.model, r.temperature)] > 1
            else r
            for r in source.results
        ]
        for source in sources
    ]


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def score_docs(scores: Sequence[Score]) -> list[dict[str, Any]]:
    """The page's description of each score it shows: its name, heading, scale, digits, and
    whether it is always on (its mean column is then shown even without a value)."""
    return [
        {
            "name": s.name,
            "label": s.label,
            "scale": s.scale,
            "digits": 1 if s.scale > 1 else 3,
            "always": s.switch is None,
        }
        for s in scores
    ]


def failure(
    answers: Sequence[AnswerLine], stop_reason: str | None, thresholds: Thresholds
) -> dict[str, Any] | None:
    """The failing answer of a chain stopped by the rule: index, criterion, value, threshold."""
    failed = next((a for a in answers if not a.valid), None)
    score = next((s for s in declared() if s.name == stop_reason), None)
    if failed is None or (score is None and stop_reason != "unscored"):
        return None
    return {
        "index": failed.index,
        "criterion": stop_reason,
        "value": None if score is None else _finite(score.value(failed)),
        "threshold": None if score is None else thresholds.get(score.name),
    }


RAW_SAME = 0
"""Raw-reply code: the reply was exactly the answer."""

RAW_TAGGED = 1
"""Raw-reply code: the reply was exactly ``<answer>ANSWER</answer>``."""


def raw_code(raw: Any, answer: str) -> str | int | None:
    """The raw reply as the page stores it: a code when it is the answer, bare or in tags (the
    page rebuilds it byte for byte; nearly every reply, so this halves a page), else the text."""
    if not isinstance(raw, str):
        return None
    if raw == answer:
        return RAW_SAME
    if raw == f"<answer>{answer}</answer>":
        return RAW_TAGGED
    return raw


def _chain(line: QuestionResult, scores: Sequence[Score]) -> list[list[Any]]:
    """Answers as ``[index, text, valid, raw reply, cut by the token limit, each of
    ``scores``' values]`` (cut true, false or null when not recorded)."""
    return [
        [
            a.index,
            a.answer,
            a.valid,
            raw_code(a.raw_reply, a.answer),
            a.truncated,
            *(_finite(score.value(a)) for score in scores),
        ]
        for a in line.answers
    ]


def view_data(sources: Sequence[Source]) -> tuple[dict[str, Any], list[list[list[list[Any]]]]]:
    """The page's summary document and, per group (``summarise``'s rows), its lines' chains,
    in the order of that group's ``lines`` (a line's ``k`` is its chain's index)."""
    per_source = _distinct(sources)
    results = [r for rs in per_source for r in rs]
    origin: dict[tuple[str, float], Source] = {}
    for source, rs in zip(sources, per_source, strict=True):
        for r in rs:
            origin.setdefault((r.model, r.temperature), source)
    questions = question_order(results)
    number = {q: i for i, q in enumerate(questions)}
    groups = group_results(results)
    rows = summarise(results)
    measured = measured_scores(results)
    temperatures = len({t for _, t in groups})
    group_docs: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    chains: list[list[list[list[Any]]]] = []
    truncation: list[str] = []
    for g, row in enumerate(rows):
        key = (row.model, row.temperature)
        source = origin[key]
        meta = source.metadata or Metadata()
        settings = meta.settings
        recorded = row.thresholds is not None
        shown = row.thresholds or source.read_thresholds
        cut = truncation_text(row, token_limit_field_of(row.model, meta), temperatures)
        truncation += [cut] if cut else []
        group_docs.append(
            {
                "label": group_label(row.model, row.temperature, temperatures),
                "row": json.loads(json.dumps(row.to_dict(), default=str)),
                "source": source.path.name,
                "kind": "run directory" if source.path.is_dir() else "results file",
                "judge_model": row.judge_model or (settings.judge_model if settings else None),
                "embedding_model": row.embedding_model
                or (settings.embedding_model if settings else None),
                "thresholds": describe_thresholds(shown)
                + ("" if recorded else " (not recorded; validity recomputed with these)"),
                "prompts_sha256": meta.prompts_sha256,
                "recorded": row.api_calls is not None,
                "cost_text": dollars_text(row.cost_usd) + (" (replay)" if replayed(meta) else ""),
                "cost_parts_text": parts_text(row.cost_parts) if row.cost_parts else None,
                "tokens_text": tokens_text(row.tokens),
                "judge_served": served_text(row.judge_served),
                "threshold_source": row.threshold_source,
                "judge_noise": None if row.judge_noise is None else noise_text(row.judge_noise),
                "judge_panel": None if row.judge_panel is None else panel_text(row.judge_panel),
                "answer_cap": cap_text(row.answer_cap),
                "judge_unreadable": unreadable_words(row.judge_unreadable),
            }
        )
        group_chains: list[list[list[Any]]] = []
        for line in groups[key]:
            thresholds = line.thresholds or source.read_thresholds
            lines.append(
                {
                    "g": g,
                    "q": number[line.question],
                    "r": line.repeat,
                    "k": len(group_chains),
                    "score": line.score,
                    "n": len(line.answers),
                    "stop": line.stop_reason,
                    "error": line.error,
                    "finished": line.finished,
                    "cut": line.truncated_answers,
                    "t": {score.name: thresholds.get(score.name) for score in measured},
                    "fail": failure(line.answers, line.stop_reason, thresholds),
                }
            )
            group_chains.append(_chain(line, measured))
        chains.append(group_chains)
    comparisons = {}
    models = list(dict.fromkeys(r.model for r in results))
    for a, b in combinations(models, 2):
        comparison = paired_comparison(results, a, b)
        differences = question_differences(results, a, b)
        comparisons[f"{models.index(a)}|{models.index(b)}"] = {
            **comparison.to_dict(),
            "per_question": [[number[q], d] for q, d in differences.items()],
        }
    data = {
        "title": ", ".join(s.path.name for s in sources),
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "counting": caption(rows).removesuffix(".")
        + (REPLAY_NOTE if any(replayed(s.metadata or Metadata()) for s in sources) else "")
        + ".",
        "questions": questions,
        "scores": score_docs(measured),
        "groups": group_docs,
        "lines": lines,
        "models": models,
        "comparisons": comparisons,
        "truncation": truncation,
        "warnings": [
            w.replace(
                "--compare A B gives a paired difference",
                "the paired comparison below compares two models on the questions both ran",
            )
            for w in warnings(results)
        ]
        + [note for source in sources for note in source.notes],
    }
    return data, chains


REPLAY_NOTE = (
    ". A row marked (replay) is aidanbench demo's replay of the published run against a "
    "local server: nothing was spent, and its dollars are what the published run's "
    "requests, replayed token for token, cost at the bundled list prices"
)
"""Said after the caption when a row is a replay (the caption's own full stop comes after)."""


def replayed(meta: Metadata) -> bool:
    """A run directory of ``aidanbench demo``: the published run replayed, no provider."""
    return is_replay(meta.questions_source)


def served_text(served: Mapping[str, int]) -> str | None:
    """The models that served a row's judgments, with how many answers each."""
    if not served:
        return None
    return ", ".join(f"{name} ({count})" for name, count in served.items())


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<`` can close it or open a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c")


def build_html(sources: Sequence[Source]) -> str:
    """The whole page for ``sources``."""
    data, chains = view_data(sources)
    template = resources.files("aidanbench.analysis").joinpath(TEMPLATE).read_text("utf-8")
    blocks = "\n".join(
        f'<script type="application/json" id="chains-{g}">{_script_json(c)}</script>'
        for g, c in enumerate(chains)
    )
    page = template.replace(DATA_SLOT, _script_json(data), 1).replace(CHAINS_SLOT, blocks, 1)
    page = page.replace(BOARD_SLOT, static_board(data), 1)
    return page.replace(COUNTING_SLOT, html.escape(data["counting"]), 1)


BOARD_SLOT = "<!--BOARD-->"
"""Where the leaderboard written in the page goes, so it reads without JavaScript (the
script replaces it with the full, sortable one)."""

COUNTING_SLOT = "<!--COUNTING-->"
"""Where the counting convention goes, for the same readers."""


def static_board(data: Mapping[str, Any]) -> str:
    """The leaderboard as plain HTML rows, highest score first: each row's model, score
    (``≥`` a lower bound), questions, finished, errored and dollars, as the script shows
    them (every text escaped)."""
    groups = sorted(data["groups"], key=lambda g: -float(g["row"]["score"]))
    head = ["#", "model", "score", "questions", "finished", "errored", "cost (USD)"]
    rows = []
    for rank, group in enumerate(groups, 1):
        row = group["row"]
        cells = [
            str(rank),
            group["label"],
            ("≥ " if row["lower_bound"] else "") + f"{row['score']:g}",
            str(row["question_count"]),
            str(row["finished"]),
            str(row["errored"]),
            group["cost_text"] if group["recorded"] else "–",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f'<th scope="col">{html.escape(h)}</th>' for h in head)
    return f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody>"


def write_view(
    paths: Sequence[Path | str], out: Path | str, thresholds: Thresholds | None = None
) -> Path:
    """Write the page of ``paths`` to ``out``, every path read first; raises ``ValueError``
    naming one that cannot be read. ``thresholds`` apply to original-schema files only."""
    return write_page([load_source(Path(p), thresholds) for p in paths], out)


def write_page(sources: Sequence[Source], out: Path | str) -> Path:
    """Write the page of ``sources`` (results in memory, as a run ends) to ``out``."""
    target = Path(out)
    atomic_write(target, build_html(sources))
    return target
