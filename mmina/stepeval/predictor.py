"""The agent asked for each step's next action, primed with the recorded history.

Per step the agent gets ``reset(task)``, then ``set_history(previous_actions)`` when it has
that method, then ``act(observation)`` — its normal path. The built-in ``openai`` agent is
used through a subclass that shows the recorded actions (not its own earlier replies) under
PREVIOUS ACTIONS. An agent with ``needs_screenshot = True`` (the openai agent in the
multimodal input mode) is not asked about steps recorded without a screenshot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from mmina.agents.llm import OpenAIAgent
from mmina.agents.protocol import Agent, AgentReply
from mmina.agents.registry import BUILTIN_AGENTS, make_agent
from mmina.agents.settings import HISTORY_ACTIONS, AgentSettings
from mmina.errors import AgentError, MminaError
from mmina.observations.observation import Observation
from mmina.stepeval.steps import StepEvalError
from mmina.store import Store
from mmina.tasks.task import Task


class StepOpenAIAgent(OpenAIAgent):
    """The ``openai`` agent with the history set from the store instead of its own replies."""

    @property
    def needs_screenshot(self) -> bool:
        return self.settings.input_mode == "multimodal"

    def set_history(self, actions: Sequence[str]) -> None:
        self._history = list(actions)


def make_step_agent(spec: str, settings: AgentSettings, history: int, store: Store | None = None) -> Agent:
    """``openai`` or ``module:Class``; scripted built-ins (oracle, replay, human) cannot predict a step."""
    if spec == "openai":
        if history > HISTORY_ACTIONS:
            raise StepEvalError(
                f"the openai agent shows at most {HISTORY_ACTIONS} previous actions: "
                f"use --history 0..{HISTORY_ACTIONS}"
            )
        return StepOpenAIAgent.from_settings(settings, store)
    if spec in BUILTIN_AGENTS:
        raise StepEvalError(
            f"the {spec} agent follows a script and cannot predict single steps: "
            "use --agent openai or --agent module:Class"
        )
    return make_agent(spec, settings, store)


def needs_screenshot(agent: Agent) -> bool:
    return bool(getattr(agent, "needs_screenshot", False))


@dataclass(frozen=True)
class Prediction:
    """The agent's reply to one step and how long it took."""

    reply: AgentReply
    agent_ms: float


def predict(agent: Agent, task: Task, history: list[str], observation: Observation) -> Prediction:
    """Ask the agent once; endpoint failures raise :class:`AgentError`, other agent bugs too."""
    started = time.perf_counter()
    try:
        agent.reset(task)
        set_history = getattr(agent, "set_history", None)
        if callable(set_history):
            set_history(history)
        reply = agent.act(observation)
    except MminaError:
        raise
    except Exception as exc:  # a user's agent failing leaves this step unscored, not the command
        raise AgentError(f"agent failed: {type(exc).__name__}: {exc}") from exc
    reply = reply if isinstance(reply, AgentReply) else AgentReply(output=str(reply))
    return Prediction(reply, (time.perf_counter() - started) * 1e3)
