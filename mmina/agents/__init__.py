"""Agents: the protocol, the built-ins and the registry that makes them from ``--agent``.

Importing this package loads only the protocol and the oracle (no model client, no store):
``from mmina.agents import AgentReply`` is what a user's own agent needs.
"""
from mmina.agents.oracle import OracleAgent, script_action
from mmina.agents.protocol import Agent, AgentReply, Handover, ScriptEnd, uses_marks

__all__ = ["Agent", "AgentReply", "Handover", "OracleAgent", "ScriptEnd", "script_action", "uses_marks"]
