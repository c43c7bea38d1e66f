"""Creating agents from the ``--agent`` option."""
from __future__ import annotations

import importlib

from mmina.agents import Agent, OracleAgent
from mmina.errors import AgentError

BUILTIN_AGENTS = {"oracle": OracleAgent}


def make_agent(spec: str) -> Agent:
    """``oracle``, or ``package.module:Class`` for a user's own agent (instantiated without arguments)."""
    if spec in BUILTIN_AGENTS:
        return BUILTIN_AGENTS[spec]()
    if ":" not in spec:
        known = ", ".join(sorted(BUILTIN_AGENTS))
        raise AgentError(f"unknown agent {spec!r}: use one of {known}, or module:Class for your own")
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
