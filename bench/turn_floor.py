"""CPU per turn of the question graph with no HTTP at all, and the floor of its shape.

    python -m bench.turn_floor [--runs 3] [--modes graph,bare,empty,empty-none]

Workload (b)'s chains of ``bench.lab`` (10 scripted models x 63 bundled questions, chain
lengths drawn per model and question, every chain in flight), each mode in a child
process of its own, rounds interleaved; every request is answered at once in this
process, so what is measured is everything but the HTTP client:

* ``graph``: the question graph exactly as ``bench.lab``'s workload (b) runs it
  (``runner.local.drive_local``: the run's ``InlineCommitSaver`` with synchronous
  durability, output files, progress), its chat clients ``OpenAIChat`` reading each
  reply from the chat-completion JSON the lab's provider would send, its embeddings
  batched from the lab's vectors;
* ``bare``: the same graph and clients driven by a plain ``asyncio.gather`` of
  ``astream`` calls (no output files, no progress): what the graph, its nodes and the
  checkpointer cost;
* ``empty``: a graph of the same shape (``prepare``, ``generate``, the scorers and the
  look-ahead in parallel, a deferred ``decide``, a router per source, the loop back) whose
  nodes only count, on the same checkpointer with the same durability, chains of the
  same lengths: LangGraph's own step machinery with our checkpointer, the floor any node
  or state of ours adds to;
* ``empty-none``: that graph with no checkpointer (LangGraph's step machinery alone).

CPU per turn is the child's process time over the turns scored (each chain's valid
answers and its failing one), as ``bench.lab`` counts them.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from aidanbench.services.chat import OpenAIChat
from aidanbench.services.registry import FIXED_CEILING
from bench.processes import ROOT, parent_or_child

MODES = ("graph", "bare", "empty", "empty-none")


@dataclass(frozen=True)
class InstantChat(OpenAIChat):
    """An ``OpenAIChat`` answering from the lab's brain at once: the reply is the
    chat-completion JSON the lab's provider would send, read by ``read_reply``."""

    brain: Any = None

    async def reply(self, prompt: str) -> AIMessage:
        from aidanbench.services.chat import read_reply
        from aidanbench.testing import protocol
        from aidanbench.testing.brain import classify

        reply = self.brain.chat(classify(prompt), self.model, prompt, {})
        payload = protocol.chat_completion(
            reply, self.model, prompt, "chatcmpl-floor", stream=False, usage_chunk=False
        )
        return read_reply(json.dumps(payload).encode("utf-8"))


class InstantEmbeddings(Embeddings):
    """The lab's vectors, at once."""

    def __init__(self, brain: Any) -> None:
        self.brain = brain

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.brain.embed("lab-embedding", texts)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


@dataclass
class InstantServices:
    """A services factory like ``OpenAIServices`` (one ``Services`` per settings, one
    limiter per role) whose clients answer in this process."""

    brain: Any
    cache_path: Path
    built: dict[str, Any] = field(default_factory=dict)

    def __call__(self, settings: Any) -> Any:
        from aidanbench.services import Services, embedding_namespace
        from aidanbench.services.cache import ScoreCache
        from aidanbench.services.limits import EndpointLimiter

        key = settings.model
        if key not in self.built:
            if "cache" not in self.built:
                self.built["cache"] = ScoreCache(self.cache_path)
                self.built["limiter"] = EndpointLimiter(settings.max_concurrency or FIXED_CEILING)
            nothing = cast(Any, None)  # no HTTP client: replies are made here
            model = InstantChat(nothing, settings.model, brain=self.brain)
            judge = InstantChat(nothing, settings.judge_model, brain=self.brain)
            embeddings = InstantEmbeddings(self.brain)
            limiter = self.built["limiter"]
            self.built[key] = Services(
                build={
                    "model": lambda: model,
                    "judge": lambda: judge,
                    "embeddings": lambda: embeddings,
                },
                cache=self.built["cache"],
                limiters={"model": limiter, "judge": limiter, "embeddings": limiter},
                embedding_namespace=embedding_namespace(settings),
            )
        return self.built[key]


def lab_tasks(args: argparse.Namespace, run_dir: Path) -> list[Any]:
    from aidanbench.graph.questions import bundled_questions
    from aidanbench.runner.tasks import Task
    from bench.lab import lab_models, lab_settings

    url = "http://127.0.0.1:9/v1"  # never reached: every client answers in process
    return [
        Task(lab_settings(url, model, run_dir, "default"), question, 1)
        for model in lab_models(args.models)
        for question in bundled_questions(args.questions)
    ]


def lab_brain(args: argparse.Namespace) -> Any:
    from aidanbench.graph.questions import bundled_questions
    from bench.lab import lab_models
    from bench.lab_serve import LabBrain

    questions = bundled_questions(args.questions)
    return LabBrain(lab_models(args.models), questions, args.mean_length, args.max_length)


async def question_graph_run(mode: str, args: argparse.Namespace) -> dict[str, float]:
    """The real question graph on in-process clients (``graph`` or ``bare``)."""
    from aidanbench.graph.question import build_question_graph
    from aidanbench.runner.checkpoints import open_checkpointer
    from aidanbench.runner.local import DURABILITY, drive_local
    from aidanbench.runner.progress import Progress
    from aidanbench.services import ServicesFactory

    brain = lab_brain(args)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        tasks = lab_tasks(args, run_dir)
        factory = cast(ServicesFactory, InstantServices(brain, run_dir / "cache.sqlite"))
        cpu = time.process_time()
        lines: Sequence[dict[str, Any]]
        if mode == "graph":
            driven = await drive_local(
                tasks, run_dir, progress=Progress(out=io.StringIO()), services=factory
            )
            lines = [line.model_dump() for line in driven]
        else:
            async with open_checkpointer(run_dir / "checkpoints.sqlite") as saver:
                graph = build_question_graph(factory).compile(checkpointer=saver)

                async def one(task: Any) -> dict[str, Any]:
                    config: RunnableConfig = {"configurable": {"thread_id": task.thread_id}}
                    async for _ in graph.astream(
                        {"question": task.question},
                        config,
                        context=task.settings,
                        stream_mode="custom",
                        durability=DURABILITY,
                    ):
                        pass
                    return dict((await graph.aget_state(config)).values)

                lines = await asyncio.gather(*(one(task) for task in tasks))
        cpu = time.process_time() - cpu
    return {
        "cpu": cpu,
        "turns": sum(len(line["answers"]) for line in lines),
        "score": sum(int(line.get("score") or 0) for line in lines),
        "errored": sum(1 for line in lines if line.get("error")),
    }


def _last(_: int, new: int) -> int:
    return new


class EmptyState(TypedDict, total=False):
    """The empty graph's state: the chain's length, the answer in flight, the answer
    scored (the look-ahead's marker) and the stop."""

    length: int
    index: Annotated[int, _last]
    scored: Annotated[int, _last]
    done: bool


SCORERS = ["judge", "embed_novelty", "generate_next"]
AfterPrepare = Literal["generate", "__end__"]
AfterGenerate = Literal["judge", "embed_novelty", "generate_next", "decide"]
AfterDecide = Literal["judge", "embed_novelty", "generate_next", "__end__"]


def _rule(state: EmptyState) -> list[str]:
    if state.get("done"):
        return ["__end__"]
    if not state.get("index"):
        return ["generate"]
    if state.get("scored") != state["index"]:
        return SCORERS
    return ["decide"]


async def _prepare(state: EmptyState) -> dict[str, Any]:
    return {"index": 0, "scored": 0}


async def _generate(state: EmptyState) -> dict[str, Any]:
    return {"index": 1}


async def _score(state: EmptyState) -> dict[str, Any]:
    return {}


async def _look_ahead(state: EmptyState) -> dict[str, Any]:
    return {"scored": state["index"]}


async def _decide(state: EmptyState) -> dict[str, Any]:
    index = state["index"]
    return {"done": True} if index > state["length"] else {"index": index + 1}


async def _after_prepare(state: EmptyState) -> Sequence[AfterPrepare]:
    return _rule(state)  # type: ignore[return-value]


async def _after_generate(state: EmptyState) -> Sequence[AfterGenerate]:
    return _rule(state)  # type: ignore[return-value]


async def _after_decide(state: EmptyState) -> Sequence[AfterDecide]:
    return _rule(state)  # type: ignore[return-value]


def empty_graph() -> StateGraph[EmptyState, None, EmptyState, EmptyState]:
    """A graph of the question graph's shape whose nodes only count turns."""
    graph = StateGraph(EmptyState)
    graph.add_node("prepare", _prepare)
    graph.add_node("generate", _generate)
    graph.add_node("judge", _score)
    graph.add_node("embed_novelty", _score)
    graph.add_node("llm_novelty", _score)
    graph.add_node("generate_next", _look_ahead)
    graph.add_node("decide", _decide, defer=True)
    graph.add_edge(START, "prepare")
    graph.add_conditional_edges("prepare", _after_prepare, list(get_args(AfterPrepare)))
    graph.add_conditional_edges("generate", _after_generate, list(get_args(AfterGenerate)))
    graph.add_conditional_edges("decide", _after_decide, list(get_args(AfterDecide)))
    for branch in ("judge", "embed_novelty", "llm_novelty", "generate_next"):
        graph.add_edge(branch, "decide")
    return graph


async def empty_graph_run(mode: str, args: argparse.Namespace) -> dict[str, float]:
    """The empty graph of the same shape over chains of the lab's lengths."""
    from aidanbench.graph.questions import bundled_questions
    from aidanbench.runner.checkpoints import open_checkpointer
    from aidanbench.runner.local import DURABILITY
    from bench.lab import lab_models
    from bench.lab_serve import chain_length

    lengths = [
        chain_length(model, question, args.mean_length, args.max_length)
        for model in lab_models(args.models)
        for question in bundled_questions(args.questions)
    ]

    async def drive(compiled: Any) -> int:
        durable = {} if compiled.checkpointer is None else {"durability": DURABILITY}

        async def one(k: int, length: int) -> int:
            config = {"configurable": {"thread_id": f"chain-{k}"}}
            async for _ in compiled.astream(
                {"length": length}, config, stream_mode="custom", **durable
            ):
                pass
            return length + 1

        return sum(await asyncio.gather(*(one(k, n) for k, n in enumerate(lengths))))

    with tempfile.TemporaryDirectory() as tmp:
        cpu = time.process_time()
        if mode == "empty":
            async with open_checkpointer(Path(tmp) / "checkpoints.sqlite") as saver:
                turns = await drive(empty_graph().compile(checkpointer=saver))
        else:
            turns = await drive(empty_graph().compile())
        cpu = time.process_time() - cpu
    return {"cpu": cpu, "turns": turns, "score": turns - len(lengths), "errored": 0}


def child(args: argparse.Namespace) -> None:
    from bench.lab import apply_variant

    apply_variant(args.variant)
    if args.child in ("graph", "bare"):
        result = asyncio.run(question_graph_run(args.child, args))
    else:
        result = asyncio.run(empty_graph_run(args.child, args))
    print(json.dumps(result))


def measure(mode: str, variant: str, args: argparse.Namespace) -> dict[str, float]:
    command = [
        sys.executable,
        "-m",
        "bench.turn_floor",
        "--child",
        mode,
        "--variant",
        variant,
        f"--models={args.models}",
        f"--questions={args.questions}",
        f"--mean-length={args.mean_length}",
        f"--max-length={args.max_length}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"mode {mode} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def parent(args: argparse.Namespace) -> None:
    runs = [(m, v) for m in args.modes.split(",") for v in args.variants.split(",")]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    per_turn: dict[str, list[float]] = {f"{m} {v}": [] for m, v in runs}
    for _ in range(args.runs):
        for mode, variant in runs:
            r = measure(mode, variant, args)
            ms = 1000 * r["cpu"] / max(1, r["turns"])
            per_turn[f"{mode} {variant}"].append(ms)
            print(
                f"  {mode + ' ' + variant:<28} CPU {r['cpu']:6.2f} s  turns {r['turns']:5.0f}  "
                f"CPU/turn {ms:5.2f} ms  score {r['score']:5.0f}  errored {r['errored']:.0f}",
                flush=True,
            )
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    for mode, values in per_turn.items():
        spread = " / ".join(f"{v:.2f}" for v in values)
        print(f"{mode:<28} CPU per turn {spread} ms (median {statistics.median(values):.2f})")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated of {MODES}")
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--questions", type=int, default=63)
    p.add_argument("--mean-length", type=float, default=4.0)
    p.add_argument("--max-length", type=int, default=20)
    p.add_argument(
        "--variants",
        default="default",
        help="comma-separated variants of bench.lab (each mode runs with each)",
    )
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    return p.parse_args()


def main() -> None:
    parent_or_child(parse_args(), parent, child)


if __name__ == "__main__":
    main()
