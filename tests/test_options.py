"""Settings flags: one per ``Settings`` field (or a stated reason), and what is sent is recorded.

The flags are made from the fields (``aidanbench.cli.options``); these tests hold the
command line, the settings table of docs/settings.md and the requests on the wire to the
fields. Bad values go through the installed ``aidanbench`` command against the local stub
server: one line, exit status 2, nothing written, nothing sent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aidanbench.cli import env_args, options
from aidanbench.cli.main import build_parser
from aidanbench.cli.run import run_spec
from aidanbench.core.settings import REQUEST_FIELDS, Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import OpenAIStub, ScriptedBrain

from .conftest import REPO, TEST_KEY

AIDANBENCH = str(Path(sys.executable).with_name("aidanbench"))
QUESTIONS = bundled_questions(2)
KEY_VAR = "AIDANBENCH_TEST_KEY"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def run_parser() -> argparse.ArgumentParser:
    return subcommands()["run"]


def option(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    return next((a for a in parser._actions if name in a.option_strings), None)


def parsed(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(["run", "--model", "m", *argv])
    env_args.apply(args)
    return args


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings ``run`` builds for the first (model, temperature) of ``args``."""
    spec = run_spec(args)
    return Settings(model=spec.models[0], temperature=spec.temperatures[0], **spec.settings)


def test_every_setting_has_a_flag_or_a_stated_reason() -> None:
    parser = run_parser()
    flagged = {flag.field: flag for flag in options.flags()}
    for field in Settings.model_fields:
        if field in options.NO_FLAG:
            assert options.NO_FLAG[field].strip(), f"{field}: no reason given"
            assert field not in flagged
            assert not any(a.dest == field for a in parser._actions), field
            continue
        assert field in flagged, f"Settings.{field} has no flag and no stated reason"
        action = option(parser, flagged[field].name)
        assert action is not None and action.dest == field, field
    assert set(options.NO_FLAG) <= set(Settings.model_fields), "a reason for no field"
    assert set(options.RENAMED) | set(options.SHORT) <= set(flagged)


def test_flag_defaults_are_the_settings_defaults() -> None:
    """Not giving a flag leaves its field at the ``Settings`` default, every one of them."""
    assert settings_of(parsed()) == Settings(model="m")
    assert set(options.settings_values(parsed())) == {
        f.field for f in options.flags() if f.field not in options.REPEATABLE
    }
    assert run_spec(parsed()).settings == {}, "a default is read as not given"


def test_flags_shared_by_other_commands_keep_the_settings_defaults() -> None:
    """``calibrate`` (and any command) taking a settings flag takes it with its default."""
    by_name = {flag.name: flag for flag in options.flags()}
    commands = set()
    for name, parser in subcommands().items():
        for action in parser._actions:
            flag = next((by_name[o] for o in action.option_strings if o in by_name), None)
            if flag is None or action.required or flag.field in options.REPEATABLE:
                continue
            if name == "rescore" and flag.field != "reward_mode":
                continue  # rescore's thresholds are the targets of a rescore, not settings
            if name in ("report", "plot", "rescore") and flag.field == "reward_mode":
                assert action.default is None  # absent: the mode each input recorded
                continue
            default = action.default
            if isinstance(default, env_args.NotGiven):
                default = default.value
            assert (action.dest, default) == (flag.field, flag.default), (name, flag.name)
            commands.add(name)
    assert commands == {"run", "calibrate", "estimate"}


def non_default(flag: options.Flag) -> tuple[list[str], Any]:
    """Arguments giving ``flag`` a value other than its default, and that value."""
    if flag.kind is bool:
        return [flag.name], not flag.default
    if flag.choices is not None:
        value = next(c for c in flag.choices if c != flag.default)
        return [flag.name, str(value)], value
    if flag.kind is dict:
        return [flag.name, '{"max_tokens": 5}'], {"max_tokens": 5}
    if flag.field.endswith("base_url"):
        return [flag.name, "http://127.0.0.1:9/v1"], "http://127.0.0.1:9/v1"
    if flag.field.endswith("api_key_env"):
        return [flag.name, "OTHER_KEY"], "OTHER_KEY"
    if flag.kind is str:
        return [flag.name, "some-model"], "some-model"
    value = 2 if flag.kind is int else 0.25
    if value == flag.default:
        value += 1
    return [flag.name, str(value)], value


@pytest.mark.parametrize("flag", options.flags(), ids=lambda f: f.name)
def test_each_flag_sets_its_field(flag: options.Flag) -> None:
    argv, value = non_default(flag)
    if flag.field == "model":
        args = build_parser().parse_args(["run", *argv])
        env_args.apply(args)
    else:
        args = parsed(*argv)
    assert getattr(settings_of(args), flag.field) == value


def test_help_is_the_field_description() -> None:
    parser = run_parser()
    for flag in options.flags():
        action = option(parser, flag.name)
        assert action is not None and action.help is not None
        description = Settings.model_fields[flag.field].description
        assert description and description.replace("%", "%%") in action.help, flag.name
        assert [o for o in action.option_strings] == flag.names
    assert option(parser, "--judge-temperature") and option(parser, "--judge-attempts")


def documented_settings_rows() -> dict[str, tuple[str, str]]:
    text = (REPO / "docs" / "settings.md").read_text("utf-8")
    section = text.split("\n## Every setting\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        setting = cells[0].strip("`")
        assert setting not in rows, f"{setting} twice in the settings table"
        rows[setting] = (cells[1], cells[2])
    return rows


def test_the_settings_table_lists_exactly_the_flags() -> None:
    rows = documented_settings_rows()
    assert list(rows) == list(Settings.model_fields)
    flagged = {flag.field: flag for flag in options.flags()}
    for field, (flag_cell, default_cell) in rows.items():
        default = Settings.model_fields[field].get_default(call_default_factory=True)
        if default is None:
            assert default_cell.startswith("None"), field
        else:
            assert default_cell.startswith(f"`{options.shown_default(default)}`"), field
        named = re.findall(r"`(-[^`]*)`", re.sub(r"\(.*?\)", "", flag_cell))
        if field in options.NO_FLAG:
            assert flag_cell.startswith("none") and not named, field
        else:
            assert named == flagged[field].names, field


# --- through the real command -------------------------------------------------------


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS})) as server:
        yield server


def command(server: OpenAIStub, run_dir: Path, *extra: str) -> list[str]:
    url = server.base_url
    return [
        "run",
        *("--model", "m1", "--questions", str(len(QUESTIONS))),
        *("--base-url", url, "--judge-base-url", url, "--embedding-base-url", url),
        *("--api-key-env", KEY_VAR, "--judge-api-key-env", KEY_VAR),
        *("--embedding-api-key-env", KEY_VAR, "--run-dir", str(run_dir)),
        *extra,
    ]


def aidanbench(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIDANBENCH, *args],
        env={**os.environ, KEY_VAR: TEST_KEY, "COLUMNS": "200"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--endpoint-concurrency", "0", "invalid --endpoint-concurrency: "),
        ("--judge-attempts", "0", "invalid --judge-attempts: "),
        ("--max-retries", "21", "invalid --max-retries: "),
        ("--judge-temperature", "inf", "--judge-temperature must be a finite number"),
        ("-a", '{"thresholds": {"coherence_score": 200}}', "invalid -a thresholds.coherence_score"),
    ],
)
@pytest.mark.e2e
def test_bad_setting_names_the_flag_typed(
    stub: OpenAIStub, tmp_path: Path, flag: str, value: str, message: str
) -> None:
    run_dir = tmp_path / "r"
    err = refused(aidanbench(command(stub, run_dir, flag, value)))
    assert message in err
    assert not run_dir.exists()
    assert stub.count() == 0


@pytest.mark.e2e
def test_bad_setting_is_named_before_the_run_directory_is_compared(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """A value out of range is named even when the directory holds another run."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "metadata.json").write_text(json.dumps({"spec": {"models": ["other"]}}))
    before = (run_dir / "metadata.json").read_bytes()
    err = refused(aidanbench(command(stub, run_dir, "--endpoint-concurrency", "0")))
    assert "invalid --endpoint-concurrency" in err
    assert (run_dir / "metadata.json").read_bytes() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["metadata.json"]


@pytest.mark.parametrize(
    ("kwargs", "key", "instead"),
    [
        ({"temperature": 0.1}, "'temperature'", "--temperature"),
        ({"model": "other"}, "'model'", "--model"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "'messages'", None),
        ({"n": 3, "max_tokens": 10}, "'n'", None),
        ({"stream": True}, "'stream'", None),
    ],
)
@pytest.mark.e2e
def test_model_kwargs_cannot_set_the_request_fields(
    stub: OpenAIStub, tmp_path: Path, kwargs: dict[str, Any], key: str, instead: str | None
) -> None:
    run_dir = tmp_path / "r"
    err = refused(aidanbench(command(stub, run_dir, "--model-kwargs", json.dumps(kwargs))))
    assert f"--model-kwargs must not set {key}" in err
    if instead is not None:
        assert f"use {instead}" in err
    assert not run_dir.exists()
    assert stub.count() == 0


@pytest.mark.parametrize("key", sorted(REQUEST_FIELDS))
def test_settings_refuse_model_kwargs_that_set_the_request_fields(key: str) -> None:
    """The Python API and Studio get the same refusal as the command line."""
    with pytest.raises(ValidationError, match=f"model_kwargs must not set '{key}'"):
        Settings(model_kwargs={key: 1, "max_tokens": 10})
    assert Settings(model_kwargs={"max_tokens": 10, "top_p": 0.9}).model_kwargs["top_p"] == 0.9


@pytest.mark.e2e
def test_what_is_sent_is_what_is_recorded(stub: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    proc = aidanbench(
        command(
            stub,
            run_dir,
            *("-T", "0.3", "--model-kwargs", '{"max_tokens": 64}'),
            *("--judge-temperature", "0.2", "--judge-attempts", "2"),
        )
    )
    assert proc.returncode == 0, proc.stderr
    generated = stub.of_kind("generate")
    judged = stub.of_kind("coherence")
    assert generated and judged
    assert {(r.body["model"], r.body["temperature"], r.body["max_tokens"]) for r in generated} == {
        ("m1", 0.3, 64)
    }
    assert {r.body.get("temperature") for r in judged} == {0.2}
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results["models"]) == ["m1"] and list(results["models"]["m1"]) == ["0.3"]
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["settings"]["temperatures_sent"] == [0.3]
    assert meta["spec"]["settings"]["model_kwargs"] == {"max_tokens": 64}
    assert meta["spec"]["settings"]["judge_temperature"] == 0.2
    assert meta["spec"]["settings"]["judge_attempts"] == 2


def test_run_help_names_where_a_role_without_a_url_goes_and_each_key_variable() -> None:
    """``run --help``: each base-URL flag says a role given none goes to
    ``OPENAI_BASE_URL`` when it is set (the OpenAI SDK's variable, which the run resolves),
    and each key flag names the variable it reads by default."""
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    text = " ".join(run.format_help().split())
    for role in ("", "judge-", "embedding-"):
        url = text.rsplit(f"--{role}base-url URL ", 1)[1][:160]
        assert "Not given: $OPENAI_BASE_URL when set" in url, url
        key = text.rsplit(f"--{role}api-key-env VAR ", 1)[1][:120]
        assert "(default: OPENAI_API_KEY)" in key, key
