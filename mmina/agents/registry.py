"""Creating agents from the ``--agent`` option: the built-ins by name, or ``module:Class``."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

from mmina.agents.heuristic import HeuristicAgent
from mmina.agents.human import HumanAgent
from mmina.agents.llm import OpenAIAgent
from mmina.agents.oracle import OracleAgent
from mmina.agents.protocol import Agent
from mmina.agents.settings import AgentSettings
from mmina.agents.stored_actions import ReplayAgent
from mmina.errors import AgentError, first_line, not_found
from mmina.store import Store

AgentFactory = Callable[[AgentSettings, Store | None], Agent]

BUILTIN_AGENTS: dict[str, AgentFactory] = {
    "oracle": lambda settings, store: OracleAgent(settings.error_rate, settings.seed or 0),
    "heuristic": lambda settings, store: HeuristicAgent(),
    "replay": ReplayAgent.from_settings,
    "openai": OpenAIAgent.from_settings,
    "human": lambda settings, store: HumanAgent.from_terminal(),
}
INTERACTIVE_AGENTS = frozenset({"human"})
"""Agents that read the terminal: one episode at a time."""


def make_agent(spec: str, settings: AgentSettings | None = None, store: Store | None = None) -> Agent:
    """A built-in agent by name, or ``package.module:Class`` (instantiated without arguments).

    ``store`` is the open store agents may read (memory, the replay agent); None when there is
    none yet.
    """
    settings = settings or AgentSettings()
    if spec in BUILTIN_AGENTS:
        return BUILTIN_AGENTS[spec](settings, store)
    if ":" not in spec:
        known = sorted(BUILTIN_AGENTS)
        raise AgentError(
            not_found(
                "agent",
                spec,
                None,
                known,
                listing=f"agents: {', '.join(known)}, or module:Class for your own",
            )
        )
    return _user_agent(spec)


def _what(value: object) -> str:
    """What a name refers to, as a message says it: a module, a function, else the value's type."""
    if isinstance(value, types.ModuleType):
        return "a module"
    return "a function" if callable(value) else f"a value of type {type(value).__name__}"


def _user_agent(spec: str) -> Agent:
    module_name, _, class_name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise AgentError(f"cannot load agent {spec}: {first_line(exc)}") from None
    if not isinstance(found, type):
        raise AgentError(
            f"agent {spec} is {_what(found)}, not a class: name your agent class "
            "(package.module:Class, instantiated without arguments)"
        )
    try:
        agent = found()
    except Exception as exc:  # noqa: BLE001 - the user's own code failed: one line, never a traceback
        raise AgentError(f"cannot create agent {spec}: {type(exc).__name__}: {first_line(exc)}") from None
    if not callable(getattr(agent, "act", None)):
        raise AgentError(f"agent {spec} has no act(observation) method")
    try:
        if not hasattr(agent, "reset"):
            agent.reset = lambda task: None
        if not hasattr(agent, "name"):
            agent.name = spec
    except (AttributeError, TypeError):
        raise AgentError(
            f"agent {spec} is not an object mmina can use: give a class with act(observation)"
        ) from None
    return agent
