"""Bad input to the real ``aidanbench`` command: one line on stderr, exit 2, nothing written.

Every case runs the installed console script as a subprocess against the local stub
server and checks the exit status, that stderr is one line, that no secret is echoed,
that the run directory was not created (or not changed), and that no request was sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidanbench.graph.questions import bundled_questions
from aidanbench.testing import OpenAIStub, ScriptedBrain

from .conftest import REPO, TEST_KEY

pytestmark = pytest.mark.e2e

QUESTIONS = bundled_questions(2)
AIDANBENCH = str(Path(sys.executable).with_name("aidanbench"))
SECRET = "sk-proj-Zq81SECRETpasted0000abcdef"


@pytest.fixture
def bench_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS})) as stub:
        yield stub


def run_args(stub: OpenAIStub, run_dir: Path | str, *extra: str) -> list[str]:
    url = stub.base_url
    return [
        "run",
        "--model",
        "m1",
        "--questions",
        str(len(QUESTIONS)),
        *("--base-url", url, "--judge-base-url", url, "--embedding-base-url", url),
        *("--api-key-env", "AIDANBENCH_TEST_KEY"),
        *("--judge-api-key-env", "AIDANBENCH_TEST_KEY"),
        *("--embedding-api-key-env", "AIDANBENCH_TEST_KEY"),
        *("--run-dir", str(run_dir)),
        *extra,
    ]


def replace(args: list[str], flag: str, *values: str) -> list[str]:
    """``args`` with ``flag``'s value replaced (or the flag added)."""
    if flag in args:
        i = args.index(flag)
        return [*args[:i], flag, *values, *args[i + 2 :]]
    return [*args, flag, *values]


def aidanbench(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "AIDANBENCH_TEST_KEY": TEST_KEY, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [AIDANBENCH, *args],
        env=full_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(proc: subprocess.CompletedProcess[str], status: int = 2) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == status, proc.stderr
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes (to show nothing changed)."""
    if not path.exists():
        return {}
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("flag", "values", "message"),
    [
        ("--model", ["m1", "--model", "m1"], "--model 'm1' is given twice"),
        ("--model", [""], "empty name"),
        ("--temperature", ["0.7", "--temperature", "0.70"], "--temperature 0.7 is given twice"),
        ("--requests-per-minute", ["inf"], "--requests-per-minute must be a finite number"),
        ("--request-timeout", ["inf"], "--request-timeout must be a finite number"),
        ("--request-timeout", ["nan"], "--request-timeout must be a finite number"),
        ("--questions", ["100"], "there are 63 bundled questions"),
        ("--base-url", ["http://127.0.0.1:99999/v1"], "--base-url has a bad port '99999'"),
        ("--judge-base-url", ["http://127.0.0.1:abc/v1"], "--judge-base-url has a bad port"),
        ("--base-url", ["not a url"], "--base-url must look like https://host/v1"),
    ],
)
def test_bad_value_is_one_line(
    bench_stub: OpenAIStub, tmp_path: Path, flag: str, values: list[str], message: str
) -> None:
    run_dir = tmp_path / "r"
    args = replace(run_args(bench_stub, run_dir), flag, *values)
    err = one_line(aidanbench(args))
    assert message in err
    assert err.count("not a url") <= 1, "the value is named once"
    assert not run_dir.exists()
    assert bench_stub.count() == 0


@pytest.mark.parametrize(
    ("flag", "value", "part"),
    [
        ("--base-url", f"http://user:{SECRET}@127.0.0.1:1/v1", "user:key@host"),
        ("--base-url", f"http://127.0.0.1:1/v1?api_key={SECRET}", "query parameter 'api_key'"),
        ("--judge-base-url", f"http://127.0.0.1:1/v1?key={SECRET}", "query parameter 'key'"),
        ("--embedding-base-url", f"http://127.0.0.1:1/{SECRET}/v1", "path segment"),
        ("--base-url", f"http://127.0.0.1:1/v1#{SECRET}", "fragment"),
        ("--base-url", SECRET, "must look like https://host/v1"),
        ("--api-key-env", SECRET, "takes the name of an environment variable"),
        ("--api-key-env", "sk-abc123", "takes the name of an environment variable"),
        ("--judge-api-key-env", "MY KEY", "takes the name of an environment variable"),
        ("--model-kwargs", json.dumps({"api_key": SECRET}), "'api_key'"),
        (
            "--model-kwargs",
            json.dumps({"extra_headers": {"Authorization": f"Bearer {SECRET}"}}),
            "'extra_headers.Authorization'",
        ),
        ("--model-kwargs", json.dumps({"extra_body": {"user": SECRET}}), "extra_body.user"),
    ],
)
def test_secrets_in_arguments_are_refused_and_not_echoed(
    bench_stub: OpenAIStub, tmp_path: Path, flag: str, value: str, part: str
) -> None:
    run_dir = tmp_path / "r"
    proc = aidanbench(replace(run_args(bench_stub, run_dir), flag, value))
    err = one_line(proc)
    assert part in err
    assert SECRET not in err and "sk-abc123" not in err and "Zq81" not in proc.stdout + err
    assert not run_dir.exists()


def test_model_kwargs_without_secrets_still_pass_the_check(tmp_path: Path) -> None:
    from aidanbench.cli.inputs import check_model_kwargs

    check_model_kwargs({"max_tokens": 100, "reasoning_effort": "low", "top_p": 0.9})


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        *[(n, True) for n in ("key", "api_key", "X-Api-Key", "Authorization", "access_token")],
        *[(n, False) for n in ("max_tokens", "author", "design", "api-version", "top_p")],
    ],
)
def test_credential_names(name: str, secret: bool) -> None:
    from aidanbench.core.credentials import is_secret_name

    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    "url",
    [
        "https://openrouter.ai/api/v1",
        "https://x.openai.azure.com/openai/deployments/gpt-4o-mini-2024-07-18?api-version=2024-02-01",
        "http://127.0.0.1:8000/v1",
    ],
)
def test_ordinary_base_urls_pass(url: str) -> None:
    from aidanbench.cli.inputs import check_base_url

    check_base_url("--base-url", url)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: (tmp / "file").write_text("x") and tmp / "file", "not a directory"),
        (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "sub", "which is a file"),
        (lambda tmp: Path("/dev/null"), "kernel interface"),
        (lambda tmp: Path("/proc/self/aidanbench-run"), "kernel interface"),
    ],
    ids=["file", "below-a-file", "dev-null", "proc"],
)
def test_bad_run_dir(bench_stub: OpenAIStub, tmp_path: Path, make: object, message: str) -> None:
    run_dir = make(tmp_path)  # type: ignore[operator]
    before = snapshot(tmp_path)
    err = one_line(aidanbench(run_args(bench_stub, run_dir)))
    assert message in err
    assert snapshot(tmp_path) == before
    assert bench_stub.count() == 0


def test_empty_run_dir_is_refused(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    proc = subprocess.run(
        [AIDANBENCH, *run_args(bench_stub, "")],
        env={**os.environ, "AIDANBENCH_TEST_KEY": TEST_KEY},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = one_line(proc)
    assert "--run-dir" in err and "empty" in err
    assert list(tmp_path.iterdir()) == [], "nothing written into the current directory"


def test_read_only_run_dir(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    """A read-only bind mount (in a private mount namespace): refused before any write."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "note").write_text("keep")
    script = (
        f'mount --bind {run_dir} {run_dir} && mount -o remount,bind,ro {run_dir} && exec "$0" "$@"'
    )
    command = ["unshare", "-rm", "sh", "-c", script, AIDANBENCH, *run_args(bench_stub, run_dir)]
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("needs user namespaces (unshare -rm) to make a read-only mount")
    proc = subprocess.run(
        command,
        env={**os.environ, "AIDANBENCH_TEST_KEY": TEST_KEY},
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = one_line(proc)
    assert "is not writable" in err
    assert snapshot(run_dir) == {"note": b"keep"}
    assert bench_stub.count() == 0


def test_local_embeddings_without_the_extra(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    """The [local] extra is hidden from the child: refused before any call or write."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\nsys.modules['sentence_transformers'] = None\n"
    )
    run_dir = tmp_path / "r"
    args = replace(run_args(bench_stub, run_dir), "--embedding-model", "local")
    err = one_line(aidanbench(args, env={"PYTHONPATH": str(shim)}))
    hint = "pip install -e '.[local]'"
    assert "[local] extra" in err and hint in err
    assert hint in (REPO / "README.md").read_text("utf-8"), "the hint is README's command"
    assert not run_dir.exists()
    assert bench_stub.count() == 0


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (b'{"question": "q1"}\n{"question": "q2",}\n', ".jsonl", ":2: invalid JSON"),
        (b'["fine", "bad \\ud800 here"]', ".json", "question 2 holds an invalid character"),
    ],
)
def test_bad_questions_file(
    bench_stub: OpenAIStub, tmp_path: Path, content: bytes, suffix: str, message: str
) -> None:
    path = tmp_path / f"questions{suffix}"
    path.write_bytes(content)
    run_dir = tmp_path / "r"
    args = run_args(bench_stub, run_dir)
    i = args.index("--questions")
    args = [*args[:i], "--questions-file", str(path), *args[i + 2 :]]
    err = one_line(aidanbench(args))
    assert message in err
    assert not run_dir.exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_questions_file_that_never_ends(bench_stub: OpenAIStub, tmp_path: Path, kind: str) -> None:
    """A FIFO blocks and /dev/zero never ends: refused by file type, before any read."""
    path = tmp_path / "questions.txt" if kind == "fifo" else Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(path)
    run_dir = tmp_path / "r"
    args = run_args(bench_stub, run_dir)
    i = args.index("--questions")
    args = [*args[:i], "--questions-file", str(path), *args[i + 2 :]]
    err = one_line(aidanbench(args, timeout=30))
    assert ("is a pipe (FIFO)" if kind == "fifo" else "is a device") in err
    assert not run_dir.exists()
