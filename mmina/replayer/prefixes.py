"""Where a hop-conditioned episode hands over: each task's reference episode and its prefix.

``mmina record --prefix-run REF --at-hop K`` starts the agent under test at hop K of each task
from the state REF's episode of the task had reached there. *The start of hop K* comes from
REF's ``hops`` verdicts (the latest ``hops`` batch of the episode in ``scores``): hop K-1's row
names the step that completed it (``completed_step``), and the agent takes over on that step's
page, after the reference's actions before it have been replayed. The verdicts, not live
tracking (``episodes.hop_steps``), because they are what analysis counts: live tracking only
sees a site keyword in a URL, and credits hops the verdicts do not (a prefix it called correct
could have missed the page the hop asks for). A reference episode whose verdicts did not pass
hops 1 .. K-1 cannot give a correct prefix, and is skipped with that reason.

``--at-step N`` hands over after the reference's first N actions instead, wherever that is:
the hops the reference's verdicts completed by step N are given, the next one is the agent's.

Each task's reference is the run's latest finished episode of it (a resumed run may hold
several). Everything here reads the store; nothing touches a browser.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from mmina.actions.grammar import ActionKind
from mmina.errors import StoreError
from mmina.replayer.fidelity import StepView
from mmina.replayer.source import Source, by_episode
from mmina.store import Store
from mmina.tasks.task import Task

PREFIX_EVALUATOR = "hops"
"""Whose verdicts say where each hop of the reference started."""
STEP_COLUMNS = ["episode_id", "step_index", "url", "tree_text", "action", "action_kind", "model_output"]
EPISODE_COLUMNS = [
    "episode_id",
    "task_id",
    "started_at",
    "ended_at",
    "blob_packs",
    "n_steps",
    "final_url",
    "final_tree_text",
    "hops_given",
    "random_seeding",
]


@dataclass(frozen=True)
class PrefixSpec:
    """Where the agents take over: at hops (1-based; ``every_hop``: one episode per hop of each
    task) or after a number of the reference's steps."""

    run_id: str
    hops: tuple[int, ...] = ()
    every_hop: bool = False
    step: int | None = None

    def __post_init__(self) -> None:
        if (bool(self.hops) or self.every_hop) == (self.step is not None):
            raise StoreError("say where the agent takes over: --at-hop K (or all) or --at-step N, not both")
        if any(k < 1 for k in self.hops) or (self.step is not None and self.step < 0):
            raise StoreError("--at-hop counts hops from 1 and --at-step steps from 0")

    def describe(self) -> dict[str, Any]:
        """The spec as the run's configuration records it."""
        at = (
            {"at_step": self.step}
            if self.step is not None
            else {"at_hop": "all" if self.every_hop else list(self.hops)}
        )
        return {"prefix_run": self.run_id, **at, "prefix_evaluator": PREFIX_EVALUATOR}


@dataclass(frozen=True, kw_only=True)
class Prefix:
    """One hop-conditioned episode to record: the reference's first ``steps`` actions, replayed
    from its archive, then the agent takes over on the page of step ``steps``."""

    task_id: str
    source: Source
    start_hop: int
    """The first hop the agent must do (0-based); the hops before it are given."""
    given: tuple[int, ...]
    """The reference step that completed each given hop (by its ``hops`` verdicts)."""
    actions: tuple[str, ...]
    """The reference's actions (the parsed action, else its raw output) of steps 0 .. steps-1."""
    urls: tuple[str, ...]
    """The page each of ``actions`` was taken on."""
    expected: tuple[StepView | None, ...] = field(repr=False)
    """The reference's observations of steps 0 .. steps (the last is the page handed over; None
    where the store does not know it)."""

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def key(self) -> tuple[str, int, int]:
        """What makes it one episode of a conditioned run (and what ``--resume`` skips)."""
        return self.task_id, self.start_hop, self.steps


@dataclass(frozen=True)
class Skipped:
    """A task (and hop) that gets no conditioned episode, and why."""

    task_id: str
    hop: int | None
    """The 1-based hop asked for (None with ``--at-step``)."""
    reason: str


@dataclass(frozen=True)
class Reference:
    """What the plan needs of one reference episode: its row, steps and ``hops`` verdicts."""

    row: Mapping[str, Any]
    steps: list[dict[str, Any]]
    completed: dict[int, int] | None
    """Hop index -> the step that completed it (passed hops only); None: no verdicts."""


def plan_prefixes(
    store: Store, spec: PrefixSpec, tasks: Mapping[str, Task], max_steps: int
) -> tuple[list[Prefix], list[Skipped]]:
    """One prefix per selected task and hop (or step), and the ones that cannot be given."""
    references = read_references(store, spec.run_id, set(tasks))
    prefixes: list[Prefix] = []
    skipped: list[Skipped] = []
    for task_id, task in tasks.items():
        for hop in _hops_asked(spec, task):
            reference = references.get(task_id)
            found = (
                _prefix(task, reference, spec, hop, max_steps)
                if reference
                else f"run {spec.run_id} has no finished episode of it"
            )
            if isinstance(found, Prefix):
                prefixes.append(found)
            else:
                skipped.append(Skipped(task_id, hop, found))
    return prefixes, skipped


def _hops_asked(spec: PrefixSpec, task: Task) -> Iterable[int | None]:
    """The 1-based hops asked of this task (one None for ``--at-step``)."""
    if spec.step is not None:
        return [None]
    return range(1, task.n_hops + 1) if spec.every_hop else spec.hops


def _prefix(
    task: Task, reference: Reference, spec: PrefixSpec, hop: int | None, max_steps: int
) -> Prefix | str:
    """The prefix of ``reference`` that hands over at ``hop`` (or ``spec.step``), or why there is none."""
    if reference.row.get("hops_given") is not None:
        return "its reference episode is itself hop-conditioned"
    if reference.completed is None:
        return (
            f"its reference episode has no {PREFIX_EVALUATOR} verdicts (run `mmina rescore --evaluator "
            f"{PREFIX_EVALUATOR} --run {spec.run_id}`)"
        )
    if spec.step is not None and spec.step > len(reference.steps):
        return (
            f"its reference episode has only {len(reference.steps)} step(s), fewer than the {spec.step} asked"
        )
    given = _given(task, reference.completed, hop, spec.step)
    if isinstance(given, str):
        return given
    steps = spec.step if spec.step is not None else (given[-1] if given else 0)
    return _checked(task, reference, given, steps, max_steps)


def _given(task: Task, completed: dict[int, int], hop: int | None, step: int | None) -> tuple[int, ...] | str:
    """The steps of the hops the prefix gives, or why it cannot give them."""
    if hop is not None:
        if hop > task.n_hops:
            return f"the task has {task.n_hops} hop(s), no hop {hop}"
        missing = [i + 1 for i in range(hop - 1) if i not in completed]
        if missing:
            return (
                f"its reference episode did not pass hop {missing[0]} (by its {PREFIX_EVALUATOR} verdicts), "
                f"so it cannot give a correct prefix up to hop {hop}"
            )
        return tuple(completed[i] for i in range(hop - 1))
    given: list[int] = []
    while len(given) in completed and completed[len(given)] <= (step or 0):
        given.append(completed[len(given)])
    if len(given) >= task.n_hops:
        return f"its reference episode had completed every hop by step {step}: nothing is left to do"
    return tuple(given)


def _checked(
    task: Task, reference: Reference, given: tuple[int, ...], steps: int, max_steps: int
) -> Prefix | str:
    """The prefix of ``steps`` steps, unless the reference cannot give it or the budget has no room."""
    recorded = reference.steps
    if steps > len(recorded):  # verdicts naming a step the episode does not have (a damaged store)
        return f"its reference's {PREFIX_EVALUATOR} verdicts name step {steps}, past its last step"
    if steps >= max_steps:
        return f"the prefix has {steps} step(s): no step of the --max-steps {max_steps} budget is left for the agent"
    stop = next(
        (r["step_index"] for r in recorded[:steps] if r["action_kind"] == ActionKind.STOP.value), None
    )
    if stop is not None:
        return f"its reference episode stopped at step {stop}, inside the prefix"
    row = reference.row
    expected: list[StepView | None] = [StepView.from_row(r) for r in recorded[: steps + 1]]
    if steps == len(recorded):  # handed over on the terminal page (the last action reached the hop)
        expected.append(
            StepView(steps, row["final_url"], row["final_tree_text"], None)
            if row.get("final_url") is not None
            else None
        )
    source = Source(
        row["episode_id"],
        row["task_id"],
        row["started_at"],
        tuple(row["blob_packs"] or ()),
        random_seeding=row["random_seeding"],
    )
    return Prefix(
        task_id=task.task_id,
        source=source,
        start_hop=len(given),
        given=given,
        actions=tuple(r["action"] or r["model_output"] or "" for r in recorded[:steps]),
        urls=tuple(r["url"] or "" for r in recorded[:steps]),
        expected=tuple(expected),
    )


def read_references(store: Store, run_id: str, task_ids: set[str]) -> dict[str, Reference]:
    """Each task's latest finished episode in ``run_id`` (an existing run's id), with its steps
    and ``hops`` verdicts."""
    episodes = store.read("episodes", run_id=run_id, columns=EPISODE_COLUMNS)
    latest = {
        row["task_id"]: row for row in episodes.sort_by("ended_at").to_pylist() if row["task_id"] in task_ids
    }
    chosen = {row["episode_id"] for row in latest.values()}
    steps = by_episode(store, "steps", run_id, "step_index", chosen, STEP_COLUMNS)
    verdicts = completed_hops(store, run_id, chosen)
    return {
        task_id: Reference(row, steps.get(row["episode_id"], []), verdicts.get(row["episode_id"]))
        for task_id, row in latest.items()
    }


def completed_hops(store: Store, run_id: str, episodes: set[str]) -> dict[str, dict[int, int]]:
    """Episode -> {hop index (0-based): completing step} of the passed hops in its latest ``hops``
    batch (an episode with no such batch is absent)."""
    scores = store.read(
        "scores",
        run_id=run_id,
        columns=[
            "episode_id",
            "evaluator",
            "level",
            "hop",
            "verdict",
            "detail_json",
            "batch_id",
            "scored_at",
        ],
    )
    scores = scores.filter(pc.equal(scores.column("evaluator"), PREFIX_EVALUATOR))
    latest: dict[str, tuple[Any, str]] = {}
    rows = scores.sort_by([("scored_at", "ascending"), ("batch_id", "ascending")]).to_pylist()
    for row in rows:
        if row["episode_id"] in episodes:
            latest[row["episode_id"]] = (row["scored_at"], row["batch_id"])
    found: dict[str, dict[int, int]] = {episode: {} for episode in latest}
    for row in rows:
        if (
            latest.get(row["episode_id"], (None, None))[1] == row["batch_id"]
            and row["level"] == "hop"
            and row["verdict"] == "pass"
        ):
            step = _completed_step(row["detail_json"])
            if step is not None:
                found[row["episode_id"]][row["hop"] - 1] = step
    return found


def _completed_step(detail_json: str | None) -> int | None:
    try:
        step = json.loads(detail_json or "{}").get("completed_step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
