"""The verifiers ``aidanbench`` environment's arguments on ``aidanbench run``.

A seed command ``vf-eval aidanbench -m MODEL -n N -r R -T TEMP -a JSON`` ports by replacing
``vf-eval aidanbench`` with ``aidanbench run``: ``-n`` is the number of questions run, and ``-a``
takes exactly the environment's keys, each mapped onto the option that means the same. An unknown
key is an error, and so is one that contradicts a flag given on the command line: letting one win
silently would run something neither asked for.

As in ``vf-eval``, ``num_questions`` (our ``--questions``) limits the set loaded and ``-n`` the
examples evaluated, so the smaller wins; ``--questions`` and ``num_questions`` or ``-n`` with
different values conflict.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from aidanbench.cli import calibration_file, options
from aidanbench.core.errors import UsageError
from aidanbench.core.seed_args import SEED_FIELDS, THRESHOLD_FIELDS
from aidanbench.core.settings import flag_of

QUESTION_KEYS = ("questions", "questions_path", "num_questions")
"""Environment keys that choose the question set."""

ENVIRONMENT_KEYS = frozenset({*SEED_FIELDS, *QUESTION_KEYS, "thresholds"})
"""Every key ``-a`` accepts: exactly the environment's."""

EXPLICIT_CHECKED = (*SEED_FIELDS.values(), *THRESHOLD_FIELDS.values(), "questions")
"""Destinations whose explicit use on the command line ``-a`` must not contradict."""


@dataclass(frozen=True)
class NotGiven:
    """A parser default that marks the option as not given on the command line."""

    value: Any


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``-n`` and ``-a`` to ``run``, after every other option: defaults ``-a`` can set are
    wrapped in ``NotGiven`` (unwrapped by ``apply``), so explicit flags can be told apart."""
    parser.add_argument(
        "-n",
        "--num-examples",
        type=int,
        metavar="N",
        help="number of questions to run (the first N of the set; vf-eval's -n)",
    )
    parser.add_argument(
        "-a",
        "--env-args",
        type=options.json_object,
        metavar="JSON",
        help="the verifiers aidanbench environment's arguments, e.g. "
        '\'{"use_llm_similarity": false, "num_questions": 10}\'',
    )
    parser.set_defaults(
        **{dest: NotGiven(parser.get_default(dest)) for dest in EXPLICIT_CHECKED},
    )


def apply(args: argparse.Namespace) -> None:
    """Fold ``-a`` into the options it maps onto, in place; check ``-n`` and conflicts.

    Then every option holds a plain value, ``args.questions_list`` the ``questions`` key's list (or
    None), and ``args.given_as`` maps each destination ``-a`` set to its key, so an invalid value is
    reported as typed. Idempotent (``run_spec`` applies it too).
    """
    if getattr(args, "env_args_applied", False):
        return
    args.env_args_applied = True
    explicit = {d for d in EXPLICIT_CHECKED if not isinstance(getattr(args, d, None), NotGiven)}
    for dest in EXPLICIT_CHECKED:
        value = getattr(args, dest, None)
        if isinstance(value, NotGiven):
            setattr(args, dest, value.value)
    env: dict[str, Any] = getattr(args, "env_args", None) or {}
    unknown = sorted(set(env) - ENVIRONMENT_KEYS)
    if unknown:
        raise UsageError(
            f"-a: unknown key(s) {', '.join(unknown)}; the environment's keys are "
            f"{', '.join(sorted(ENVIRONMENT_KEYS))}"
        )
    updates = {SEED_FIELDS[k]: (f"-a {k}", v) for k, v in env.items() if k in SEED_FIELDS}
    thresholds = env.get("thresholds")
    if thresholds is not None:
        if not isinstance(thresholds, dict):
            raise UsageError(f"-a thresholds must be a JSON object, got {thresholds!r}")
        unknown = sorted(set(thresholds) - set(THRESHOLD_FIELDS))
        if unknown:
            raise UsageError(
                f"-a thresholds: unknown key(s) {', '.join(unknown)}; the keys are "
                f"{', '.join(THRESHOLD_FIELDS)}"
            )
        for key, value in thresholds.items():
            updates[THRESHOLD_FIELDS[key]] = (f"-a thresholds.{key}", value)
    args.given_as = {dest: where for dest, (where, _) in updates.items()}
    for dest, (where, value) in updates.items():
        if dest == "coherence_threshold" and isinstance(value, str):  # a calibration file
            try:
                value = calibration_file.coherence_threshold(value)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{where}: {exc}") from None
        _check_type(dest, where, value)
        if dest in explicit and getattr(args, dest) != value:
            raise UsageError(
                f"{where}={json.dumps(value)} conflicts with {flag_of(dest)} "
                f"{_shown(getattr(args, dest))}; give one of them"
            )
        setattr(args, dest, value)
    _apply_questions(args, env, explicit)


def _apply_questions(args: argparse.Namespace, env: dict[str, Any], explicit: set[str]) -> None:
    inline = env.get("questions")
    if inline is not None and (
        not isinstance(inline, list) or not all(isinstance(q, str) for q in inline)
    ):
        raise UsageError("-a questions must be a JSON list of strings")
    path = env.get("questions_path")
    if path is not None and not isinstance(path, str):
        raise UsageError(f"-a questions_path must be a string, got {path!r}")
    sources = [
        name
        for name, given in (
            ("-a questions", inline is not None),
            ("-a questions_path", path is not None),
            ("--questions-file", getattr(args, "questions_file", None) is not None),
            ("--questions-dataset", getattr(args, "questions_dataset", None) is not None),
        )
        if given
    ]
    if len(sources) > 1:
        raise UsageError(f"{' and '.join(sources)} both choose the questions; give one")
    if path is not None:
        from pathlib import Path

        args.questions_file = Path(path)
    args.questions_list = inline
    limit = env.get("num_questions")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise UsageError(f"-a num_questions must be an integer, got {limit!r}")
        if "questions" in explicit and args.questions != limit:
            raise UsageError(
                f"-a num_questions={limit} conflicts with --questions {args.questions}; "
                "give one of them"
            )
        args.questions = limit
    examples = getattr(args, "num_examples", None)
    if examples is not None:
        if examples < 1:
            raise UsageError(f"-n must be at least 1, got {examples}")
        if "questions" in explicit and args.questions != examples:
            raise UsageError(
                f"-n {examples} conflicts with --questions {args.questions}; give one of them"
            )
        args.questions = examples if args.questions is None else min(args.questions, examples)


def _check_type(dest: str, where: str, value: Any) -> None:
    """The JSON value must have the type the option takes (argparse checks the flags)."""
    flag = next(flag for flag in options.flags() if flag.field == dest)
    if flag.kind is bool:
        ok = isinstance(value, bool)
        wanted = "true or false"
    elif flag.kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        wanted = "a number"
    elif flag.choices is not None:
        ok = value in flag.choices
        wanted = " or ".join(flag.choices)
    elif dest.endswith("_base_url"):
        ok = value is None or isinstance(value, str)
        wanted = "a URL string"
    else:
        ok = isinstance(value, str) and bool(value.strip())
        wanted = "a non-empty string"
    if not ok:
        raise UsageError(f"{where} must be {wanted}, got {json.dumps(value)}")


def _shown(value: Any) -> str:
    return "(given)" if isinstance(value, bool) else str(value)
