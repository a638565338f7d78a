"""``aidanbench rescore``: scores under other thresholds, or another judge, from the
recorded chains.

Prints the shape ``report`` prints, plus each line's recorded score and whether it is
truncated (see ``aidanbench.analysis.rescore``): under looser thresholds a recorded chain
can end at an answer that now passes, and its score is then only a lower bound.

With ``--judge-model M`` every recorded answer is judged again by M first
(``analysis.rejudge``: the benchmark's coherence prompt, cached, direct or batched) and
the chains are walked under M's judgments: exact where a chain now stops earlier, a lower
bound where a recorded failing answer now passes. ``--into NEW_RUN`` writes those
re-judged chains as a run directory that ``aidanbench run`` continues
(``runner.rejudged``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aidanbench.analysis.rescore import rescore
from aidanbench.cli import add_command, judging, options, rejudged
from aidanbench.cli.calibration_file import coherence_value, threshold_value
from aidanbench.cli.env_args import NotGiven
from aidanbench.cli.report import (
    add_common_arguments,
    make_console,
    one_line,
    read_inputs,
)
from aidanbench.cli.rescore_report import print_rescore, rescore_payload
from aidanbench.core.errors import UsageError
from aidanbench.core.thresholds import Thresholds
from aidanbench.record.metadata import ThresholdSource
from aidanbench.record.results import threshold_source_text


def source_text(coherence: float, given: Mapping[str, Any] | None) -> str | None:
    """Where the coherence threshold a rescore uses came from, in words."""
    return threshold_source_text(ThresholdSource.of(coherence, given))


def thresholds_from(args: argparse.Namespace) -> Thresholds:
    """The thresholds the arguments ask for, validated."""
    coherence = float(coherence_value(args.coherence_threshold))
    novelty = threshold_value(args.novelty_threshold, "--novelty-threshold", 2)
    llm = (
        None
        if args.llm_novelty_threshold is None
        else threshold_value(args.llm_novelty_threshold, "--llm-novelty-threshold", 2)
    )
    return Thresholds(coherence=coherence, novelty=novelty, llm_novelty=llm)


def run(args: argparse.Namespace) -> int:
    """Handler of ``aidanbench rescore``."""
    if isinstance(args.judge_model, NotGiven):
        args.judge_model = args.judge_model.value
        if len(options.listed(args, "coherence_threshold")) > 1:
            raise UsageError(
                "--coherence-threshold is given once per judge of a panel: name the judges "
                "with --judge-model (or give it once)"
            )
        for given, flag in (
            (args.into is not None, "--into"),
            (args.batch, "--batch"),
            (args.judge_samples != 1, "--judge-samples"),
        ):
            if given:
                raise UsageError(
                    f"{flag} needs --judge-model (the judge to judge the answers again)"
                )
    else:
        return rejudged.run(args, thresholds_from(args))
    thresholds = thresholds_from(args)
    given = getattr(coherence_value(args.coherence_threshold), "source", None)
    inputs = read_inputs(args.paths, reward_mode=args.reward_mode)
    try:
        rescored = rescore(inputs.results, thresholds, source_text(thresholds.coherence, given))
    except ValueError as exc:
        raise UsageError(one_line(exc)) from exc
    mode, notes = inputs.reward_mode, inputs.notes
    if args.json:
        print(json.dumps(rescore_payload(rescored, thresholds, mode, notes), indent=2))
    else:
        print_rescore(rescored, thresholds, make_console(), mode, notes)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``rescore`` command."""
    parser = add_command(
        subparsers,
        "rescore",
        (
            "Walk every recorded chain again under other thresholds. Stricter thresholds "
            "give exact scores; under looser ones a chain whose recorded terminal answer "
            "now passes is marked truncated and counts as a lower bound. Thresholds of an "
            "original-schema file are assumed to be the benchmark's (15, 0.15). With "
            "--judge-model M, every answer is judged again by M first (API calls, cached "
            "in --cache; --batch for the batch API), and --into NEW_RUN writes the "
            "re-judged chains as a run directory that aidanbench run continues."
        ),
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--coherence-threshold",
        required=True,
        action=options.PanelFlag,
        metavar="X",
        help="valid when coherence > X (0-100; the benchmark's is 15), or a judge "
        "calibration file (aidanbench calibrate --judge-model) giving X; with a judge "
        "panel (--judge-model given several times), once per judge",
    )
    parser.add_argument(
        "--novelty-threshold",
        required=True,
        metavar="Y",
        help="valid when embedding novelty > Y (0-2; the benchmark's is 0.15)",
    )
    parser.add_argument(
        "--llm-novelty-threshold",
        metavar="Z",
        help="also require LLM novelty > Z (0-2; needs a run with the similarity judge)",
    )
    judging.register(parser)
    parser.add_argument(
        "--into",
        type=Path,
        metavar="NEW_RUN",
        help="with --judge-model: write the re-judged chains as a run directory that "
        "aidanbench run continues (asking the models only for answers past each chain)",
    )
    parser.set_defaults(judge_model=NotGiven(parser.get_default("judge_model")), handler=run)
