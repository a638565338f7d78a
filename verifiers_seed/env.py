"""AidanBench on the verifiers 0.1 environment API: the seed's ``vf-eval`` command line.

Each question (one rollout) runs through the project's per-question graph, as ``aidanbench run``
does; only the model under test is swapped: each answer is one ``Environment.get_model_response``
call on ``vf-eval``'s client with its sampling arguments, sent the answer's fresh prompt alone
(never a growing chat). The state carries the question's result under ``aidanbench``; the rubric
reports the seed's metric names.

verifiers 0.1 has no failed rollout, so a question stopped by an error stops ``vf-eval`` with one
line naming the cause and exit 1, never a reward of 0. Before any question every role is checked as
``aidanbench run`` checks it (``runner.preflight``): a refusal is one line naming its host and what
sets it, and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from copy import deepcopy
from typing import Any

import verifiers as vf
from datasets import Dataset
from langchain_core.messages import AIMessage
from pydantic import ConfigDict

from aidanbench.core.base_url import environment_base_urls
from aidanbench.core.errors import UsageError, printable
from aidanbench.core.metric_names import RUBRIC_REWARD, metrics_off, rubric
from aidanbench.core.seed_args import SEED_FIELDS, SeedArgs
from aidanbench.core.settings import ROLE_FIELDS, Settings
from aidanbench.graph import build_question_graph
from aidanbench.graph.questions import load_questions
from aidanbench.nodes.prompts import render_generate
from aidanbench.runner import preflight
from aidanbench.services import default_services, with_policy
from aidanbench.services.prompt_model import PromptModel

STATE_KEY = "aidanbench"
"""Key of the question's result (answers, scores, stop reason) in the rollout's state."""

SEED_FLAGS = {
    "model": "-m",
    "base_url": "-b",
    "api_key_env": "-k",
    **{field: f"-a {key}" for key, field in SEED_FIELDS.items()},
}
"""What sets each role's ``Settings`` field on the seed's command line."""


class EnvArgs(SeedArgs):
    """``-a``'s keys (``core.seed_args``): an unknown key or a value of the wrong kind (``"10"`` for
    a number) is an error naming it, never ignored or converted. ``max_turns`` and
    ``reasoning_effort`` are refused: the benchmark has no turn cap (``max_answers`` caps valid
    answers), and request fields belong to ``vf-eval`` (``-S '{"reasoning_effort": ...}'``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class AidanBenchError(RuntimeError):
    """A question stopped on an error instead of an answer: the evaluation fails."""


class ClientPolicy(PromptModel):
    """The model under test: each call is one ``get_model_response`` of the rollout's client,
    recorded on its state."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    env: Any
    """The environment whose ``get_model_response`` sends the request."""
    client: Any
    """``vf-eval``'s ``AsyncOpenAI`` client (``-b``, ``-k``)."""
    model_name: str
    sampling_args: dict[str, Any]
    state: dict[str, Any]
    """The rollout's state: each prompt and reply is appended to its completion."""

    @property
    def _llm_type(self) -> str:
        return "verifiers-client"

    async def answer(self, prompt: str) -> AIMessage:
        asked = [{"role": "user", "content": prompt}]
        response = await self.env.get_model_response(
            self.client,
            self.model_name,
            asked,
            sampling_args=deepcopy(self.sampling_args),
            message_type="chat",
        )
        if response is None or response.id == "overlong-prompt":
            raise AidanBenchError("the policy's context is too short for the prompt")
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice and choice.message else ""
        state = self.state
        if state["turn"] > 0:
            state["completion"].extend(asked)
        state["completion"].append({"role": "assistant", "content": text})
        state["responses"].append(response)
        state["turn"] += 1
        metadata = {
            "finish_reason": choice.finish_reason if choice else None,
            "model_name": response.model,
        }
        return AIMessage(content=text, response_metadata=metadata)


class AidanBenchRubric(vf.Rubric):
    """The seed's metrics, read from the question's result on the rollout's state; the reward is the
    mode's metric alone.

    A metric without a value (no valid answer to average) is NaN, never 0: verifiers 0.1 keeps one
    float per metric and rollout, so its average over rollouts is NaN too. The mean of a score that
    is switched off (``avg_llm_novelty`` without the similarity judge) is not reported.
    """

    def __init__(self, reward_mode: str, settings: Settings) -> None:
        off = metrics_off(settings)
        self.names = [n for n in rubric() if n not in off]
        self.reward_name = RUBRIC_REWARD[reward_mode]
        funcs = [_reader(name) for name in self.names]
        weights = [float(name == self.reward_name) for name in self.names]
        super().__init__(funcs=funcs, weights=weights)

    async def score_rollout(
        self,
        prompt: Any,
        completion: Any,
        answer: str,
        state: dict[str, Any],
        task: str = "default",
        info: Any = None,
        example_id: int | None = None,
        **kwargs: Any,
    ) -> vf.RolloutScore:
        metrics = {name: _metric(state, name) for name in self.names}
        return vf.RolloutScore(reward=metrics[self.reward_name], metrics=metrics)


def _metric(state: dict[str, Any], name: str) -> float:
    value = state[STATE_KEY][rubric()[name]]
    return math.nan if value is None else float(value)


def _reader(name: str) -> Any:
    def read(state: dict[str, Any], **kwargs: Any) -> float:
        return _metric(state, name)

    read.__name__ = name
    return read


class AidanBenchSeedEnv(vf.Environment):
    """Ask each question until an answer fails; reward the number of valid answers."""

    def __init__(self, args: EnvArgs) -> None:
        self.args = args
        questions = load_questions(args.question_source, limit=args.num_questions)
        rows = [
            {
                "prompt": [{"role": "user", "content": render_generate(q, [], cot=args.cot)}],
                "answer": "",
                "info": {"question": q},
                "task": "aidanbench",
            }
            for q in questions
        ]
        super().__init__(
            eval_dataset=Dataset.from_list(rows),
            rubric=AidanBenchRubric(args.reward_mode, args.settings("rubric")),
            message_type="chat",
        )

    async def generate(
        self, inputs: Any, client: Any, model: str, sampling_args: Any = None, **kwargs: Any
    ) -> Any:
        """Check every role first (see the module docstring), then run. The first question stopped
        by an error ends ``vf-eval`` with one line; the loop's other errors are never retrieved."""
        key_env = key_variable(sys.argv[1:])
        settings = seed_settings(
            self.args, model, base_url=str(client.base_url), api_key_env=key_env
        )
        keys = {**os.environ, key_env: client.api_key}
        try:
            await preflight.check([settings], flag=seed_flag, keys=keys)
            asyncio.get_running_loop().set_exception_handler(_quiet_failures)
            return await super().generate(inputs, client, model, sampling_args, **kwargs)
        except (UsageError, AidanBenchError) as exc:  # below verifiers' progress bar, if any
            print(f"\nvf-eval aidanbench: error: {printable(str(exc))}", file=sys.stderr)
            raise SystemExit(2 if isinstance(exc, UsageError) else 1) from None

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Any,
        completion: Any = None,
        answer: str = "",
        state: Any = None,
        task: str = "default",
        info: Any = None,
        example_id: int = 0,
        sampling_args: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        info = info if info is not None else {}
        completion = completion if completion is not None else []
        state = state or await self.init_state(prompt, completion, answer, task, info, example_id)
        sampling = dict(sampling_args or {})
        temperature = sampling.get("temperature")
        labels = {"temperature": temperature} if temperature is not None else {}
        settings = seed_settings(self.args, model, **labels)
        policy = ClientPolicy(
            env=self,
            client=client,
            model_name=model,
            sampling_args=sampling,
            state=state,
        )
        services = with_policy(default_services(settings), policy)
        graph = build_question_graph(services=lambda _: services).compile()
        out = await graph.ainvoke({"question": info["question"]}, context=settings)
        error = out.get("error")
        if error is not None:
            raise AidanBenchError(f"{info['question']!r}: {error['kind']}: {error['message']}")
        state[STATE_KEY] = {
            "stop_reason": out["stop_reason"],
            **{key: out.get(key) for key in {*rubric().values(), "reward"}},
            "answers": [dict(record) for record in out["answers"]],
        }
        return state["completion"], state


def seed_settings(args: EnvArgs, model: str, **fields: Any) -> Settings:
    """The settings ``args`` choose, with ``OPENAI_BASE_URL`` as the base URL of a role given none
    (the SDK sends it there, so messages name that host). ``model`` and a temperature in ``fields``
    only label the results: the policy request is ``vf-eval``'s."""
    resolved, _ = environment_base_urls(args.settings(model, **fields).model_dump(), os.environ)
    return Settings(**resolved)


def _quiet_failures(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), AidanBenchError):
        loop.default_exception_handler(context)


def seed_flag(role: str, which: str) -> str:
    """What sets ``role``'s model, base URL or key variable on the seed's command line."""
    return SEED_FLAGS[getattr(ROLE_FIELDS[role], which)]


def key_variable(argv: list[str]) -> str:
    """The variable ``-k`` names, for messages (verifiers 0.1 hands the environment the client
    only)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-k", "--api-key-var", default="OPENAI_API_KEY")
    return str(parser.parse_known_args(argv)[0].api_key_var)


def load_environment(**kwargs: Any) -> AidanBenchSeedEnv:
    """What ``vf-eval aidanbench -a JSON`` calls with the JSON's keys."""
    return AidanBenchSeedEnv(EnvArgs.model_validate(kwargs))
