"""What a run leaves on disk stays honest: through kills, lost metadata, damage, signals.

Every case drives the real ``aidanbench`` command as a subprocess against the local stub
server, and inspects the run directory it leaves.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path

import pytest

from aidanbench.graph.questions import bundled_questions
from aidanbench.record import files
from aidanbench.record.usage import UsageLedger, read_ledger
from aidanbench.runner.drive import _spawn, run_group
from aidanbench.testing import Latency, OpenAIStub, ScriptedBrain, http_error, when

from .builders import write_outputs
from .conftest import REPO, TEST_KEY
from .test_bad_input import AIDANBENCH, aidanbench, one_line, run_args, snapshot

pytestmark = pytest.mark.e2e

QUESTIONS = bundled_questions(2)


@pytest.fixture
def bench_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(ScriptedBrain({q: 2 + i for i, q in enumerate(QUESTIONS)})) as stub:
        yield stub


def finished_run(stub: OpenAIStub, run_dir: Path, *extra: str) -> None:
    proc = aidanbench(run_args(stub, run_dir, *extra))
    assert proc.returncode == 0, proc.stderr


def question_lines(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()]


def test_lost_metadata_does_not_relabel_old_scores(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    """Each thread records what it measured: a rerun under other thresholds is refused."""
    run_dir = tmp_path / "r"
    finished_run(bench_stub, run_dir)
    lines = question_lines(run_dir)
    assert lines[0]["thresholds"] == {"coherence": 15.0, "novelty": 0.15, "llm_novelty": None}
    assert lines[0]["measured"]["judge_model"] == "o1-mini"
    (run_dir / "metadata.json").unlink()
    before = snapshot(run_dir)
    args = run_args(bench_stub, run_dir, "--coherence-threshold", "80")
    err = one_line(aidanbench([*args, "--novelty-threshold", "0.5"]))
    assert "measured with other settings" in err
    assert "coherence_threshold" in err and "novelty_threshold" in err
    assert snapshot(run_dir) == before, "nothing relabelled, nothing written"
    finished_run(bench_stub, run_dir)
    assert question_lines(run_dir)[0]["thresholds"]["coherence"] == 15.0


def test_results_files_from_an_interrupted_write_are_refused_then_rewritten(
    bench_stub: OpenAIStub, tmp_path: Path
) -> None:
    """A kill between two renames: readers refuse the mix; the next run repairs it."""
    run_dir = tmp_path / "r"
    finished_run(bench_stub, run_dir)
    good = snapshot(run_dir)
    lines = question_lines(run_dir)
    half = [{**line, "answers": []} for line in lines[:1]]
    marker = json.loads((run_dir / files.OUTPUTS).read_text())
    # what a write of one question leaves when killed after its first rename
    write_outputs(tmp_path / "other", half)
    os.replace(tmp_path / "other" / files.OUTPUTS, run_dir / files.OUTPUTS)
    os.replace(tmp_path / "other" / files.RESULTS, run_dir / files.RESULTS)
    assert json.loads((run_dir / files.OUTPUTS).read_text()) != marker
    (run_dir / ".questions.jsonl.k1ll3d").write_text('{"half": ')
    rescore = ["rescore", str(run_dir), "--coherence-threshold", "20"]
    for command in (["report", str(run_dir)], [*rescore, "--novelty-threshold", "0.2"]):
        err = one_line(aidanbench(command))
        assert "interrupted write" in err and "run the same 'aidanbench run'" in err
    calls = bench_stub.asked()
    finished_run(bench_stub, run_dir)
    assert bench_stub.asked() == calls, "rewritten from the checkpoints, no new calls"
    assert not (run_dir / ".questions.jsonl.k1ll3d").exists(), "leftover removed"
    after = snapshot(run_dir)
    for name in ("results.json", "answers.jsonl", "questions.jsonl", files.OUTPUTS):
        assert after[name] == good[name]
    assert aidanbench(["report", str(run_dir)]).returncode == 0


def test_question_order_does_not_matter(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    forward, backward = tmp_path / "f.json", tmp_path / "b.json"
    forward.write_text(json.dumps(QUESTIONS))
    backward.write_text(json.dumps(QUESTIONS[::-1]))

    def args(path: Path) -> list[str]:
        base = run_args(bench_stub, run_dir)
        i = base.index("--questions")
        return [*base[:i], "--questions-file", str(path), *base[i + 2 :]]

    assert aidanbench(args(forward)).returncode == 0
    calls = bench_stub.asked()
    proc = aidanbench(args(backward))
    assert proc.returncode == 0, proc.stderr
    assert bench_stub.asked() == calls, "same threads: nothing to run again"


@pytest.mark.parametrize(
    ("content", "message"),
    [(b'{"spec": {"models": ', "is damaged (not valid JSON"), (b"[1, 2]", "a JSON list")],
    ids=["truncated", "wrong-type"],
)
def test_damaged_metadata(
    bench_stub: OpenAIStub, tmp_path: Path, content: bytes, message: str
) -> None:
    run_dir = tmp_path / "r"
    finished_run(bench_stub, run_dir)
    (run_dir / "metadata.json").write_bytes(content)
    before = snapshot(run_dir)
    for command in (
        run_args(bench_stub, run_dir),
        ["report", str(run_dir)],
        ["rescore", str(run_dir), "--coherence-threshold", "20", "--novelty-threshold", "0.2"],
        ["plot", str(run_dir), "--out", str(tmp_path / "charts")],
    ):
        err = one_line(aidanbench(command))
        assert message in err, command[0]
    assert snapshot(run_dir) == before
    assert not (tmp_path / "charts").exists()


def test_results_file_whose_answer_is_a_number(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"models": {"m": {"0.7": {"Why?": [1]}}}}))
    thresholds = ["--coherence-threshold", "15", "--novelty-threshold", "0.15"]
    for command in (
        ["report", str(path)],
        ["rescore", str(path), *thresholds],
        ["plot", str(path), "--out", str(tmp_path / "c")],
    ):
        err = one_line(aidanbench(command))
        assert "answer 1 of 'Why?' (m) is a JSON int" in err


def test_damaged_checkpoints_are_refused(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    finished_run(bench_stub, run_dir)
    path = run_dir / "checkpoints.sqlite"
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\x00" * (4096 - 100)
    data[4096:] = os.urandom(len(data) - 4096)
    path.write_bytes(bytes(data))
    before = snapshot(run_dir)
    err = one_line(aidanbench(run_args(bench_stub, run_dir)))
    assert "checkpoints.sqlite is damaged" in err and "Move it away" in err
    assert snapshot(run_dir) == before


def test_damaged_cache_is_rebuilt(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    finished_run(bench_stub, run_dir)
    clean = question_lines(run_dir)
    (run_dir / "cache.sqlite").write_bytes(b"this is not a database" * 100)
    (run_dir / "checkpoints.sqlite").unlink()
    proc = aidanbench(run_args(bench_stub, run_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("only a cache") == 1 and "Traceback" not in proc.stderr
    assert (run_dir / "cache.sqlite.damaged").exists()
    with sqlite3.connect(run_dir / "cache.sqlite") as db:
        assert db.execute("PRAGMA quick_check").fetchone() == ("ok",)
    assert [line["score"] for line in question_lines(run_dir)] == [x["score"] for x in clean]


def start(stub: OpenAIStub, run_dir: Path, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [AIDANBENCH, *run_args(stub, run_dir, "--concurrency", "1")],
        env={**os.environ, "AIDANBENCH_TEST_KEY": TEST_KEY, "COLUMNS": "200"},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def test_sigterm_is_an_interrupt(tmp_path: Path) -> None:
    brain = ScriptedBrain({q: 6 for q in QUESTIONS})
    with OpenAIStub(brain, latency=Latency(generate=0.05, coherence=0.05)) as stub:
        run_dir = tmp_path / "r"
        proc = start(stub, run_dir)
        deadline = time.monotonic() + 60
        while stub.count("generate") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("Interrupted.") and "run the same command again" in err
        proc = start(stub, run_dir)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert [line["score"] for line in question_lines(run_dir)] == [6, 6]


def test_disk_full_is_one_line(bench_stub: OpenAIStub, tmp_path: Path) -> None:
    """The file size limit (RLIMIT_FSIZE) makes writes fail as on a full disk."""
    run_dir = tmp_path / "r"
    bench_stub.brain = ScriptedBrain({q: 40 for q in QUESTIONS})

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (96 * 1024, 96 * 1024))

    proc = start(bench_stub, run_dir, preexec_fn=limit)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "no space left" in err and "run the same command again" in err


LEDGER_ON_A_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from aidanbench.record.usage import UsageLedger

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]),) * 2)
ledger = UsageLedger(Path(sys.argv[1]))
try:
    ledger.sent("model", "m", {}, input_tokens=1, output_tokens=1, bound_usd=None)
except OSError as exc:
    sys.exit(f"stopped: {exc.strerror}")
"""
"""A session appending one line to the ledger SYS.ARGV[1] on a disk that has room for its
first SYS.ARGV[2] bytes (RLIMIT_FSIZE: writes past it fail, as on a full disk)."""


def test_a_ledger_line_cut_by_a_full_disk_never_joins_the_next(tmp_path: Path) -> None:
    """The disk takes part of a line, then fails: the session stops on the error (the
    write is not taken as whole), and the next session's first line starts a line of its
    own, so every whole line reads back and none is lost in a merged one."""
    path = tmp_path / "usage.jsonl"

    def session() -> str:
        ledger = UsageLedger(path)
        request = ledger.sent("model", "m", {}, input_tokens=1, output_tokens=1, bound_usd=None)
        ledger.close()
        return request

    first = session()
    room = path.stat().st_size + 40
    proc = subprocess.run(
        [sys.executable, "-c", LEDGER_ON_A_FULL_DISK, str(path), str(room)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "stopped: File too large" in proc.stderr, proc.stderr
    assert path.stat().st_size == room, "a part of the line was written"
    second = session()
    assert [line.id for line in read_ledger(path)] == [first, second]


@pytest.mark.parametrize(("status", "exit_status"), [(400, 1), (401, 2)])
def test_provider_text_cannot_drive_the_terminal(
    bench_stub: OpenAIStub, tmp_path: Path, status: int, exit_status: int
) -> None:
    """A provider's message with escape sequences, in a question's error (400) and in
    the line that stops a run (401): escaped either way."""
    text = "bad \x1b[2J\x1b[31mkey\x07 \x9b"
    bench_stub.faults = when("coherence", http_error(status, text), match=QUESTIONS[0])
    proc = aidanbench(run_args(bench_stub, tmp_path / "r"))
    assert proc.returncode == exit_status, proc.stderr
    assert "stopped on an error" in proc.stderr or "refused the key" in proc.stderr
    assert "\\x1b[2J" in proc.stderr, "shown, escaped"
    assert not any(c in proc.stderr for c in "\x1b\x07\x9b"), repr(proc.stderr)


async def run_all(jobs: list[Coroutine[None, None, None]]) -> None:
    """The jobs spawned as the drive loop spawns its questions, in its ``run_group``."""

    async def start(group: asyncio.TaskGroup) -> None:
        for job in jobs:
            _spawn(group, lambda job=job: job)  # type: ignore[misc]

    await run_group(start)


async def test_the_drive_loop_ends_every_job_and_raises_the_first_failure() -> None:
    """``run_group`` returns or raises only once every job has ended (the caller closes the
    checkpointer next), with the first failure itself, not a group of them; cancelled,
    it is cancelled, whatever a job raises on its way out."""
    ended: list[str] = []

    async def job(name: str, fail_after: float | None = None) -> None:
        try:
            await asyncio.sleep(fail_after if fail_after is not None else 10)
            if fail_after is not None:
                raise ValueError(name)
        finally:
            ended.append(name)

    with pytest.raises(ValueError, match=r"^first$"):
        await run_all([job("slow"), job("first", 0.01), job("second", 0.02)])
    assert sorted(ended) == ["first", "second", "slow"]

    async def noisy_on_cancel() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RuntimeError("closed database") from None

    ended.clear()
    runner = asyncio.ensure_future(run_all([noisy_on_cancel(), job("quiet")]))
    await asyncio.sleep(0.01)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert ended == ["quiet"]


@pytest.mark.parametrize("after", [40, 70, 100])
def test_ctrl_c_is_one_line(tmp_path: Path, after: int) -> None:
    """Ctrl-C with 32 questions in flight: the interrupt line only.

    Before the driver waited for every question to unwind, the checkpointer closed under
    them and each printed a "Cannot operate on a closed database" traceback.
    """
    questions = bundled_questions(16)
    brain = ScriptedBrain({q: 20 for q in questions})
    latency = Latency(generate=0.01, coherence=0.01, embed=0.005)
    with OpenAIStub(brain, latency=latency) as stub:
        args = run_args(stub, tmp_path / "r", "--model", "m2", "--concurrency", "32")
        args[args.index("--questions") + 1] = "16"
        proc = subprocess.Popen(
            [AIDANBENCH, *args],
            env={**os.environ, "AIDANBENCH_TEST_KEY": TEST_KEY, "COLUMNS": "200"},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while stub.count("generate") < after and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"Interrupted. Every completed step is saved in {tmp_path / 'r'}; run the same "
        "command again to resume."
    ]
