"""Questions from Hugging Face datasets, through the real command and the graph API.

Datasets are built here (``Dataset.from_list``, ``to_parquet``, ``save_to_disk``, a folder
of ``data/test-*.parquet`` files) and read under ``HF_HUB_OFFLINE=1`` with a private
``HF_HOME``, so nothing is downloaded and no cache outside ``tmp_path`` is written. Runs
that go through ``datasets.load_dataset`` are subprocesses of the real ``aidanbench``
command; checks that need no cache run in process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aidanbench.cli.main import main
from aidanbench.record.metadata import question_set_hash
from aidanbench.testing import OpenAIStub, ScriptedBrain
from aidanbench.testing.settings import stub_flags

from .commands import run_cli

T = TypeVar("T")


def needs_hf(test: T) -> T:
    """Mark a test that builds or reads datasets: skipped only without the [hf] extra."""
    skip = pytest.mark.skipif(
        importlib.util.find_spec("datasets") is None,
        reason="needs the [hf] extra (datasets): pip install -e '.[hf]'",
    )
    marked: T = pytest.mark.hf(skip(test))
    return marked


@cache
def hf() -> Any:
    """The datasets library, its progress bars off: imported by the tests that build
    datasets, not when the tests are collected (it takes seconds)."""
    import datasets

    datasets.disable_progress_bars()
    return datasets


QUESTIONS = ["What is a use for a paperclip?", "Name a colour of the sea.", "Why do cats purr?"]
KEY_VAR = "AIDANBENCH_TEST_KEY"


@pytest.fixture
def mute_hub() -> Iterator[tuple[str, list[None]]]:
    """A hub endpoint that takes each connection and closes it unanswered, and the
    connections it took (one entry each): how many requests a lookup made, where a
    timed bound would depend on the machine's load."""
    taken: list[None] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            taken.append(None)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.fixture
def hf_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(ScriptedBrain(default_length=2)) as stub:
        yield stub


def endpoint_args(stub: OpenAIStub, run_dir: Path) -> list[str]:
    return ["run", "--model", "m1", *stub_flags(stub.base_url), "--run-dir", str(run_dir)]


def hf_env(tmp_path: Path, api_key: str, **extra: str) -> dict[str, str]:
    """The child's environment: offline hub, a private cache, the test key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {
        **env,
        KEY_VAR: api_key,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        **extra,
    }


def refused(args: list[str], env: dict[str, str]) -> str:
    """The command in a child process: exit 2 with one line on stderr; that line."""
    done = run_cli(args, env)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    return err


def rows(questions: list[Any], field: str = "question") -> list[dict[str, Any]]:
    return [{"id": i, field: q} for i, q in enumerate(questions)]


def saved(tmp_path: Path, records: list[dict[str, Any]], name: str = "saved") -> Path:
    path = tmp_path / name
    hf().Dataset.from_list(records).save_to_disk(str(path))
    return path


def build_source(kind: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    """A dataset of ``QUESTIONS`` in the form ``kind``; returns the flags that choose it."""
    data = hf().Dataset.from_list(rows(QUESTIONS))
    if kind == "save_to_disk":
        data.save_to_disk(str(tmp_path / "saved"))
        return ["--questions-dataset", str(tmp_path / "saved")], []
    if kind in ("parquet", "parquet_file"):
        data.to_parquet(str(tmp_path / "q.parquet"))
        flag = "--questions-dataset" if kind == "parquet" else "--questions-file"
        return [flag, str(tmp_path / "q.parquet")], ["train"]
    if kind == "folder":
        (tmp_path / "folder" / "data").mkdir(parents=True)
        data.to_parquet(str(tmp_path / "folder" / "data" / "test-00000-of-00001.parquet"))
        return ["--questions-dataset", str(tmp_path / "folder")], ["test"]
    if kind == "jsonl":
        path = tmp_path / "q.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(QUESTIONS)))
        return ["--questions-dataset", str(path)], ["train"]
    raise AssertionError(kind)


@needs_hf
@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["save_to_disk", "parquet", "parquet_file", "folder", "jsonl"])
def test_dataset_questions_run_through_the_command(
    kind: str, hf_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    flags, split = build_source(kind, tmp_path)
    run_dir = tmp_path / "run"
    done = run_cli([*endpoint_args(hf_stub, run_dir), *flags], hf_env(tmp_path, api_key))
    assert done.returncode == 0, done.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results["models"]["m1"]["0.7"]) == QUESTIONS, "the dataset's order"
    asked = {
        r.prompt.split("<question>")[1].split("</question>")[0] for r in hf_stub.of_kind("generate")
    }
    assert asked == set(QUESTIONS)
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["questions_sha256"] == question_set_hash(QUESTIONS)
    source = meta["questions_source"]
    assert source["kind"] == "dataset" and source["field"] == "question"
    assert source["split"] == (split[0] if split else None)
    assert source["rows"] == 3 and isinstance(source["fingerprint"], str)
    assert source["name"] == str(Path(flags[1]).resolve())


@needs_hf
def test_dataset_dict_needs_a_split_and_uses_the_chosen_one(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    splits = hf().DatasetDict(
        {
            "train": hf().Dataset.from_list(rows(["train question?"])),
            "test": hf().Dataset.from_list(rows(QUESTIONS[:2])),
        }
    )
    splits.save_to_disk(str(tmp_path / "dict"))
    args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", str(tmp_path / "dict")]
    err = one_line_error(capsys, main(args))
    assert "has splits train, test; choose one with --questions-split" in err
    assert not (tmp_path / "r").exists()
    assert main([*args, "--questions-split", "nope"]) == 2
    assert "no split 'nope' (splits: train, test)" in capsys.readouterr().err
    assert main([*args, "--questions-split", "test"]) == 0
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["questions_source"]["split"] == "test" and meta["questions"] == 2


@needs_hf
def test_questions_field_chooses_the_column(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    path = saved(tmp_path, rows(QUESTIONS[:2], field="prompt"))
    args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", str(path)]
    assert main([*args, "--questions-field", "prompt", "-n", "1"]) == 0
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["questions_source"]["field"] == "prompt"
    assert meta["questions_sha256"] == question_set_hash(QUESTIONS[:1])
    calls = len(hf_stub.requests)
    asked_before = hf_stub.asked()
    assert main([*args, "--questions-field", "prompt", "-n", "1"]) == 0, "the same command resumes"
    assert hf_stub.asked() == asked_before, "finished questions are skipped"
    assert main([*args, "--questions-field", "prompt"]) == 0, "a larger set grows the run"
    asked = {r.prompt for r in hf_stub.requests[calls:] if r.kind == "generate"}
    assert asked and all(f"<question>{QUESTIONS[1]}</question>" in p for p in asked)
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["questions"] == 2


def one_line_error(capsys: pytest.CaptureFixture[str], status: int) -> str:
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    return err


@needs_hf
@pytest.mark.parametrize(
    ("records", "message"),
    [
        (rows(QUESTIONS, field="prompt"), "has no field 'question' (fields: id, prompt)"),
        ([], "holds no questions"),
        (rows([7, 8]), "question 1 is int 7, not a string"),
        (rows([["q1"], ["q2"]]), "question 1 is list ['q1'], not a string"),
        (rows(["q1", None]), "question 2 is NoneType None, not a string"),
        (rows(["q1", ""]), "question 2 is empty"),
        (rows(["q1", "  \n"]), "question 2 is empty"),
        (rows(["q1", "q1"]), "question 2 repeats question 1"),
    ],
)
def test_bad_dataset_is_one_line(
    records: list[dict[str, Any]],
    message: str,
    hf_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if records:
        path = saved(tmp_path, records)
    else:
        path = tmp_path / "saved"
        hf().Dataset.from_dict({"question": []}).save_to_disk(str(path))
    args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", str(path)]
    err = one_line_error(capsys, main(args))
    assert message in err
    assert not (tmp_path / "r").exists(), "nothing written before the check"
    assert hf_stub.count() == 0


@needs_hf
def test_missing_dataset_path_and_split_without_dataset(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = endpoint_args(hf_stub, tmp_path / "r")
    err = one_line_error(
        capsys, main([*base, "--questions-dataset", str(tmp_path / "none.parquet")])
    )
    assert "dataset file or folder not found" in err
    err = one_line_error(capsys, main([*base, "--questions", "2", "--questions-split", "test"]))
    assert "--questions-split applies only to --questions-dataset" in err
    assert not (tmp_path / "r").exists()


def test_missing_extra_is_one_line(
    hf_stub: OpenAIStub,
    api_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "saved"
    path.mkdir()
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets → ImportError
    args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", str(path)]
    err = one_line_error(capsys, main(args))
    assert "needs the [hf] extra: pip install -e '.[hf]'" in err
    assert not (tmp_path / "r").exists()


@needs_hf
@pytest.mark.e2e
def test_error_after_datasets_has_read_a_file_is_still_one_line(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    """``datasets`` reports progress on stderr while it converts a file; the command mutes it."""
    hf().Dataset.from_list(rows(QUESTIONS, field="prompt")).to_parquet(str(tmp_path / "q.parquet"))
    args = [
        *endpoint_args(hf_stub, tmp_path / "r"),
        "--questions-file",
        str(tmp_path / "q.parquet"),
    ]
    err = refused(args, hf_env(tmp_path, api_key))
    assert "has no field 'question' (fields: id, prompt)" in err
    assert not (tmp_path / "r").exists()


@needs_hf
@pytest.mark.e2e
def test_offline_name_not_cached_fails_at_once(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path, mute_hub: tuple[str, list[None]]
) -> None:
    """Offline, a name not in the cache is refused without one request to the hub."""
    hub, taken = mute_hub
    args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", "someone/no-such-set"]
    err = refused(args, hf_env(tmp_path, api_key, HF_ENDPOINT=hub))
    assert "dataset someone/no-such-set is not in the Hugging Face cache" in err
    assert "HF_HUB_OFFLINE" in err
    assert taken == []
    assert not (tmp_path / "r").exists()


@needs_hf
@pytest.mark.e2e
def test_closed_network_fails_at_the_first_request_saying_why(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path, mute_hub: tuple[str, list[None]]
) -> None:
    """A hub that refuses connections, or takes them and never answers: the one probe
    says so, where huggingface_hub alone retries for about 25 s."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for hub in (dead, mute_hub[0]):
        env = hf_env(tmp_path, api_key, HF_ENDPOINT=hub)
        del env["HF_HUB_OFFLINE"]
        args = [*endpoint_args(hf_stub, tmp_path / "r"), "--questions-dataset", "someone/some-set"]
        err = refused(args, env)
        assert f"cannot reach the Hugging Face Hub ({hub.removeprefix('http://')})" in err
        assert "HF_HUB_OFFLINE=1" in err
        assert not (tmp_path / "r").exists()
    assert len(mute_hub[1]) == 1, "one probe, no retries"


@needs_hf
def test_graph_api_loads_every_source(tmp_path: Path) -> None:
    from aidanbench.graph import QuestionSourceError, load_questions

    assert load_questions(QUESTIONS) == QUESTIONS
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS))
    assert load_questions(tmp_path / "q.json", limit=2) == QUESTIONS[:2]
    assert load_questions(str(saved(tmp_path, rows(QUESTIONS)))) == QUESTIONS
    with pytest.raises(QuestionSourceError, match="question 2 is int"):
        load_questions(["q1", 2])  # type: ignore[list-item]
    with pytest.raises(QuestionSourceError, match="has no field 'text'"):
        load_questions(str(tmp_path / "saved"), question_field="text")


@needs_hf
async def test_benchmark_graph_runs_a_dataset(
    hf_stub: OpenAIStub, api_key: str, tmp_path: Path
) -> None:
    from aidanbench.graph import Settings, build_benchmark_graph, load_questions

    questions = load_questions(str(saved(tmp_path, rows(QUESTIONS))), limit=2)
    url = hf_stub.base_url
    settings = Settings(
        model="m1",
        base_url=url,
        judge_base_url=url,
        embedding_base_url=url,
        api_key_env=KEY_VAR,
        judge_api_key_env=KEY_VAR,
        embedding_api_key_env=KEY_VAR,
    )
    out = (
        await build_benchmark_graph().compile().ainvoke({"questions": questions}, context=settings)
    )
    assert sorted(r["question"] for r in out["results"]) == sorted(QUESTIONS[:2])
    assert out["summary"]["score"] == 4


def test_silent_hub_is_given_up_after_the_probe_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub that accepts the connection and never answers (as a filtering network might)."""
    import httpx

    from aidanbench.graph import hf_datasets

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("HF_ENDPOINT", f"http://{host}")
        monkeypatch.setattr(hf_datasets, "HUB_PROBE_TIMEOUT", httpx.Timeout(0.5))
        with pytest.raises(hf_datasets.QuestionSourceError) as caught:
            hf_datasets._probe_hub("someone/some-set")
    message = str(caught.value)
    assert f"the Hugging Face Hub ({host}) did not answer (time-out: 0.5 s to connect" in message
    assert "HF_HUB_OFFLINE=1" in message and "\n" not in message


def test_probe_names_the_revision_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's answer names the dataset's commit; that is the revision loaded and recorded."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from aidanbench.graph import hf_datasets

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            known = self.path == "/api/datasets/someone/some-set"
            body = json.dumps({"id": "someone/some-set", "sha": "0123abcd"} if known else {})
            self.send_response(200 if known else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hf_datasets._probe_hub("someone/some-set") == "0123abcd"
        assert hf_datasets._probe_hub("someone/other") is None, "404: datasets says why"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_benchmark_graph_checks_its_input_like_any_source() -> None:
    from aidanbench.graph import QuestionSourceError, build_benchmark_graph

    graph = build_benchmark_graph().compile()
    with pytest.raises(QuestionSourceError, match="question 2 is empty"):
        await graph.ainvoke({"questions": ["q1", " "]})
    with pytest.raises(QuestionSourceError, match="question 2 repeats question 1"):
        await graph.ainvoke({"questions": ["q1", "q1"]})
    with pytest.raises(QuestionSourceError, match="must be at least 1, got 0"):
        await graph.ainvoke({"questions": ["q1"], "question_limit": 0})
