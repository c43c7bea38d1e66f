"""The ``replay`` agent: the actions of stored episodes, step by step, on a live or archived web."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow.compute as pc

from mmina.actions.grammar import ActionParseError, parse_action
from mmina.agents.protocol import AgentReply, ScriptEnd
from mmina.agents.settings import AgentSettings
from mmina.errors import AgentError
from mmina.observations.observation import Observation, counterpart
from mmina.store import Store
from mmina.tasks.task import Task


@dataclass(frozen=True)
class StoredStep:
    """A stored step's action (the parsed one, else the raw output, so parse errors repeat too)
    and the tree its ids refer to (empty for a raw output: it is sent as stored)."""

    action: str
    tree_text: str = ""


def stored_steps(rows: Iterable[Mapping[str, Any]]) -> list[StoredStep]:
    """The replayable steps of stored step rows (``action``, ``model_output``, ``tree_text``), in order."""
    return [
        StoredStep(r["action"], r.get("tree_text") or "")
        if r["action"]
        else StoredStep(r.get("model_output") or "")
        for r in rows
    ]


def aimed(step: StoredStep, observation: Observation) -> str:
    """The stored action, its element id replaced by the id the same element has now.

    An id is looked up in the tree it was chosen from, and the element with that role and
    name (the n-th such) found in the current observation: so an episode stored with ids
    of another scheme (first-seen numbers, before ids were derived from elements) reaches the
    same elements. Where there is nothing to look up, the action goes as stored.
    """
    try:
        action = parse_action(step.action)
    except ActionParseError:
        return step.action
    if action.element_id is None or not step.tree_text:
        return step.action
    element = counterpart(step.tree_text, action.element_id, observation.elements)
    if element is None or element.id == action.element_id:
        return step.action
    return replace(action, element_id=element.id).render()


class ReplayAgent:
    """Replays the stored actions (or, for unparsable steps, the raw output) of earlier episodes.

    With ``--from-run`` each task replays that run's episode of the same task; with
    ``--from-episode`` every task replays that one episode.
    """

    name = "replay"
    uses_marks = False

    def __init__(
        self, actions_by_task: dict[str, list[StoredStep]], only: list[StoredStep] | None = None
    ) -> None:
        self.actions_by_task, self.only = actions_by_task, only
        self._queue: list[StoredStep] = []

    @classmethod
    def from_settings(cls, settings: AgentSettings, store: Store | None) -> ReplayAgent:
        if not (settings.from_episode or settings.from_run):
            raise AgentError("the replay agent needs --from-episode ID or --from-run RUN")
        if store is None:
            raise AgentError("the replay agent reads its actions from a store, and there is none")
        from_run = store.resolve_run(settings.from_run) if settings.from_run else None
        steps = store.read(
            "steps",
            run_id=from_run,
            columns=["episode_id", "step_index", "action", "model_output", "tree_text"],
        )
        if settings.from_episode:
            steps = steps.filter(pc.equal(steps.column("episode_id"), settings.from_episode))
        if not steps.num_rows:
            source = f"episode {settings.from_episode}" if settings.from_episode else f"run {from_run}"
            raise AgentError(f"{source} has no stored steps in {store.root}")
        rows: dict[str, list[dict[str, Any]]] = {}
        for row in steps.sort_by([("episode_id", "ascending"), ("step_index", "ascending")]).to_pylist():
            rows.setdefault(row["episode_id"], []).append(row)
        actions = {episode: stored_steps(episode_rows) for episode, episode_rows in rows.items()}
        if settings.from_episode:
            return cls({}, actions[settings.from_episode])
        return cls(
            {
                task: actions[episode]
                for task, episode in _latest_episodes(store, from_run).items()
                if episode in actions
            }
        )

    def reset(self, task: Task) -> None:
        if self.only is not None:
            self._queue = list(self.only)
        elif task.task_id in self.actions_by_task:
            self._queue = list(self.actions_by_task[task.task_id])
        else:
            raise AgentError(f"the replayed run has no episode of task {task.task_id}")

    def act(self, observation: Observation) -> AgentReply:
        if not self._queue:
            raise ScriptEnd()
        return AgentReply(output=aimed(self._queue.pop(0), observation))


def _latest_episodes(store: Store, run_id: str | None) -> dict[str, str]:
    """Task id → the run's most recently finished episode of it (a resumed run may hold several)."""
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id", "task_id", "ended_at"])
    latest: dict[str, str] = {}
    for row in episodes.sort_by("ended_at").to_pylist():
        latest[row["task_id"]] = row["episode_id"]
    return latest
