"""Agents: the protocol, the built-ins and the registry that makes them from ``--agent``.

``from mmina.agents import AgentReply`` is what a user's own agent needs. The names below are
imported on first use (:mod:`mmina.lazy`), so ``mmina.agents.settings`` alone stays cheap.
"""

from typing import TYPE_CHECKING

from mmina.lazy import lazy_names

if TYPE_CHECKING:
    from mmina.agents.oracle import OracleAgent, script_action
    from mmina.agents.protocol import Agent, AgentReply, Handover, ScriptEnd, uses_marks

__all__ = ["Agent", "AgentReply", "Handover", "OracleAgent", "ScriptEnd", "script_action", "uses_marks"]
__getattr__ = lazy_names(
    __name__,
    {
        "OracleAgent": "oracle",
        "script_action": "oracle",
        **dict.fromkeys(("Agent", "AgentReply", "Handover", "ScriptEnd", "uses_marks"), "protocol"),
    },
)
