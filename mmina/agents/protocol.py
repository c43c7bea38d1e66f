"""Agents choose the next action from an observation. The protocol is one method.

A user's own agent is any class with ``act(observation) -> AgentReply | str`` (and,
optionally, ``reset(task)`` called before each episode), loaded with ``--agent module:Class``.
The set-of-marks screenshot is painted while the agent thinks; an agent that never reads
``observation.screenshot_som`` may say so with ``uses_marks = False`` so nobody waits for it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mmina.observation import Observation
from mmina.tasks import Task


@dataclass(frozen=True)
class AgentReply:
    """The agent's raw output (parsed with the action grammar), what it cost, and what it asked.

    ``request`` is the exact request sent to a model for this step — the keyword arguments of
    ``chat.completions.create``: ``model``, ``messages`` (images as data URLs) and parameters —
    stored with the step (``steps.model_input``); None for agents that ask no model.
    """

    output: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    request: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)


@runtime_checkable
class Agent(Protocol):
    name: str

    def reset(self, task: Task) -> None: ...

    def act(self, observation: Observation) -> AgentReply: ...


class ScriptEnd(Exception):
    """A scripted agent has no action left (the episode ends with ``script_end``)."""


def uses_marks(agent: object) -> bool:
    """Whether ``agent`` reads ``screenshot_som`` (assumed unless it says otherwise)."""
    return bool(getattr(agent, "uses_marks", True))
