"""Reference steps: which stored steps count, a seeded sample of them, and each step's
observation rebuilt exactly as the agent saw it when it was recorded.

A step is a reference when its episode succeeded (status ``completed``, every hop completed
by live tracking, and the final answer passes the task's string references, the recorder's
live verdict) — or, with ``all_steps``, any step — and it has a parsed action.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from mmina.errors import SEE_EPISODES, MminaError, not_found
from mmina.observations.observation import Observation, PageImage, Tab, elements_from_tree
from mmina.store import Store
from mmina.store.marks import marked_screenshot
from mmina.tasks.answers import answer_verdict
from mmina.tasks.task import Task, task_from_row

STEP_COLUMNS = [
    "episode_id",
    "step_index",
    "url",
    "title",
    "tabs",
    "active_tab",
    "tree_text",
    "screenshot",
    "screenshot_som",
    "marks",
    "images",
    "action",
    "model_output",
    "live_hops",
]
RECORDED_ACTIONS = "recorded_actions"
"""Task JSON key (an mmina extension): the demonstration's actions as text, by position, for
positions the episode does not store (imported single-step episodes)."""
NO_ACTION = "(a reply without a valid action)"


class StepEvalError(MminaError):
    """Step-level evaluation cannot run as asked (unknown run, nothing to evaluate, bad options)."""


@dataclass(frozen=True, kw_only=True)
class ReferenceStep:
    """One stored step to predict, with what is needed to rebuild its observation."""

    run_id: str
    episode_id: str
    task: Task
    step_index: int
    n_steps: int
    row: dict[str, Any]
    previous_actions: tuple[str, ...]
    blob_packs: tuple[str, ...]

    @property
    def key(self) -> tuple[str, int]:
        return self.episode_id, self.step_index

    @property
    def action(self) -> str:
        return self.row["action"]

    @property
    def website(self) -> str:
        """The step URL's host; for imported steps without a URL, the task's first site keyword."""
        host = urlsplit(self.row["url"] or "").hostname
        return host or (self.task.hops[0].keyword if self.task.hops else "")

    @property
    def has_screenshot(self) -> bool:
        return bool(self.row["screenshot"] or self.row["screenshot_som"])

    def history(self, k: int) -> list[str]:
        return list(self.previous_actions[-k:]) if k > 0 else []


def episode_succeeded(row: dict[str, Any], task: Task) -> bool:
    """The recorder's live verdict: completed, every hop reached, the answer not wrong."""
    return (
        row["status"] == "completed"
        and row["live_hops"] == row["n_hops"]
        and answer_verdict(task, row["final_answer"]) is not False
    )


def load_reference_steps(
    store: Store, run_id: str, all_steps: bool = False, episodes: Sequence[str] = ()
) -> list[ReferenceStep]:
    """Every reference step of the run, in (episode start, step) order."""
    run_id = store.resolve_run(run_id)
    tasks = _tasks(store, run_id)
    rows = store.read("episodes", run_id=run_id).sort_by(
        [("started_at", "ascending"), ("episode_id", "ascending")]
    )
    chosen = [e for e in rows.to_pylist() if not episodes or e["episode_id"] in episodes]
    missing = set(episodes) - {e["episode_id"] for e in chosen}
    if missing:
        raise StepEvalError(
            not_found(
                "episode",
                sorted(missing)[0],
                f"run {run_id}",
                [e["episode_id"] for e in rows.to_pylist()],
                SEE_EPISODES,
            )
        )
    if not all_steps:
        chosen = [e for e in chosen if episode_succeeded(e, tasks[e["task_id"]])]
    steps = _steps(store, run_id, [e["episode_id"] for e in chosen])
    return [
        ref
        for e in chosen
        for ref in _episode_steps(run_id, e, tasks[e["task_id"]], steps.get(e["episode_id"], []))
    ]


def _tasks(store: Store, run_id: str) -> dict[str, Task]:
    rows = store.read("tasks", run_id=run_id, columns=["task_id", "original_json", "task_sha256"]).to_pylist()
    return {r["task_id"]: task_from_row(r) for r in rows}


def _steps(store: Store, run_id: str, episode_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    table = store.read("steps", run_id=run_id, columns=STEP_COLUMNS)
    table = table.filter(pc.is_in(table.column("episode_id"), pa.array(episode_ids, pa.string())))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in table.sort_by([("episode_id", "ascending"), ("step_index", "ascending")]).to_pylist():
        grouped.setdefault(row["episode_id"], []).append(row)
    return grouped


def _episode_steps(
    run_id: str, episode: dict[str, Any], task: Task, rows: list[dict[str, Any]]
) -> list[ReferenceStep]:
    """The episode's steps with a parsed action, each with the actions recorded before it."""
    stored = {r["step_index"]: r["action"] or NO_ACTION for r in rows}
    demo = [str(a) for a in task.original.get(RECORDED_ACTIONS) or []]
    packs = tuple(episode["blob_packs"] or ())
    return [
        ReferenceStep(
            run_id=run_id,
            episode_id=episode["episode_id"],
            task=task,
            step_index=r["step_index"],
            n_steps=episode["n_steps"],
            row=r,
            previous_actions=tuple(_previous(r["step_index"], stored, demo)),
            blob_packs=packs,
        )
        for r in rows
        if r["action"]
    ]


def _previous(step_index: int, stored: dict[int, str], demo: list[str]) -> list[str]:
    """Actions before ``step_index``: the stored step's action, else the task's recorded one."""
    return [stored[j] if j in stored else demo[j] for j in range(step_index) if j in stored or j < len(demo)]


def sample(steps: list[ReferenceStep], n: int | None, seed: int) -> list[ReferenceStep]:
    """``n`` steps drawn with ``random.Random(seed)`` (all when None), kept in stored order."""
    if n is None or n >= len(steps):
        return list(steps)
    chosen = set(random.Random(seed).sample(range(len(steps)), n))
    return [s for i, s in enumerate(steps) if i in chosen]


def observation(step: ReferenceStep, blobs: dict[str, bytes]) -> Observation:
    """The observation as recorded: tree, elements, tabs, images, screenshots, the task's intent."""
    row = step.row
    return Observation(
        step_index=step.step_index,
        url=row["url"] or "",
        title=row["title"] or "",
        tabs=[Tab(t["url"] or "", t["title"] or "") for t in row["tabs"] or []],
        active_tab=row["active_tab"] or 0,
        tree_text=row["tree_text"] or "",
        elements=elements_from_tree(row["tree_text"] or ""),
        screenshot=blobs.get(row["screenshot"] or ""),
        intent=step.task.intent,
        screenshot_som=marked_screenshot(
            blobs.get(row["screenshot_som"] or ""), blobs.get(row["screenshot"] or ""), row["marks"]
        ),
        images=[
            PageImage(
                src=i["src"] or "",
                alt=i["alt"] or "",
                x=i["x"],
                y=i["y"],
                width=i["width"],
                height=i["height"],
                caption=i["caption"] or "",
            )
            for i in row["images"] or []
        ],
    )


def screenshots(store: Store, steps: Sequence[ReferenceStep]) -> dict[str, bytes]:
    """The screenshot blobs of ``steps``, read from their episodes' packs."""
    digests = sorted({d for s in steps for d in (s.row["screenshot"], s.row["screenshot_som"]) if d})
    packs = sorted({p for s in steps for p in s.blob_packs})
    return store.read_blobs(digests, packs) if digests else {}
