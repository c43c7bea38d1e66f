"""Creating agents from the ``--agent`` option and the settings that go with it."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from mmina.agents import Agent, OracleAgent
from mmina.errors import AgentError
from mmina.recorder.human import HumanAgent
from mmina.recorder.llm import OpenAIAgent
from mmina.recorder.replay import ReplayAgent


@dataclass(frozen=True)
class AgentSettings:
    """Everything an agent may be configured with (picklable, so workers can rebuild it)."""

    store: str = ""
    run_id: str | None = None
    from_episode: str | None = None
    from_run: str | None = None
    model: str | None = None
    base_url: str | None = None
    input_mode: str = "text"
    memory: int = 0
    memory_by: str = "similarity"
    temperature: float = 0.0
    max_tokens: int = 1024
    price_input: float = 0.0
    price_output: float = 0.0
    max_retries: int = 4
    captioner: str = "none"
    caption_model: str | None = None


AgentFactory = Callable[[AgentSettings], Agent]

BUILTIN_AGENTS: dict[str, AgentFactory] = {
    "oracle": lambda settings: OracleAgent(),
    "replay": ReplayAgent.from_settings,
    "openai": OpenAIAgent.from_settings,
    "human": HumanAgent.from_settings,
}


def make_agent(spec: str, settings: AgentSettings | None = None) -> Agent:
    """A built-in agent by name, or ``package.module:Class`` (instantiated without arguments)."""
    settings = settings or AgentSettings()
    if spec in BUILTIN_AGENTS:
        return BUILTIN_AGENTS[spec](settings)
    if ":" not in spec:
        known = ", ".join(sorted(BUILTIN_AGENTS))
        raise AgentError(f"unknown agent {spec!r}: use one of {known}, or module:Class for your own")
    return _user_agent(spec)


def _user_agent(spec: str) -> Agent:
    module_name, _, class_name = spec.partition(":")
    try:
        agent = getattr(importlib.import_module(module_name), class_name)()
    except (ImportError, AttributeError) as exc:
        raise AgentError(f"cannot load agent {spec}: {exc}") from None
    if not callable(getattr(agent, "act", None)):
        raise AgentError(f"agent {spec} has no act(observation) method")
    if not hasattr(agent, "reset"):
        agent.reset = lambda task: None
    if not hasattr(agent, "name"):
        agent.name = spec
    return agent
