"""The verdicts a recording already knows when an episode ends: the task's own and ``hops``.

Both are deterministic over the stored steps, so the recorder writes them as ordinary score
batches (one ``scores`` file per episode, each evaluator its own batch) right after the
episode is committed: ``mmina report`` works straight after ``mmina record``, and
``mmina rescore`` overrides them like any earlier batch (the latest batch per episode and
evaluator holds the current verdicts). A task whose own evaluation asks the LLM judge
(``fuzzy_match`` references) gets only the ``hops`` verdicts until it is rescored. A crash
between the commit and this write leaves the episode without them; the run's configuration
says they are due (:data:`mmina.store.runs.VERDICTS_KEY`: ``hops``, never judged), so ``store verify``
reports such an episode and ``record --resume`` writes them from the stored rows
(:func:`add_missing_verdicts`), which are the rows they would have been computed from. An
evaluator that fails on an odd task (a field of a type it did not expect) gives an ``unclear``
verdict whose detail holds the error: the episode, already committed, is never lost to its
scoring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mmina.errors import first_line
from mmina.evaluators.base import EpisodeView, Evaluator, StepView, task_score
from mmina.evaluators.batch import ScoreBatch, score_rows
from mmina.evaluators.registry import get
from mmina.store import Store
from mmina.store.inspect import unscored_episodes
from mmina.store.runs import VERDICTS_KEY
from mmina.tasks.task import Task, task_from_row

LIVE_EVALUATORS = ("task", "hops")
ALWAYS_STORED = ("hops",)
"""The live evaluators whose verdicts every committed episode gets (``task`` may need the judge)."""


def with_verdicts_due(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run configuration that says its episodes are stored with :data:`ALWAYS_STORED` verdicts."""
    return {**config, VERDICTS_KEY: list(ALWAYS_STORED)}


def step_view(row: Mapping[str, Any]) -> StepView:
    """A stored step row as evaluators see it (fields it lacks are None)."""
    fields: dict[str, Any] = {name: row.get(name) for name in StepView._fields}
    return StepView(**fields)


def episode_view(
    run_id: str, episode_id: str, task: Task, episode: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]
) -> EpisodeView:
    """The episode as evaluators see it, from the rows about to be (or just) stored."""
    views = tuple(step_view({**row, "url": row.get("url") or ""}) for row in steps)
    return EpisodeView(run_id, episode_id, task, episode, views)


def needs_judge(evaluator: Evaluator, view: EpisodeView) -> bool:
    asks = getattr(evaluator, "judge_prompts", None)
    return bool(asks and asks(view))


def verdict_rows(view: EpisodeView) -> list[dict[str, Any]]:
    """The ``scores`` rows of every live evaluator that needs no judge for this episode."""
    rows: list[dict[str, Any]] = []
    for name in LIVE_EVALUATORS:
        evaluator = get(name)
        try:
            if needs_judge(evaluator, view):
                continue
            scores = list(evaluator.score(view))
        except Exception as exc:  # noqa: BLE001 - a task field no evaluator expected: the episode is stored
            scores = [
                task_score(
                    "unclear", {"error": f"the evaluator failed: {type(exc).__name__}: {first_line(exc)}"}
                )
            ]
        rows += score_rows(view, scores, ScoreBatch.new(name, evaluator.version, evaluator.args))
    return rows


def write_verdicts(store: Store, view: EpisodeView) -> list[dict[str, Any]]:
    """Append the episode's live verdicts as one ``scores`` file named after the episode; the rows."""
    rows = verdict_rows(view)
    if rows:
        store.append("scores", rows, stem=view.episode_id, run_id=view.run_id)
    return rows


def add_missing_verdicts(store: Store, run_id: str) -> list[str]:
    """Write the live verdicts of the run's committed episodes that have none (see the
    module), from their stored rows and the run's stored tasks; the episodes scored."""
    missing = unscored_episodes(store, run_id, ALWAYS_STORED)
    if not missing:
        return []
    tasks = {row["task_id"]: task_from_row(row) for row in store.read("tasks", run_id=run_id).to_pylist()}
    episodes = {row["episode_id"]: row for row in store.read("episodes", run_id=run_id).to_pylist()}
    for episode_id in missing:
        episode = episodes[episode_id]
        steps = store.read(
            "steps", run_id=run_id, columns=list(StepView._fields), where={"episode_id": episode_id}
        )
        rows = sorted(steps.to_pylist(), key=lambda step: step["step_index"])
        write_verdicts(store, episode_view(run_id, episode_id, tasks[episode["task_id"]], episode, rows))
    return missing


SUMMARY_EVALUATOR = "hops"
"""Whose verdicts the record summary reports (the default evaluator of ``mmina report``)."""


def verdict_summary(rows: list[dict[str, Any]]) -> tuple[str | None, int | None]:
    """The ``hops`` task verdict and hops passed among the rows (None, None without them)."""
    mine = [r for r in rows if r["evaluator"] == SUMMARY_EVALUATOR]
    task = next((r["verdict"] for r in mine if r["level"] == "task"), None)
    return task, (
        sum(r["verdict"] == "pass" for r in mine if r["level"] == "hop") if task is not None else None
    )
