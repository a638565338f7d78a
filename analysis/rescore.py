"""Scores under other thresholds, from the recorded chains alone (no API calls).

Each recorded chain is walked again with ``chain_validity``. Under stricter thresholds this is
exact: the chain stops earlier, at a recorded answer. Under looser ones, when the recorded
terminal answer now passes, the benchmark would have gone on generating answers never produced:
such a line is *truncated*, its score a lower bound. Answers before the terminal one were valid
in the run, so their recorded novelty (against earlier valid answers) is still what a run with
the new thresholds would compute. A judge panel decides by majority: the new coherence threshold
applies to its first judge, the others keep their recorded ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from aidanbench.analysis.rejudge import Rejudging, coherence_prompt
from aidanbench.core.scores import named
from aidanbench.core.thresholds import Thresholds, label_of, panel_verdict
from aidanbench.core.vocabulary import is_threshold_stop
from aidanbench.record.results import QuestionResult, answer_scores, chain_validity

TRUNCATED = "truncated"
"""Stop reason of a rescored line whose recorded terminal answer now passes."""


@dataclass(frozen=True)
class RescoredQuestion:
    """One question line scored again under new thresholds."""

    result: QuestionResult
    """The line with validity, stop reason and thresholds of the new rule."""
    original: QuestionResult
    """The line as recorded."""
    original_thresholds: Thresholds
    """Thresholds the run used (the benchmark's when the line does not say)."""
    truncated: bool
    """The recorded terminal answer passes now: ``result.score`` is a lower bound."""

    @property
    def original_score(self) -> int:
        """Score as recorded."""
        return self.original.score


def rescore_question(
    result: QuestionResult, thresholds: Thresholds, source: str | None = None
) -> RescoredQuestion:
    """``result`` under ``thresholds``, whose coherence threshold came from ``source`` (in
    words, ``record.results.threshold_source_text``; None: unknown). A failing answer ends the
    line by the new rule whatever ended the run (an error or the cap came later); when every
    answer passes, the recorded ending stays, except the old rule's, now ``truncated``."""
    scores = [answer_scores(a, thresholds.coherence) for a in result.answers]
    flags, reason = chain_validity(scores, thresholds)
    answers = tuple(
        a.model_copy(update={"valid": ok}) for a, ok in zip(result.answers, flags, strict=True)
    )
    truncated = reason is None and is_threshold_stop(result.stop_reason)
    stop_reason: str | None
    if reason is not None:
        stop_reason, error = reason, None
    elif truncated:
        stop_reason, error = TRUNCATED, None
    else:
        stop_reason, error = result.stop_reason, result.error
    rescored = replace(
        result,
        answers=answers,
        stop_reason=stop_reason,
        error=error,
        thresholds=thresholds,
        threshold_source=source,
    )
    return RescoredQuestion(
        result=rescored,
        original=result,
        original_thresholds=result.thresholds or Thresholds(),
        truncated=truncated,
    )


def rescore(
    results: Sequence[QuestionResult], thresholds: Thresholds, source: str | None = None
) -> list[RescoredQuestion]:
    """Every line under ``thresholds`` (from ``source``). Raises ``ValueError`` for a
    threshold of a score no answer recorded: every chain would end at its first answer."""
    for name in thresholds.on:
        if all(getattr(a, name, None) is None for r in results for a in r.answers):
            raise ValueError(unrecorded(name))
    return [rescore_question(result, thresholds, source) for result in results]


def unrecorded(name: str) -> str:
    """Why a rule cannot hold a score that no recorded answer has."""
    score = named(name)
    label = label_of(name)
    switch = "" if score is None or score.switch is None else f" (the run had {score.switch} off)"
    return f"a {label} threshold needs {label} scores, and these results have none{switch}"


NO_JUDGMENTS = {"coherence_samples": None, "judges": None}
"""An answer's recorded judgments, cleared when a new judge judges it."""

Judge = tuple[str, float, Rejudging]
"""A judge of a re-judging: its model, its coherence threshold and its judgments."""


def rejudged_line(line: QuestionResult, judges: Sequence[Judge]) -> QuestionResult:
    """The line with the first judge's deciding judgment as each coherence, a panel's beside it
    and samples when several were asked. An answer its judge refused (a panel: one the judges
    who answered leave undecided, ``panel_verdict``) ends the chain, unscored; one a panel
    decided without its first judge has no coherence."""
    answers = []
    for answer in line.answers:
        prompt = coherence_prompt(line.question, answer.answer)
        found = [judged.judgments.get(prompt) for _, _, judged in judges]
        panel: list[dict[str, Any]] = [
            {
                "judge": model,
                "score": None if judged is None else float(judged.score),
                "threshold": threshold,
                "passes": None if judged is None else judged.score > threshold,
            }
            for (model, threshold, _), judged in zip(judges, found, strict=True)
        ]
        first = found[0]
        seats = panel if len(panel) > 1 else None
        if panel_verdict([seat["passes"] for seat in panel]) is None:
            undecided = {"coherence": None, **NO_JUDGMENTS, "judges": seats}
            answers.append(answer.model_copy(update=undecided))
            continue
        judge = {
            "served_model": None if first is None else first.served[0],
            "latency_s": 0.0,
            "input_tokens": 0,
            "output_tokens": 0,
            "calls": 0,
        }
        samples = [] if first is None else [float(s) for s in first.scores]
        update = {
            "coherence": None if first is None else float(first.score),
            "calls": {**(answer.calls or {}), "judge": judge},
            "coherence_samples": samples if len(samples) > 1 else None,
            "judges": seats,
        }
        answers.append(answer.model_copy(update=update))
    return replace(line, answers=tuple(answers), judge_model=judges[0][0])


def rejudge_lines(
    results: Sequence[QuestionResult],
    judges: Sequence[Judge],
    thresholds: Thresholds,
    source: str | None = None,
) -> list[RescoredQuestion]:
    """Every line judged again by ``judges`` (one, or a panel) and walked under ``thresholds``
    (its coherence the first judge's); each result's ``original`` is the line as recorded (its
    own judge's scores), and ``source`` says where the coherence threshold came from."""
    return [
        replace(rescore_question(rejudged_line(line, judges), thresholds, source), original=line)
        for line in results
    ]
