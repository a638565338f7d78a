"""The run engine called directly: ``runner.prepare``, ``execute``, ``run`` and the drive
loop (``runner.drive.drive``), in-process against the local server.

A session is checked before anything is written, takes the run directory's lock, and
ends recorded as finished, interrupted or refused; running the same spec again resumes
it, retries its errored questions and grows it with what the spec adds. The server's
request log is the witness of what each session asked.
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import pytest

from aidanbench.core.errors import EndpointRefused, UsageError
from aidanbench.core.settings import Settings
from aidanbench.graph.questions import bundled_questions
from aidanbench.record.lines import QuestionLine
from aidanbench.record.recorder import Recorder, RunLines
from aidanbench.runner import Progress, RunSpec, Task, prepare, run
from aidanbench.runner.admission import Admission
from aidanbench.runner.drive import PLAN_CHUNK, YOUNG_OBJECTS, Plan, drive
from aidanbench.runner.engine import execute
from aidanbench.testing import (
    Fault,
    Latency,
    OpenAIStub,
    RequestInfo,
    ScriptedBrain,
    http_error,
    when,
)

QUESTIONS = bundled_questions(3)
CHAINS = {q: 2 + i for i, q in enumerate(QUESTIONS)}
"""Planned scores: 2, 3 and 4 valid answers, then a repeat."""
KEY = "AIDANBENCH_TEST_KEY"
SERVED = ("m1", "m2", "o1-mini", "text-embedding-3-large")
"""What ``GET /v1/models`` lists: the preflight then asks nothing more."""


@pytest.fixture
def server(api_key: str) -> Any:
    with OpenAIStub(ScriptedBrain(CHAINS), models=SERVED) as stub:
        yield stub


def spec_for(stub: OpenAIStub, run_dir: Path, **fields: Any) -> RunSpec:
    url = stub.base_url
    settings = {
        **{f"{role}base_url": url for role in ("", "judge_", "embedding_")},
        **{f"{role}api_key_env": KEY for role in ("", "judge_", "embedding_")},
    }
    base = {"models": ["m1", "m2"], "questions": QUESTIONS, "run_dir": run_dir}
    return RunSpec.model_validate({**base, "settings": settings, **fields})


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait on the event loop until ``condition()`` holds (a minute at most)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.002)


def quiet() -> Progress:
    return Progress(out=io.StringIO(), live=False)


def asked(stub: OpenAIStub, since: int = 0) -> set[tuple[str | None, str]]:
    """(model, question) of every generate request from ``since`` on."""
    found = set()
    for request in stub.requests[since:]:
        if request.kind == "generate":
            question = next(q for q in QUESTIONS if f"<question>{q}</question>" in request.prompt)
            found.add((request.model, question))
    return found


def metadata(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "metadata.json").read_text())
    return loaded


def scores(lines: Sequence[QuestionLine]) -> dict[tuple[str, str], int | None]:
    return {(x.model, x.question): x.score for x in lines}


PLANNED = {(m, q): CHAINS[q] for m in ("m1", "m2") for q in QUESTIONS}


async def test_prepare_checks_everything_and_writes_nothing(
    server: OpenAIStub, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    prepared = await prepare(spec_for(server, run_dir, repeats=2))
    assert len(prepared.tasks) == 2 * 3 * 2, "models x questions x repeats"
    assert {(t.settings.model, t.question, t.repeat) for t in prepared.tasks} == {
        (m, q, r) for m in ("m1", "m2") for q in QUESTIONS for r in (1, 2)
    }
    assert not run_dir.exists(), "nothing written before the session starts"
    assert server.asked() == 0, "the checks ask no model anything"


async def test_the_whole_session_collects_seldom_and_puts_the_thresholds_back(
    server: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's finish reads every ledger line while the chains' objects are still
    alive: it runs with the collector as seldom as the drive loop (``collecting_seldom``)."""
    seen: list[tuple[int, int, int]] = []
    real = Recorder.finish_session

    def recording(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Recorder, "finish_session", recording)
    before = gc.get_threshold()
    await execute(await prepare(spec_for(server, tmp_path / "run")), progress=quiet())
    assert [threshold[0] for threshold in seen] == [YOUNG_OBJECTS]
    assert gc.get_threshold() == before


async def test_prepare_refuses_a_missing_key_before_anything_is_written(
    server: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY)
    with pytest.raises(UsageError, match=f"{KEY} .*is not set"):
        await prepare(spec_for(server, tmp_path / "run"))
    assert not (tmp_path / "run").exists()


async def test_a_session_then_the_same_spec_again_asks_nothing(
    server: OpenAIStub, tmp_path: Path
) -> None:
    spec = spec_for(server, tmp_path / "run")
    result = await execute(await prepare(spec), progress=quiet())
    assert scores(result.lines) == PLANNED
    assert result.totals.score == sum(PLANNED.values()) and not result.failed
    assert [(row.model, row.score) for row in result.summary] == [("m1", 9), ("m2", 9)]
    before = server.asked()
    log = io.StringIO()
    again = await run(spec, progress=Progress(out=log, live=False))
    assert server.asked() == before, "finished threads ask nothing"
    assert " valid — " not in log.getvalue(), "and are skipped, not run again"
    assert again.totals == result.totals
    assert [s["status"] for s in metadata(spec.run_dir)["sessions"]] == ["finished", "finished"]


async def test_a_grown_spec_runs_only_its_new_threads(server: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    await run(spec_for(server, run_dir, models=["m1"], questions=QUESTIONS[:2]), progress=quiet())
    written = (run_dir / "metadata.json").read_bytes()
    grown = await prepare(spec_for(server, run_dir))
    assert len(grown.tasks) == 6
    assert (run_dir / "metadata.json").read_bytes() == written, "prepare writes nothing"
    since = server.count()
    result = await execute(grown, progress=quiet())
    assert asked(server, since) == {("m1", QUESTIONS[2]), *(("m2", q) for q in QUESTIONS)}
    assert scores(result.lines) == PLANNED
    assert [s["models"] for s in metadata(run_dir)["sessions"]] == [["m1"], ["m1", "m2"]]


async def test_errored_questions_are_retried_by_the_same_spec(
    server: OpenAIStub, tmp_path: Path
) -> None:
    """A 400 on one question's judge request stops that question (both models) with an
    error; the next session asks only for those two threads, and finishes them."""
    victim = QUESTIONS[1]
    server.faults = when("coherence", http_error(400, "stub refuses this text"), match=victim)
    spec = spec_for(server, tmp_path / "run")
    first = await run(spec, progress=quiet())
    assert {(x.model, x.question) for x in first.failed} == {("m1", victim), ("m2", victim)}
    assert all(x.error is not None and x.error["status"] == 400 for x in first.failed)
    assert metadata(spec.run_dir)["totals"]["errored"] == 2
    server.faults = None
    since = server.count()
    second = await run(spec, progress=quiet())
    assert asked(server, since) == {("m1", victim), ("m2", victim)}
    assert not second.failed and scores(second.lines) == PLANNED


async def test_a_cancelled_session_is_recorded_and_resumes_without_redoing_work(
    api_key: str, tmp_path: Path
) -> None:
    """Cancelled as Ctrl-C cancels the command's task: the session is recorded as
    interrupted, and the next one continues every thread from its checkpoints. Both
    together ask for at most one answer per chain in flight more than a clean run."""
    latency = Latency(generate=0.02, coherence=0.02, embed=0.01)
    with OpenAIStub(ScriptedBrain(CHAINS), latency=latency, models=SERVED) as clean_stub:
        await run(spec_for(clean_stub, tmp_path / "clean", concurrency=2), progress=quiet())
        clean = clean_stub.count("generate")

    with OpenAIStub(ScriptedBrain(CHAINS), latency=latency, models=SERVED) as stub:
        spec = spec_for(stub, tmp_path / "run", concurrency=2)
        session = asyncio.ensure_future(execute(await prepare(spec), progress=quiet()))
        await until(lambda: stub.count("coherence") >= 6 or session.done(), "six judgments")
        assert not session.done(), "the session ended before it was cancelled"
        session.cancel()
        with pytest.raises(asyncio.CancelledError):
            await session
        interrupted = metadata(spec.run_dir)["sessions"][-1]
        assert interrupted["status"] == "interrupted" and interrupted["finished_at"]
        assert (spec.run_dir / "questions.jsonl").exists(), "what was known is written"

        result = await run(spec, progress=quiet())
        assert scores(result.lines) == PLANNED
        redone = stub.count("generate") - clean
        assert 0 <= redone <= 2 * 2, "at most the steps in flight (a look-ahead each) again"
    statuses = [s["status"] for s in metadata(spec.run_dir)["sessions"]]
    assert statuses == ["interrupted", "finished"]


def refuse_the_judge_after(served: int) -> Any:
    """401 for every judge request once ``served`` were answered: the key revoked."""
    seen: list[str] = []

    def hook(info: RequestInfo) -> Fault | None:
        if info.kind != "coherence":
            return None
        seen.append(info.key)
        return http_error(401, "Incorrect API key provided") if len(seen) > served else None

    return hook


async def test_a_refused_endpoint_stops_the_session_and_a_rerun_continues(
    server: OpenAIStub, tmp_path: Path
) -> None:
    """A refusal is no question's error: the session stops at once, recorded as refused
    with its reason, no line is charged an error, and the next session finishes."""
    server.faults = refuse_the_judge_after(3)
    spec = spec_for(server, tmp_path / "run", concurrency=1)
    with pytest.raises(EndpointRefused, match="HTTP 401") as refused:
        await run(spec, progress=quiet())
    session = metadata(spec.run_dir)["sessions"][-1]
    assert session["status"] == "refused" and session["refusal"] == str(refused.value)
    lines = [json.loads(x) for x in (spec.run_dir / "questions.jsonl").read_text().splitlines()]
    assert not [x for x in lines if x.get("error")], "no question charged an error"
    server.faults = None
    result = await run(spec, progress=quiet())
    assert scores(result.lines) == PLANNED and not result.failed
    assert [s["status"] for s in metadata(spec.run_dir)["sessions"]] == ["refused", "finished"]


async def test_a_second_session_on_a_directory_in_use_is_refused(
    api_key: str, tmp_path: Path
) -> None:
    """While one session holds the run directory, another is refused with one line and
    asks nothing; the first finishes undisturbed."""
    latency = Latency(generate=0.02, coherence=0.02, embed=0.01)
    with OpenAIStub(ScriptedBrain(CHAINS), latency=latency, models=SERVED) as stub:
        spec = spec_for(stub, tmp_path / "run")
        first = asyncio.ensure_future(run(spec, progress=quiet()))
        await until(lambda: stub.count("generate") > 0, "the first session's first answer")
        second = await prepare(spec)
        asked_before = stub.asked()
        with pytest.raises(UsageError, match="is in use by another aidanbench run"):
            await execute(second, progress=quiet())
        assert stub.asked() - asked_before <= 2 * 3 * 2, "only the first session's requests"
        result = await first
    assert scores(result.lines) == PLANNED
    assert [s["status"] for s in metadata(spec.run_dir)["sessions"]] == ["finished"]


# --- the drive loop on a backend of its own ------------------------------------------------


class Backend:
    """A ``Questions`` backend without a graph: ``finished`` threads are stored as done,
    the rest take ``steps`` loop turns each; ``failing`` raises once it starts."""

    def __init__(self, finished: Collection[str] = (), failing: str | None = None) -> None:
        self.finished = finished
        self.failing = failing
        self.running = 0
        self.most = 0
        self.executed: list[str] = []
        self.cancelled: list[str] = []
        self.warmed: list[str] = []

    async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
        return [
            Plan("skip", done(t)) if t.question in self.finished else Plan("run", {}, start={})
            for t in tasks
        ]

    def warm(self, tasks: Sequence[Task]) -> None:
        self.warmed = [t.question for t in tasks]

    def backlog(self) -> float:
        return 0.0

    async def execute(self, task: Task, step: Plan, progress: Progress) -> dict[str, Any]:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if task.question == self.failing:
                raise RuntimeError(f"backend failed on {task.question}")
            for _ in range(5):
                await asyncio.sleep(0)
            self.executed.append(task.question)
            return done(task)
        except asyncio.CancelledError:
            self.cancelled.append(task.question)
            raise
        finally:
            self.running -= 1


def done(task: Task) -> dict[str, Any]:
    """A thread's final values: stopped by novelty after no valid answer."""
    return {"question": task.question, "answers": [], "stop_reason": "novelty", "score": 0}


NAMES = [f"Question number {i}?" for i in range(8)]


def tasks_of(names: Sequence[str]) -> list[Task]:
    return [Task(Settings(model="m"), name, 1) for name in names]


async def test_drive_skips_finished_threads_and_keeps_at_most_concurrency_in_flight(
    tmp_path: Path,
) -> None:
    backend = Backend(finished={NAMES[0], NAMES[3]})
    progress = quiet()
    lines = await drive(
        tasks_of(NAMES), backend, RunLines(tmp_path), admission=Admission(3), progress=progress
    )
    assert sorted(backend.executed) == sorted(n for n in NAMES if n not in backend.finished)
    assert backend.warmed == [n for n in NAMES if n not in backend.finished]
    assert backend.most == 3, "three in flight, never more"
    assert [x.question for x in lines] == NAMES, "every line, in the run's order"
    row = progress.rows["m (T=0.7)"]
    assert (row.done, row.queued, row.running) == (8, 0, 0)
    written = (tmp_path / "questions.jsonl").read_text().splitlines()
    assert [json.loads(x)["question"] for x in written] == NAMES


async def test_drive_stops_every_question_on_the_first_failure_and_writes_what_is_known(
    tmp_path: Path,
) -> None:
    backend = Backend(finished={NAMES[0]}, failing=NAMES[2])
    with pytest.raises(RuntimeError, match=f"backend failed on {NAMES[2]}"):
        await drive(
            tasks_of(NAMES), backend, RunLines(tmp_path), admission=Admission(4), progress=quiet()
        )
    assert backend.running == 0, "no question left running behind the error"
    assert backend.cancelled, "the others in flight were stopped"
    assert NAMES[7] not in backend.executed, "nothing new started after the failure"
    written = [json.loads(x) for x in (tmp_path / "questions.jsonl").read_text().splitlines()]
    stopped = {x["question"] for x in written if x["stop_reason"]}
    assert stopped == {NAMES[0], *backend.executed}, "the finished lines are kept"


async def test_drive_cancelled_writes_what_is_known_and_reraises(tmp_path: Path) -> None:
    """Two questions finish, two hang; the files are rewritten at most hourly here, so
    only the first finish was written when the drive is cancelled: the second is in
    the files all the same."""
    gate = asyncio.Event()
    finishing = {NAMES[1], NAMES[2]}

    class Waiting(Backend):
        async def execute(self, task: Task, step: Plan, progress: Progress) -> dict[str, Any]:
            if task.question not in finishing:
                await gate.wait()  # never set: these hang until cancelled
            return await super().execute(task, step, progress)

    backend = Waiting()
    lines = RunLines(tmp_path, every=3600)
    driving = asyncio.ensure_future(
        drive(tasks_of(NAMES[:4]), backend, lines, admission=Admission(4), progress=quiet())
    )
    await until(lambda: finishing <= set(backend.executed), "the two questions that can finish")
    driving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driving
    written = [json.loads(x) for x in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert {x["question"] for x in written if x["stop_reason"]} == finishing


class Gated(Backend):
    """Each question runs until the test releases it; ``started`` in the order they start."""

    def __init__(self, finished: Collection[str] = ()) -> None:
        super().__init__(finished)
        self.started: list[str] = []
        self.release: dict[str, asyncio.Event] = {}

    async def execute(self, task: Task, step: Plan, progress: Progress) -> dict[str, Any]:
        self.started.append(task.question)
        self.running += 1
        try:
            await self.release.setdefault(task.question, asyncio.Event()).wait()
        finally:
            self.running -= 1
        self.executed.append(task.question)
        return done(task)

    def stop(self, names: Sequence[str]) -> None:
        for name in names:
            self.release.setdefault(name, asyncio.Event()).set()


async def test_a_loop_that_is_behind_lets_started_questions_finish_before_new_ones_start(
    tmp_path: Path,
) -> None:
    """The adaptive gate as the drive loop uses it, its looks at the loop made by the test:
    while the loop is behind nothing new starts until started questions stop; once it
    keeps up, the window grows and questions start in the run's order."""
    names = [f"Question number {i}?" for i in range(20)]
    backend = Gated()
    gate = Admission(20, adaptive=True, start=10, every=None)
    driving = asyncio.ensure_future(
        drive(tasks_of(names), backend, RunLines(tmp_path), admission=gate, progress=quiet())
    )
    await until(lambda: backend.running == 10, "the first window")
    assert backend.started == names[:10]

    gate.observe(lag=1.0)  # behind: the window shrinks to 8
    backend.stop(names[:2])
    await until(lambda: len(backend.executed) == 2, "two questions stopping")
    for _ in range(50):
        await asyncio.sleep(0)
    assert backend.started == names[:10], "no new question while eight run"
    backend.stop(names[2:3])
    await until(lambda: len(backend.started) == 11, "the next question")
    assert backend.started == names[:11]

    gate.observe(lag=0.0)  # keeps up: the window grows to 11
    await until(lambda: len(backend.started) == 14, "the grown window")
    for _ in range(50):
        await asyncio.sleep(0)
    assert backend.started == names[:14], "eleven in flight, in the run's order"
    assert backend.running == 11

    backend.stop(names)
    lines = await driving
    assert sorted(backend.executed) == sorted(names)
    assert [x.question for x in lines] == names


async def test_a_fixed_gate_keeps_its_number_whatever_the_loop_does(tmp_path: Path) -> None:
    backend = Gated()
    gate = Admission(3, every=None)  # --concurrency 3
    driving = asyncio.ensure_future(
        drive(tasks_of(NAMES), backend, RunLines(tmp_path), admission=gate, progress=quiet())
    )
    await until(lambda: backend.running == 3, "three in flight")
    gate.observe(lag=1.0)
    backend.stop(NAMES[:1])
    await until(lambda: len(backend.started) == 4, "the next question")
    gate.observe(lag=0.0)
    for _ in range(50):
        await asyncio.sleep(0)
    assert backend.running == 3
    backend.stop(NAMES)
    await driving
    assert gate.peak == 3


async def test_a_resumed_drive_starts_questions_before_it_looks_up_the_finished_ones(
    tmp_path: Path,
) -> None:
    """A resumed run of thousands: the threads its files show finished are looked up
    last, and questions start after one chunk of look-ups, not all of them."""
    names = [f"Question number {i}?" for i in range(3 * PLAN_CHUNK)]
    earlier = names[: 2 * PLAN_CHUNK]  # an earlier session finished these

    class Counting(Backend):
        planned: tuple[str, ...] = ()
        planned_at_first_start: int | None = None

        async def plan(self, tasks: Sequence[Task]) -> list[Plan]:
            await asyncio.sleep(0)  # a look-up waits on its store
            self.planned = (*self.planned, *(t.question for t in tasks))
            return await super().plan(tasks)

        async def execute(self, task: Task, step: Plan, progress: Progress) -> dict[str, Any]:
            if self.planned_at_first_start is None:
                self.planned_at_first_start = len(self.planned)
            return await super().execute(task, step, progress)

    tasks = tasks_of(names)
    carried = [t.line(done(t)) for t in tasks if t.question in earlier]
    backend = Counting(finished=set(earlier))
    progress = quiet()
    lines = await drive(
        tasks,
        backend,
        RunLines(tmp_path, carried=carried),
        admission=Admission(8),
        progress=progress,
    )
    assert backend.planned_at_first_start == PLAN_CHUNK
    assert backend.planned == (*names[2 * PLAN_CHUNK :], *earlier), "finished ones last"
    assert sorted(backend.executed) == sorted(names[2 * PLAN_CHUNK :])
    assert [x.question for x in lines] == names, "every line, in the run's order"
    row = progress.rows["m (T=0.7)"]
    assert (row.done, row.queued, row.running) == (len(names), 0, 0)
