"""A first real run on today's providers: models checked before anything is written.

The local server answers as OpenAI does today (``OpenAIStub(catalogue=...)``): ``GET
/v1/models`` lists what it serves with each ``shutdown_date``, a request for anything
else gets the 404 ``model_not_found`` body, a wrong key the 401 body.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aidanbench.cli.main import main
from aidanbench.graph.questions import bundled_questions
from aidanbench.runner import preflight
from aidanbench.services import lifecycle
from aidanbench.testing import OpenAIStub, ScriptedBrain, http_error, when
from aidanbench.testing.settings import TEST_KEY_VARIABLE, stub_flags

from .conftest import REPO, TEST_KEY

QUESTIONS = bundled_questions(2)
TODAY = datetime.date.today()
SOON = (TODAY + datetime.timedelta(days=10)).isoformat()
PAST = (TODAY - datetime.timedelta(days=30)).isoformat()

CATALOGUE = {
    "gpt-4o-mini": None,
    "gpt-4o": None,
    "judge-model": None,
    "embedding-model": None,
    "leaving-soon": SOON,
    "listed-but-gone": PAST,
}
"""What the server serves; ``o1-mini`` is not in it, as at OpenAI today."""


WRONG_KEY = "sk-wrong-0000-0000-0000"


@pytest.fixture
def openai_like(api_key: str) -> Iterator[OpenAIStub]:
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    with OpenAIStub(brain, catalogue=CATALOGUE, api_key=TEST_KEY) as stub:
        yield stub


def run_args(stub: OpenAIStub, run_dir: Path, model: str, *extra: str) -> list[str]:
    return [
        "run",
        *("--model", model, "--questions", str(len(QUESTIONS)), "--run-dir", str(run_dir)),
        *stub_flags(stub.base_url),
        *("--judge-model", "judge-model", "--embedding-model", "embedding-model"),
        *extra,
    ]


def is_check(request: Any) -> bool:
    """One of the preflight's minimal requests: a chat of kind ``other`` or an embedding
    of its one short text."""
    return request.method == "POST" and (request.kind == "other" or request.texts == ("ok",))


def scored(stub: OpenAIStub) -> int:
    """Requests a question made."""
    return sum(r.method == "POST" and not is_check(r) for r in stub.requests)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.e2e
def test_a_typo_is_refused_before_any_question_with_one_line_and_nothing_written(
    openai_like: OpenAIStub, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aidanbench.cli.main",
            *run_args(openai_like, run_dir, "gpt-4o-minii"),
        ],
        cwd=REPO,
        env={**os.environ, TEST_KEY_VARIABLE: TEST_KEY},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "gpt-4o-minii is unknown at 127.0.0.1" in err and "model_not_found" in err
    assert "close names it lists: gpt-4o-mini" in err and "--model" in err
    assert not run_dir.exists(), "nothing written, not even the directory"
    assert scored(openai_like) == 0, "no question asked"


def test_a_retired_judge_is_refused_before_any_question(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``o1-mini``, the benchmark's judge: the server neither lists nor serves it."""
    args = run_args(openai_like, tmp_path / "run", "gpt-4o-mini")
    args[args.index("--judge-model") + 1] = "o1-mini"
    assert main(args) == 2
    err = one_line(capsys)
    assert "judge o1-mini is unknown" in err and "OpenAI shut o1-mini down on 2026-10-23" in err
    assert "published scores used it" in err
    assert "--judge-model" in err and "aidanbench calibrate --judge-model M" in err
    assert scored(openai_like) == 0 and not (tmp_path / "run").exists()


def test_a_model_listed_as_shut_down_is_refused_with_its_date(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(openai_like, tmp_path / "run", "listed-but-gone")) == 2
    err = one_line(capsys)
    assert f"listed-but-gone at 127.0.0.1:{openai_like.port} was shut down on {PAST}" in err
    assert scored(openai_like) == 0 and not (tmp_path / "run").exists()


def test_at_the_provider_a_model_its_table_retires_is_refused_without_a_request(
    openai_like: OpenAIStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenAI stops listing a model once it is shut down; the bundled table has its date.
    The server plays OpenAI's own API here (the table's host is its host)."""
    table = lifecycle.known_shutdowns()
    playing = lifecycle.Shutdowns(
        models=table.models,
        provider=table.provider,
        host=f"127.0.0.1:{openai_like.port}",
        source=table.source,
        as_of=table.as_of,
    )
    monkeypatch.setattr(preflight, "known_shutdowns", lambda: playing)
    args = run_args(openai_like, tmp_path / "run", "gpt-4o-mini")
    args[args.index("--judge-model") + 1] = "o1-mini"
    assert main(args) == 2
    err = one_line(capsys)
    assert "the judge o1-mini, the benchmark's own" in err
    assert "shut down on 2026-10-23 (OpenAI's deprecations page)" in err
    assert "aidanbench calibrate --judge-model M" in err
    assert not [r for r in openai_like.requests if r.model == "o1-mini"], "no request for it"


@pytest.fixture
def wrong_key(api_key: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test key's variable holding a key the provider refuses (set after ``api_key``
    set the right one)."""
    monkeypatch.setenv(TEST_KEY_VARIABLE, WRONG_KEY)
    return WRONG_KEY


def test_a_bad_key_is_one_line_naming_its_variable(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str], wrong_key: str
) -> None:
    assert main(run_args(openai_like, tmp_path / "run", "gpt-4o-mini")) == 2
    err = one_line(capsys)
    assert "refused the key in AIDANBENCH_TEST_KEY (HTTP 401" in err
    assert "Incorrect API key provided" in err and "--api-key-env" in err
    assert wrong_key not in err
    assert not (tmp_path / "run").exists()


def test_a_bad_key_found_during_a_run_stops_it_with_one_line(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str], wrong_key: str
) -> None:
    """Without the preflight the first request finds it: one line, exit 2, no error row."""
    run_dir = tmp_path / "run"
    assert main(run_args(openai_like, run_dir, "gpt-4o-mini", "--no-preflight")) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "refused the key in AIDANBENCH_TEST_KEY" in err and "no question was charged" in err
    assert (run_dir / "questions.jsonl").read_text() == ""
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["sessions"][-1]["status"] == "refused"
    assert meta["spec"]["models"] == [] and meta["scoring_settings"] == {}


def test_a_corrected_run_in_the_typos_directory_has_no_row_for_it(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's scenario, with the preflight off so the typo reaches the run: it
    stops at its first request without an error row; the corrected command in the same
    directory exits 0 and no output ranks the typo."""
    run_dir = tmp_path / "run"
    assert main(run_args(openai_like, run_dir, "gpt-4o-minii", "--no-preflight")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not serve gpt-4o-minii" in err, err
    assert [r.status for r in openai_like.requests if r.model == "gpt-4o-minii"] == [404] * len(
        [r for r in openai_like.requests if r.model == "gpt-4o-minii"]
    )
    assert main(run_args(openai_like, run_dir, "gpt-4o-mini")) == 0
    out = capsys.readouterr().out
    assert "gpt-4o-mini " in out and "gpt-4o-minii" not in out
    for name in ("questions.jsonl", "answers.jsonl", "results.json", "report.html"):
        assert "gpt-4o-minii" not in (run_dir / name).read_text(), name
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["spec"]["models"] == ["gpt-4o-mini"]
    assert list(meta["scoring_settings"]) == ["gpt-4o-mini"]
    assert [s["status"] for s in meta["sessions"]] == ["refused", "finished"]
    assert main(["report", str(run_dir)]) == 0
    assert "gpt-4o-minii" not in capsys.readouterr().out


def test_a_shutdown_before_the_runs_likely_end_is_a_warning(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(openai_like, tmp_path / "run", "leaving-soon")) == 0
    err = capsys.readouterr().err
    assert (
        f"warning: model under test leaving-soon at 127.0.0.1:{openai_like.port} shuts down " in err
    )
    assert f"on {SOON}, in 10 days" in err


def test_openai_base_url_alone_points_every_role_at_the_server(
    openai_like: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_like.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    run_dir = tmp_path / "run"
    args = ["run", "-m", "gpt-4o-mini", "--questions", "1", "--run-dir", str(run_dir)]
    args += ["--judge-model", "judge-model", "--embedding-model", "embedding-model"]
    assert main(args) == 0
    assert {r.kind for r in openai_like.requests} >= {"generate", "coherence", "embed"}
    session = json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]
    roles = ("model", "judge", "embeddings")
    assert session["endpoint_sources"] == dict.fromkeys(roles, "OPENAI_BASE_URL")
    assert session["base_urls"] == dict.fromkeys(roles, openai_like.base_url)
    assert session["operational"]["judge_base_url"] == openai_like.base_url


def test_a_flag_wins_over_openai_base_url(
    openai_like: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only roles without a URL of their own take the variable, as in the OpenAI SDK."""
    with OpenAIStub(ScriptedBrain({q: 2 for q in QUESTIONS}), api_key=TEST_KEY) as judge:
        monkeypatch.setenv("OPENAI_BASE_URL", openai_like.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
        run_dir = tmp_path / "run"
        args = ["run", "-m", "gpt-4o-mini", "--questions", "1", "--run-dir", str(run_dir)]
        args += ["--judge-model", "judge-model", "--embedding-model", "embedding-model"]
        assert main([*args, "--judge-base-url", judge.base_url]) == 0
        assert {r.kind for r in judge.requests} >= {"coherence"}
    assert "coherence" not in {r.kind for r in openai_like.requests}
    session = json.loads((run_dir / "metadata.json").read_text())["sessions"][-1]
    assert session["endpoint_sources"] == {
        "model": "OPENAI_BASE_URL",
        "embeddings": "OPENAI_BASE_URL",
    }


def ledger(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "usage.jsonl").read_text().splitlines()]


def test_without_a_model_list_one_request_per_role_decides_and_is_in_the_ledger(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server without ``GET /v1/models``: a typo is still refused (its 404); a good run
    goes ahead and its ledger counts the preflight's requests (node ``preflight``)."""
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    with OpenAIStub(brain, catalogue=CATALOGUE, list_models=False) as stub:
        assert main(run_args(stub, tmp_path / "typo", "gpt-4o-minii")) == 2
        assert "gpt-4o-minii is unknown" in one_line(capsys)
        assert not (tmp_path / "typo").exists()
        run_dir = tmp_path / "run"
        seen, before = len(stub.requests), stub.asked()
        assert main(run_args(stub, run_dir, "gpt-4o-mini")) == 0
        asked = [r for r in stub.requests[seen:] if is_check(r)]
        sent_by_the_run = stub.asked() - before
    checks = [line for line in ledger(run_dir) if line["node"] == "preflight"]
    sent = sorted((line["role"], line["model"]) for line in checks if line["event"] == "sent")
    assert sent == [
        ("embeddings", "embedding-model"),
        ("judge", "judge-model"),
        ("model", "gpt-4o-mini"),
    ]
    replied = [line for line in checks if line["event"] == "usage"]
    assert len(replied) == 3 and all(line["input_tokens"] > 0 for line in replied)
    assert {line["id"] for line in replied} == {
        line["id"] for line in checks if line["event"] == "sent"
    }
    assert all(line["output_tokens"] is not None for line in replied), "an embedding outputs 0"
    assert len(asked) == 3, "what the server saw"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["usage"]["api_calls"] == sent_by_the_run, "the checks are counted"
    assert meta["usage"]["unrecorded"] == 0 and meta["usage"]["without_usage"] == 0


def test_no_preflight_sends_nothing_before_the_run(openai_like: OpenAIStub, tmp_path: Path) -> None:
    assert main(run_args(openai_like, tmp_path / "run", "gpt-4o-mini", "--no-preflight")) == 0
    assert not [r for r in openai_like.requests if r.method == "GET" or is_check(r)]


def test_listed_models_need_no_request(openai_like: OpenAIStub, tmp_path: Path) -> None:
    """An endpoint that lists every model of the run: one ``GET /models``, nothing else."""
    run_dir = tmp_path / "run"
    assert main(run_args(openai_like, run_dir, "gpt-4o-mini")) == 0
    assert [r.path for r in openai_like.requests if r.method == "GET"] == ["/v1/models"]
    assert not [r for r in openai_like.requests if is_check(r)]
    assert not [line for line in ledger(run_dir) if line["node"] == "preflight"]


def test_a_one_line_request_refused_otherwise_is_a_warning_and_the_run_goes_on(
    openai_like: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 400 to the preflight's own request may be the request's fault (a field the
    server does not take): said, not refused; the run itself finds a real refusal."""
    openai_like.catalogue = None  # serves any model, lists only what it was asked
    openai_like.faults = when("other", http_error(400, "max_tokens is not supported"))
    assert main(run_args(openai_like, tmp_path / "run", "gpt-4o-mini")) == 0
    err = capsys.readouterr().err
    assert "warning: model under test gpt-4o-mini at 127.0.0.1" in err
    assert "was not checked (a one-line request got HTTP 400: max_tokens is not supported)" in err


def test_an_unreachable_endpoint_from_openai_base_url_says_so(
    tmp_path: Path,
    api_key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", closed)
    args = ["run", "-m", "m", "--questions", "1", "--run-dir", str(tmp_path / "run")]
    assert main(args) == 2
    err = one_line(capsys)
    assert "cannot reach the model under test, judge and embedding model endpoint" in err
    assert "(Connection refused)" in err
    assert "--base-url (here OPENAI_BASE_URL), --judge-base-url (here OPENAI_BASE_URL)" in err
    assert not (tmp_path / "run").exists()


def test_a_refused_model_list_is_checked_with_one_request_instead(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gateway answering ``GET /models`` with 401 while its chat and embeddings take the
    key: not a key error; each role gets its minimal request, and the run says so."""
    brain = ScriptedBrain({q: 2 for q in QUESTIONS})
    with OpenAIStub(brain, catalogue=CATALOGUE, list_models="refused") as stub:
        assert main(run_args(stub, tmp_path / "typo", "gpt-4o-minii")) == 2
        assert "gpt-4o-minii is unknown" in one_line(capsys), "a typo is still found"
        assert main(run_args(stub, tmp_path / "run", "gpt-4o-mini")) == 0
        checks = [r for r in stub.requests if is_check(r)]
    err = capsys.readouterr().err
    assert "refused its model list (HTTP 401" in err and "one request each" in err
    assert len(checks) == 3 + 3, "a minimal request per role, per run"


def test_a_key_refused_everywhere_is_still_a_key_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_KEY_VARIABLE, WRONG_KEY)
    with OpenAIStub(catalogue=CATALOGUE, api_key=TEST_KEY, list_models="refused") as stub:
        assert main(run_args(stub, tmp_path / "run", "gpt-4o-mini")) == 2
    assert f"refused the key in {TEST_KEY_VARIABLE}" in one_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_paginated_model_list_is_read_to_its_last_page(
    tmp_path: Path, api_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shutdown date on the last page of a list served two models a page is seen."""
    catalogue = {f"model-{n:02d}": None for n in range(7)} | CATALOGUE
    with OpenAIStub(catalogue=catalogue, api_key=TEST_KEY, models_page=2) as stub:
        assert main(run_args(stub, tmp_path / "run", "listed-but-gone")) == 2
        pages = [r for r in stub.requests if r.method == "GET"]
        assert not any(is_check(r) for r in stub.requests), "every model was listed"
    assert f"was shut down on {PAST}" in one_line(capsys)
    assert len(pages) == 7, "every page, once"
