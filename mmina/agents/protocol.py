"""Agents choose the next action from an observation. The protocol is one method.

A user's own agent is any class with ``act(observation) -> AgentReply | str`` (and,
optionally, ``reset(task)`` called before each episode), loaded with ``--agent module:Class``.
The set-of-marks screenshot is painted while the agent thinks; an agent that never reads
``observation.screenshot_som`` may say so with ``uses_marks = False`` so nobody waits for it.

An agent started in the middle of a task (``mmina record --prefix-run RUN --at-hop K``: a
reference's first steps replayed, then the agent takes over) is told what was done for it by
an optional ``take_over(handover)`` (a :class:`Handover`), called once, after ``reset`` and
just before its first ``act``; an agent without it simply starts acting on the page it is given.

An agent that samples (draws at random) may take an optional ``seed_episode(seed)``, called
before each ``reset`` with a seed of the task and its repeat (``mmina record --repeats K``:
each repeat of a task gets its own, the same in every run), so repeats differ and a run can
be drawn again alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from mmina.models.model_client import token_count
from mmina.observations.observation import Observation
from mmina.tasks.task import Task
from mmina.unicode import escaped, mapped_text


@dataclass(frozen=True, kw_only=True)
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
    note: str | None = field(default=None, compare=False)
    """What the recorder should know about the reply (usage that was not believed, for one):
    stored with the step's ``action_error``."""
    endpoint_retries: int = field(default=0, compare=False)
    """Attempts of its model calls that failed for the endpoint's sake (429, 5xx, no answer)."""
    endpoint_wait_s: float = field(default=0.0, compare=False)
    """Seconds its model calls waited for the endpoint to come back: not thinking time."""


@runtime_checkable
class Agent(Protocol):
    """What the recorder drives: ``act`` may answer plain action text (a user's own agent
    often does) or an :class:`AgentReply` (text, tokens, cost, the model request)."""

    name: str

    def reset(self, task: Task) -> None: ...

    def act(self, observation: Observation) -> AgentReply | str: ...


@dataclass(frozen=True)
class Handover:
    """What an agent taking over a task in its middle is told: the steps taken for it.

    ``actions`` are the prefix's actions in order, each taken on the page at ``urls`` of the same
    position; ``start_hop`` is the hop it starts at (0-based: the hops before it are done);
    ``show_actions`` says whether it should treat them as its own earlier actions (e.g. list them
    under "previous actions" in a prompt) — False with ``--hide-prefix``.
    """

    start_hop: int
    actions: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    show_actions: bool = True


def hand_over(agent: object, handover: Handover) -> None:
    """Tell ``agent`` what was done for it, if it wants to know (its optional ``take_over``)."""
    take_over = getattr(agent, "take_over", None)
    if callable(take_over):
        take_over(handover)


def agent_seed(task_id: str, attempt: int) -> int:
    """The seed of one repeat of one task (31 bits): stable across runs, machines and Python
    processes (no ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{task_id}\0{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def seed_agent(agent: object, seed: int) -> None:
    """Hand ``agent`` its episode's seed, if it samples (its optional ``seed_episode``)."""
    seed_episode = getattr(agent, "seed_episode", None)
    if callable(seed_episode):
        seed_episode(seed)


class ScriptEnd(Exception):
    """A scripted agent has no action left (the episode ends with ``script_end``)."""


MAX_COST_USD = 10_000.0
"""More than any one step costs: a cost above it (or not a finite number) is not believed."""


def checked_reply(reply: AgentReply | str) -> AgentReply:
    """What the recorder stores of an agent's reply: plain action text (user agents may return
    it) as a reply; text escaped where no UTF-8 could hold it; token counts and cost that are
    not believable (negative, absurd, not numbers) as 0, with a note saying so; the request as a
    model client sends it (``mmina.unicode``)."""
    if not isinstance(reply, AgentReply):
        return AgentReply(output=escaped(str(reply)))
    prompt, prompt_note = token_count(reply.prompt_tokens, "prompt_tokens")
    completion, completion_note = token_count(reply.completion_tokens, "completion_tokens")
    cost, cost_note = _cost(reply.cost_usd)
    notes = [n for n in (reply.note, prompt_note, completion_note, cost_note) if n]
    return replace(
        reply,
        output=escaped(str(reply.output)),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=cost,
        note="; ".join(notes) or None,
        request=mapped_text(reply.request),
    )


def _cost(value: Any) -> tuple[float, str | None]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_COST_USD:
        return float(value), None
    return 0.0, f"cost_usd {value!r:.40} is not a cost (0..{MAX_COST_USD:g} USD): counted as 0"


def uses_marks(agent: object) -> bool:
    """Whether ``agent`` reads ``screenshot_som`` (assumed unless it says otherwise)."""
    return bool(getattr(agent, "uses_marks", True))
