"""The AidanBench environment: one question per episode, run by the project's own graph.

Each episode runs the per-question graph (``build_question_graph``) with only the model under test
swapped for a verifiers turn; nothing of the benchmark is re-implemented. The whole question is one
policy trace, whose score the task's ``@vf.reward`` reads when the rollout closes; a failed call or
an unreadable judge fails the rollout through verifiers' error mechanism, never a reward of 0.
"""

from __future__ import annotations

import verifiers.v1 as vf

from aidanbench.graph import build_question_graph
from aidanbench.services import default_services, with_policy
from aidanbench.verifiers_env.harness import AidanBenchHarnessConfig
from aidanbench.verifiers_env.policy import InteractionModel
from aidanbench.verifiers_env.rewards import INFO_KEY, summary
from aidanbench.verifiers_env.taskset import AidanBenchTask, AidanBenchTasksetConfig


class AidanBenchError(RuntimeError):
    """The question stopped on an error (judge, embeddings) instead of an answer."""


class AidanBenchEnvConfig(vf.EnvConfig):
    """One seat, ``agent``: the policy under evaluation (``--env.agent.*``)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy. Its harness is this environment's (a chat request per answer, made
    in-process), so it needs no sandbox: the runtime defaults to a local subprocess
    box, which the harness never uses."""


class AidanBenchEnv(vf.Env[AidanBenchEnvConfig]):
    """Ask one question until an answer fails; reward the number of valid answers."""

    def __init__(self, config: AidanBenchEnvConfig) -> None:
        super().__init__(config)
        if not isinstance(self.taskset.config, AidanBenchTasksetConfig):
            raise TypeError("the AidanBench environment runs the aidanbench taskset only")
        harness = config.agent_harnesses()["agent"]
        if not isinstance(harness, AidanBenchHarnessConfig):
            raise ValueError(
                f"harness {harness.id!r} would resend a growing chat; AidanBench sends a "
                "fresh prompt per answer, so the agent must keep the aidanbench harness"
            )

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        if not isinstance(task, AidanBenchTask):
            raise TypeError(f"expected an AidanBench task, got {type(task).__name__}")
        config = self.taskset.config
        assert isinstance(config, AidanBenchTasksetConfig)
        agent = agents.agent
        settings = config.settings(model=str(agent.config.model))
        prompt = task.data.prompt
        assert isinstance(prompt, str)
        async with agent.interaction(task) as interaction:
            policy = InteractionModel(interaction=interaction, opening_prompt=prompt)
            services = with_policy(default_services(settings), policy)
            graph = build_question_graph(services=lambda _: services).compile()
            out = await graph.ainvoke({"question": task.data.question}, context=settings)
            error = out.get("error")
            if error is not None:
                raise AidanBenchError(f"{error['kind']}: {error['message']}")
            interaction.trace.info[INFO_KEY] = summary(out, config.reward_mode)
