"""The command line's settings flags, derived from ``Settings``' fields.

Each field is one flag named after it, typed from its annotation, with the field's default and
description as help, so the command line cannot restate a default or a range that the settings then
contradict. The departures, each with its reason: ``RENAMED``, ``REPEATABLE``, ``SHORT`` and
``NO_FLAG`` (a test holds every field to a flag or a stated reason). Validation stays with
``Settings``; its errors name the flag (``validation_line``). ``rescore``'s ``--*-threshold``
options are not made here: they are the targets of a rescore, not settings of a run.

The question-set flags (``add_question_flags``, ``question_set``) only say which source
``graph.questions.load_question_set`` reads, and word its refusals after the flags.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from aidanbench.cli import calibration_file
from aidanbench.core.base_url import BASE_URL_VARIABLE
from aidanbench.core.errors import QuestionSourceError, UsageError, printable
from aidanbench.core.scores import declared
from aidanbench.core.settings import Settings, unused_variants, variant_problem
from aidanbench.graph.questions import (
    DATASET_FILE_SUFFIXES,
    DEFAULT_FIELD,
    QuestionSet,
    bundled_questions,
    load_question_set,
    validated,
)

NO_FLAG: dict[str, str] = {
    "cache_path": "the command keeps the cache in the run directory (RUN_DIR/cache.sqlite), "
    "so it moves and resumes with the run",
    "interrupt_on_reject": "pauses a question for a person to inspect in Studio; the command "
    "line has nobody to resume it (a Studio-paused thread is continued by the CLI without "
    "pauses)",
    "interrupt_every": "pauses a question for a person to inspect in Studio; the command "
    "line has nobody to resume it",
    "variant_fields": "given per label as --variant LABEL=JSON, for each model named "
    "NAME@LABEL (one row per variant)",
    "judge_panel": "given by naming --judge-model more than once: each judge after the "
    "first is one of the panel, with its --judge-base-url, --judge-api-key-env and "
    "--coherence-threshold given in the same order",
}
"""Settings fields that deliberately have no flag, each with the reason."""

RENAMED: dict[str, str] = {
    "max_concurrency": "--endpoint-concurrency",
    "pipeline": "--no-pipeline",
    "prices_path": "--prices",
}
"""Flags not named after their field: ``max_concurrency`` is per endpoint (``--concurrency`` is
questions in flight), ``pipeline`` is on by default (so its flag turns it off), ``--prices`` names a
file."""

SHORT: dict[str, str] = {"model": "-m", "temperature": "-T", "base_url": "-b", "api_key_env": "-k"}
"""Short names: the verifiers environment's (``vf-eval``) for the same options."""

REPEATABLE: frozenset[str] = frozenset({"model", "temperature"})
"""Fields a run takes several values of: one ``Settings`` per (model, temperature)."""

PANEL: tuple[str, ...] = (
    "judge_model",
    "judge_base_url",
    "judge_api_key_env",
    "coherence_threshold",
)
"""A judge's flags: ``--judge-model`` again names one more judge of a panel
(``Settings.judge_panel``), the others are given once or once per judge in order (``judges``);
a panel's thresholds once per judge, each on its judge's own scale."""

METAVARS: dict[str, str] = {
    "request_timeout": "SECONDS",
    "coherence_threshold": "X|FILE",
    "prices_path": "FILE",
}
"""Metavariables other than the one a field's type gives."""

WIDER: dict[str, tuple[Callable[[str], Any], str]] = {
    "coherence_threshold": (
        calibration_file.coherence_threshold,
        " Or a judge calibration file (aidanbench calibrate --judge-model): its threshold, "
        "with the file's path and sha256 recorded in the run's metadata.",
    ),
}
"""Flags that take more than their field's type, with the parser and the help it adds: a successor
judge's coherence threshold is measured, and the run records where it came from."""


@dataclass(frozen=True)
class Flag:
    """One settings flag and the field it sets."""

    field: str
    """The ``Settings`` field."""
    name: str
    """The long option, e.g. ``--judge-base-url``."""
    kind: type
    """The value's Python type (``None`` left out of optional fields)."""
    default: Any
    """The field's default: what the run uses when the flag is not given."""
    choices: tuple[Any, ...] | None
    """The allowed values of a ``Literal`` field."""
    help: str
    """The field's description."""

    @property
    def names(self) -> list[str]:
        """The option strings, the short one first."""
        return [SHORT[self.field], self.name] if self.field in SHORT else [self.name]


def flag_name(field: str) -> str:
    """The long option of a settings field (its name, or its ``RENAMED`` name)."""
    return RENAMED.get(field, "--" + field.replace("_", "-"))


def _kind(info: FieldInfo) -> tuple[type, tuple[Any, ...] | None]:
    """The value type of a field and, for a ``Literal``, its choices."""
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"no flag type for {annotation!r}")
        annotation = members[0]
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        return type(choices[0]), choices
    if typing.get_origin(annotation) is dict:
        return dict, None
    if annotation in (str, int, float, bool):
        return typing.cast(type, annotation), None
    raise TypeError(f"no flag type for {annotation!r}")


def flags() -> list[Flag]:
    """Every settings flag, in the order of ``Settings``' fields."""
    found: list[Flag] = []
    for field, info in Settings.model_fields.items():
        if field in NO_FLAG:
            continue
        kind, choices = _kind(info)
        found.append(
            Flag(
                field=field,
                name=flag_name(field),
                kind=kind,
                default=info.get_default(call_default_factory=True),
                choices=choices,
                help=info.description or "",
            )
        )
    return found


def flag_of(field: str) -> str:
    """The flag a user gives to set ``field``; a field without one is named as a setting."""
    return f"setting {field}" if field in NO_FLAG else flag_name(field)


def shown_default(value: Any) -> str:
    """A default as README's table and ``--help`` show it."""
    if isinstance(value, bool | dict):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _metavar(flag: Flag) -> str | None:
    if flag.field in METAVARS:
        return METAVARS[flag.field]
    if flag.field.endswith("api_key_env"):
        return "VAR"
    if flag.field.endswith("base_url"):
        return "URL"
    if flag.field.endswith("model"):
        return "MODEL"
    if flag.kind is dict:
        return "JSON"
    if flag.kind is int:
        return "N"
    if flag.kind is float:
        return "X"
    return "NAME" if flag.kind is str and flag.choices is None else None


def switched_by() -> dict[str, str]:
    """Each switchable score's threshold field → its switch (``core.scores``): giving the
    threshold's flag turns the score on, as nobody gives a threshold to have it ignored."""
    return {
        score.measured_key: score.switch
        for score in declared()
        if score.switch is not None and score.setting is not None
    }


def _help(flag: Flag, required: bool) -> str:
    text = flag.help
    if flag.field in switched_by():
        text += f" Giving it turns {flag_name(switched_by()[flag.field])} on."
    if flag.field.endswith("base_url"):
        text += f" Not given: ${BASE_URL_VARIABLE} when set (as the OpenAI SDK reads it)."
    if flag.kind is bool and flag.default:
        text = f"Turns off what is on by default: {text}"
    if flag.field in REPEATABLE:
        text += " Repeatable."
    if not required and flag.default is not None and flag.kind is not bool:
        text += f" (default: {shown_default(flag.default)})"
    return text.replace("%", "%%")


def add_settings_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    only: Iterable[str] | None = None,
    required: Collection[str] = (),
) -> None:
    """Add the settings flags (or ``only`` those) to ``parser``, each flag's destination its field's
    name; ``required`` ones have no default."""
    chosen = None if only is None else set(only)
    for flag in flags():
        if chosen is not None and flag.field not in chosen:
            continue
        needed = flag.field in required
        options: dict[str, Any] = {"dest": flag.field, "help": _help(flag, needed)}
        if flag.kind is bool:
            options["action"] = "store_false" if flag.default else "store_true"
            parser.add_argument(*flag.names, **options)
            continue
        options["type"] = json_object if flag.kind is dict else flag.kind
        options["metavar"] = _metavar(flag)
        if flag.field in WIDER:
            options["type"], more = WIDER[flag.field]
            options["help"] += more.replace("%", "%%")
        if flag.choices is not None:
            options["choices"] = flag.choices
        if needed:
            options["required"] = True
        if flag.field in REPEATABLE:
            options["action"] = "append"
        elif flag.field in PANEL:
            options["action"] = PanelFlag
            options["default"] = flag.default
        elif flag.field in switched_by():
            options["action"] = SwitchOn
            options["default"] = flag.default
        elif not needed:
            options["default"] = flag.default
        parser.add_argument(*flag.names, **options)


def json_object(text: str) -> dict[str, Any]:
    """An argument that must be a JSON object (``-a``, ``--model-kwargs``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def variant_arg(text: str) -> tuple[str, dict[str, Any]]:
    """``LABEL=JSON``: a variant's label and its request fields (a JSON object)."""
    label, equals, fields = text.partition("=")
    if not equals or not label:
        raise argparse.ArgumentTypeError(
            'takes LABEL=JSON, e.g. high=\'{"reasoning_effort": "high"}\''
        )
    try:
        return label, json_object(fields)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{label}: {exc}") from None


def add_variant_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--variant LABEL=JSON``: request fields of the models named ``NAME@LABEL`` (see
    ``variants``)."""
    parser.add_argument(
        "--variant",
        dest="variant",
        action="append",
        type=variant_arg,
        metavar="LABEL=JSON",
        help="request fields of the variant LABEL: -m NAME@LABEL is a row of its own, sent "
        "as NAME with these fields merged after --model-kwargs (e.g. -m o3-mini@high "
        '--variant high=\'{"reasoning_effort": "high"}\'). Repeatable. A name whose '
        "label no --variant defines is sent as it is.",
    )


def variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The ``--variant`` definitions by label; a label given twice, bad fields or a label no ``-m
    NAME@LABEL`` uses are one ``UsageError`` line (fields are never echoed: they may hold a pasted
    key)."""
    found: dict[str, dict[str, Any]] = {}
    for label, fields in getattr(args, "variant", None) or []:
        if label in found:
            raise UsageError(f"--variant {printable(label)} is given twice")
        problem = variant_problem(label, fields)
        if problem is not None:
            raise UsageError(f"--variant {printable(label)}: {printable(problem)}")
        found[label] = fields
    unused = unused_variants(getattr(args, "model", None) or [], found)
    if unused:
        raise UsageError(
            f"--variant {printable(unused[0])} is defined but no -m names NAME@"
            f"{printable(unused[0])}"
        )
    return found


def settings_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every single-valued flagged field's value (a calibration file's threshold as its number), the
    first judge's in the judge's fields, the others as the panel (``judges``)."""
    values = {
        flag.field: getattr(args, flag.field)
        for flag in flags()
        if flag.field not in REPEATABLE and flag.field not in PANEL
    }
    first, *panel = [_plain(judge) for judge in judges(args)]
    values |= first
    if panel:
        values["judge_panel"] = [
            {"model": j["judge_model"], "base_url": j["judge_base_url"]}
            | {"api_key_env": j["judge_api_key_env"]}
            | {"coherence_threshold": j["coherence_threshold"]}
            for j in panel
        ]
    return values


def _plain(judge: argparse.Namespace) -> dict[str, Any]:
    """A judge's fields (``PANEL``), a threshold from a calibration file as its number."""
    values = {field: getattr(judge, field) for field in PANEL}
    threshold = values["coherence_threshold"]
    if isinstance(threshold, calibration_file.CalibratedThreshold):
        values["coherence_threshold"] = float(threshold)
    return values


def judges(args: argparse.Namespace) -> list[argparse.Namespace]:
    """``args`` once per judge (the first judge's first), each with that judge's flags alone; a flag
    given neither once nor once per judge, or a panel without a threshold per judge, is one
    ``UsageError`` line."""
    models = listed(args, "judge_model")
    found = [argparse.Namespace(**vars(args)) for _ in models]
    for field in PANEL:
        given = listed(args, field)
        each = field == "coherence_threshold" and hasattr(args, field)  # calibrate finds it
        if len(given) == 1 and (len(models) == 1 or not each):
            given = given * len(models)
        if len(given) != len(models):
            times = len(getattr(args, PANEL_GIVEN, {}).get(field, []))
            raise UsageError(
                f"{flag_name(field)} is given {times} times for {len(models)} judges: "
                + (
                    "a panel needs each judge's own threshold (aidanbench calibrate "
                    "--judge-model M finds it), once per --judge-model"
                    if field == "coherence_threshold"
                    else "give it once for every judge, or once per --judge-model"
                )
            )
        for judge, value in zip(found, given, strict=True):
            setattr(judge, field, value)
    return found


class SwitchOn(argparse.Action):
    """A switchable score's threshold flag (``switched_by``): giving it turns its score on."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, switched_by()[self.dest], True)


class PanelFlag(argparse.Action):
    """A judge's flag: the first value is the field's, so one judge reads as any flag; all are kept
    in order for ``listed``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = vars(namespace).setdefault(PANEL_GIVEN, {}).setdefault(self.dest, [])
        if not given:
            setattr(namespace, self.dest, values)
        given.append(values)


PANEL_GIVEN = "panel_given"
"""Where ``PanelFlag`` keeps each judge's flag's values, by field."""


def listed(args: argparse.Namespace, field: str) -> list[Any]:
    """A judge's flag's values as given (once, or once per judge), else the field's value."""
    given = getattr(args, PANEL_GIVEN, {}).get(field)
    return list(given) if given else [getattr(args, field, Settings.model_fields[field].default)]


def threshold_sources(args: argparse.Namespace) -> list[dict[str, Any] | None]:
    """Each judge's threshold source (None: a number); another judge's file is a ``UsageError``."""
    try:
        return [
            calibration_file.threshold_source(judge.coherence_threshold, judge.judge_model)
            for judge in judges(args)
        ]
    except ValueError as exc:
        raise UsageError(printable(str(exc))) from None


def repeated(args: argparse.Namespace, field: str) -> list[Any]:
    """The values given to a repeatable flag, or the field's default alone."""
    values: list[Any] | None = getattr(args, field)
    return list(values) if values else [Settings.model_fields[field].get_default()]


def validation_line(exc: ValidationError, given_as: Mapping[str, str] | None = None) -> str:
    """``Settings``' first error as one line naming what was typed: its flag or ``given_as``."""
    from aidanbench.runner.spec import validation_line as line

    return line(exc, lambda field: (given_as or {}).get(field) or flag_of(field))


def add_question_flags(parser: argparse.ArgumentParser) -> None:
    """Add the question-set flags (one source at a time) and the dataset's options."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--questions", type=int, metavar="N", help="the first N bundled questions")
    which.add_argument("--questions-file", type=Path, metavar="PATH", help="your own questions")
    which.add_argument(
        "--questions-dataset",
        metavar="NAME_OR_PATH",
        help="a Hugging Face dataset: hub name, data file, folder of data files, or a "
        "save_to_disk folder (needs the [hf] extra)",
    )
    parser.add_argument(
        "--questions-split",
        metavar="SPLIT",
        help="split of --questions-dataset (default: its only split)",
    )
    parser.add_argument(
        "--questions-field",
        metavar="FIELD",
        help=f"column holding the questions ({DEFAULT_FIELD})",
    )


def question_set(args: argparse.Namespace) -> QuestionSet:
    """The question set the flags ask for, validated, with its source record and ``limit``; a bad
    set or flag is one ``UsageError`` line."""
    limit: int | None = args.questions
    inline: list[str] | None = getattr(args, "questions_list", None)
    path: Path | None = args.questions_file
    dataset: str | None = args.questions_dataset
    split: str | None = args.questions_split
    field: str | None = args.questions_field
    is_dataset = dataset is not None or (
        path is not None and path.suffix.lower() in DATASET_FILE_SUFFIXES
    )
    if not is_dataset and (split is not None or field is not None):
        flag = "--questions-split" if split is not None else "--questions-field"
        raise UsageError(f"{flag} applies only to --questions-dataset (or a parquet file)")
    if limit is not None and limit < 1:
        raise UsageError(f"--questions must be at least 1, got {limit}")
    available = len(bundled_questions())
    if path is None and dataset is None and inline is None and (limit or 0) > available:
        raise UsageError(
            f"--questions {limit}: there are {available} bundled questions; "
            f"give at most {available}, or --questions-file for your own"
        )
    try:
        if inline is not None:
            found = QuestionSet(validated(inline, "-a questions", limit), {"kind": "list"})
        elif is_dataset:
            from aidanbench.graph.hf_datasets import quiet_datasets

            quiet_datasets()
            found = load_question_set(
                dataset or path,
                split=split,
                question_field=field or DEFAULT_FIELD,
                limit=limit,
                dataset=True,
            )
        else:
            found = load_question_set(path)
    except QuestionSourceError as exc:
        raise UsageError(str(exc)) from None
    if limit is not None and limit > len(found.questions):
        raise UsageError(
            f"--questions {limit}: questions file {path} holds {len(found.questions)} questions"
        )
    chosen = found.limited(limit)
    return QuestionSet(chosen.questions, {**found.source, "limit": limit}, chosen.categories)
