"""The ``oracle`` agent: a task's reference script, played on the live observation."""

from __future__ import annotations

from random import Random
from typing import Any

from mmina.actions.grammar import Action, ActionKind
from mmina.agents.protocol import AgentReply, Handover, ScriptEnd
from mmina.errors import AgentError
from mmina.observations.observation import Observation
from mmina.tasks.task import Task

MISSTEP = "scroll [down]"
"""What a noisy oracle does instead of the script's step it drops (``--error-rate``)."""


class OracleAgent:
    """Follows a task's ``reference_script``, resolving role+name targets in the observation.

    It reads the same observation any agent gets, so a script that names an element not on
    the page produces an action error, exactly as a model would.

    With ``error_rate`` P it is a *noisy* oracle, an agent of chosen skill: at each step, with
    probability P, it drops the script's step and scrolls instead (the script goes on with the
    next step, which may then miss its target). Its draws are seeded by ``seed`` and the
    episode's seed (each repeat of a task its own, ``seed_episode``), so a run is drawn again
    alike and repeats differ.
    """

    name = "oracle"
    uses_marks = False

    def __init__(self, error_rate: float = 0.0, seed: int = 0) -> None:
        self._script: list[dict[str, Any]] = []
        self._position = 0
        self.error_rate, self._seed = error_rate, seed
        self._draw = Random(seed)

    def seed_episode(self, seed: int) -> None:
        self._draw = Random((self._seed << 32) + seed)

    def reset(self, task: Task) -> None:
        if task.reference_script is None:
            raise AgentError(f"task {task.task_id} has no reference_script for the oracle agent")
        self._script, self._position = list(task.reference_script), 0

    def take_over(self, handover: Handover) -> None:
        """Go on with the script after the steps taken for it: right when the prefix is the
        oracle's own (its steps are the script's first ones, one step per entry)."""
        self._position = len(handover.actions)

    def act(self, observation: Observation) -> AgentReply:
        if self._position >= len(self._script):
            raise ScriptEnd()
        step = self._script[self._position]
        self._position += 1
        if self.error_rate and self._draw.random() < self.error_rate:
            return AgentReply(output=MISSTEP)
        return AgentReply(output=script_action(step, observation).render())


def script_action(step: dict[str, Any], observation: Observation) -> Action:
    """One reference-script step as a grammar action on the current observation."""
    kind = ActionKind(step["action"])
    element = _target_id(step, observation) if "target" in step else None
    return Action(
        kind,
        element_id=element,
        text=step.get("text", step.get("answer")),
        press_enter=bool(step.get("enter", False)),
        key=step.get("key"),
        direction=step.get("direction"),
        url=step.get("url"),
        tab_index=step.get("tab"),
    )


def _target_id(step: dict[str, Any], observation: Observation) -> str:
    target = step["target"]
    element = observation.find(target["role"], target["name"])
    if element is None:
        # An id no page shows: executing it fails and is recorded as the step's action error.
        return "missing"
    return element.id
