"""Procedural memory (``--memory K``): the K most relevant earlier trajectories, put in the prompt.

Which episodes count as *earlier*: committed episodes that ended before the agent was created,
did not end in an error and have at least one step. The recorder creates its agents after it
opens the run and before the run's first episode, so these are the episodes of earlier runs:
the episodes of the run being recorded never feed each other, and the results do not depend on
the task order or the number of workers. An earlier run's attempt at the very same task counts
(and ranks first by similarity): a task seen before is what procedural memory helps with most.
With ``--resume``, the episodes the run finished before it was interrupted count as earlier.

The family of a task is its suite folder (``normal``, ``multi567``, ...); when the family has
fewer than K earlier trajectories, the best of the other suites fill up. Ranking is by recency
(``episodes.ended_at``, newest first) or by similarity (token Jaccard of the intents: cheap,
deterministic, no model), ties broken by recency and then by episode id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from mmina.store import Store
from mmina.tasks.task import Task

RANKINGS = ("similarity", "recency")
HEADING = (
    "Earlier trajectories of similar tasks (the element ids were those of the pages back then; "
    "use them as a guide to the procedure, not as ids to click now):"
)
_EPISODE_COLUMNS = [
    "run_id",
    "episode_id",
    "task_id",
    "status",
    "stop_reason",
    "final_answer",
    "n_steps",
    "n_hops",
    "live_hops",
    "ended_at",
]
_FROM_EPISODE = (
    "run_id",
    "episode_id",
    "task_id",
    "stop_reason",
    "final_answer",
    "n_steps",
    "n_hops",
    "live_hops",
    "ended_at",
)
"""The fields of a :class:`Trajectory` its episode's row holds as they are."""
_STEP_COLUMNS = ["episode_id", "step_index", "url", "action", "action_error"]


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """An earlier episode as memory sees it (its steps are read only once it is chosen)."""

    run_id: str
    episode_id: str
    task_id: str
    suite: str
    intent: str
    stop_reason: str
    final_answer: str | None
    n_steps: int
    n_hops: int
    live_hops: int
    ended_at: datetime


@dataclass(frozen=True)
class MemoryLimits:
    """Size caps that keep the memory a small part of the prompt."""

    max_actions: int = 20
    max_line_chars: int = 160
    max_chars: int = 8000


class TrajectoryMemory:
    """Chooses and renders earlier trajectories for each task, from a snapshot of the store."""

    def __init__(
        self,
        store: Store | None,
        k: int,
        by: str = "similarity",
        limits: MemoryLimits = MemoryLimits(),
        cutoff: datetime | None = None,
        exclude_run: str | None = None,
    ) -> None:
        self.store, self.k, self.by, self.limits = store, k, by, limits
        self.cutoff = cutoff or datetime.now(UTC)
        self.exclude_run = exclude_run
        self._candidates: list[Trajectory] | None = None
        self._steps_by_run: dict[str, dict[str, list[dict]]] = {}

    def prompt_section(self, task: Task) -> str:
        """The rendered trajectories for this task; empty when the store holds none.

        Earlier runs' attempts at the very same task count (the paper's memory across
        epochs); the run being recorded does not (a resumed run must not see itself).
        """
        others = [t for t in self.candidates() if t.run_id != self.exclude_run]
        chosen = rank(others, task, self.k, self.by)
        if not chosen:
            return ""
        return render(chosen, [self._steps(t) for t in chosen], self.limits)

    def candidates(self) -> list[Trajectory]:
        """Every earlier trajectory, read once (episodes and tasks only: small tables)."""
        if self._candidates is None:
            self._candidates = read_candidates(self.store, self.cutoff) if self.store else []
        return self._candidates

    def _steps(self, trajectory: Trajectory) -> list[dict]:
        """The chosen episode's steps; a run's steps are read once, without the bulky columns."""
        if trajectory.run_id not in self._steps_by_run:
            self._steps_by_run[trajectory.run_id] = read_steps(self.store, trajectory.run_id)
        return self._steps_by_run[trajectory.run_id].get(trajectory.episode_id, [])


def read_candidates(store: Store, cutoff: datetime) -> list[Trajectory]:
    """Committed, non-errored episodes with steps that ended before ``cutoff``, with their task's intent."""
    tasks = {
        (r["run_id"], r["task_id"]): r
        for r in store.read("tasks", columns=["run_id", "task_id", "suite", "intent"]).to_pylist()
    }
    found = []
    for row in store.read("episodes", columns=_EPISODE_COLUMNS).to_pylist():
        task = tasks.get((row["run_id"], row["task_id"]))
        if task is None or row["status"] == "error" or not row["n_steps"] or row["ended_at"] >= cutoff:
            continue
        found.append(
            Trajectory(suite=task["suite"], intent=task["intent"], **{k: row[k] for k in _FROM_EPISODE})
        )
    return found


def read_steps(store: Store | None, run_id: str) -> dict[str, list[dict]]:
    """A run's steps grouped by episode, in step order."""
    if store is None:
        return {}
    steps = store.read("steps", run_id=run_id, columns=_STEP_COLUMNS)
    grouped: dict[str, list[dict]] = {}
    for row in steps.sort_by([("episode_id", "ascending"), ("step_index", "ascending")]).to_pylist():
        grouped.setdefault(row["episode_id"], []).append(row)
    return grouped


def rank(candidates: Sequence[Trajectory], task: Task, k: int, by: str) -> list[Trajectory]:
    """The ``k`` best: the task's own suite first, then the others, each in ranking order."""

    def key(t: Trajectory) -> tuple:
        recency = -t.ended_at.timestamp()
        return (
            (-similarity(task.intent, t.intent), recency, t.episode_id)
            if by == "similarity"
            else (recency, t.episode_id)
        )

    family = sorted((t for t in candidates if t.suite == task.suite), key=key)
    others = sorted((t for t in candidates if t.suite != task.suite), key=key)
    return (family + others)[:k]


def similarity(a: str, b: str) -> float:
    """Token Jaccard similarity of two intents (lowercased words and numbers)."""
    left, right = set(_tokens(a)), set(_tokens(b))
    return len(left & right) / len(left | right) if left | right else 0.0


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def render(trajectories: Sequence[Trajectory], steps: Sequence[list[dict]], limits: MemoryLimits) -> str:
    """The memory section of the system prompt, whole trajectories only while they fit ``max_chars``."""
    text = HEADING
    for number, (trajectory, rows) in enumerate(zip(trajectories, steps), start=1):
        block = render_trajectory(number, trajectory, rows, limits)
        if len(text) + len(block) + 1 > limits.max_chars:
            return text if number > 1 else f"{text}\n{block}"[: limits.max_chars]
        text = f"{text}\n{block}"
    return text


def render_trajectory(number: int, trajectory: Trajectory, rows: list[dict], limits: MemoryLimits) -> str:
    """Intent, the actions with the page each was taken on, and the outcome, in a few lines."""
    lines = [
        f"Trajectory {number} (task {trajectory.task_id}, run {trajectory.run_id}, {trajectory.n_steps} steps):",
        f"  Objective: {_clip(trajectory.intent, limits.max_line_chars * 2)}",
        "  Actions:",
    ]
    shown = rows if len(rows) <= limits.max_actions else [*rows[: limits.max_actions - 1], None, rows[-1]]
    for row in shown:
        if row is None:
            lines.append(f"    ... ({len(rows) - limits.max_actions} more steps)")
        else:
            lines.append("    " + _clip(_action_line(row), limits.max_line_chars))
    lines.append(f"  Outcome: {_outcome(trajectory)}")
    return "\n".join(lines)


def _action_line(row: dict) -> str:
    url = urlsplit(row["url"] or "")
    page = f"{url.netloc}{url.path}" + (f"?{url.query}" if url.query else "")
    action = row["action"] or "(unparsable output)"
    failed = f" -> failed: {row['action_error']}" if row["action_error"] and row["action"] else ""
    return f"{row['step_index'] + 1}. {action} (on {page}){failed}"


def _outcome(trajectory: Trajectory) -> str:
    answer = f'answer "{trajectory.final_answer}"' if trajectory.final_answer is not None else "no answer"
    return (
        f"ended by {trajectory.stop_reason}, {trajectory.live_hops}/{trajectory.n_hops} hops reached "
        f"(live URL tracking), {answer}"
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
