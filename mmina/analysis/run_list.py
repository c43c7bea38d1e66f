"""``mmina runs``: every run of a store with what a researcher looks for first — when it
started, which agent and model, how many tasks and episodes, its task and hop success (with
95% intervals) under one evaluator, and whether it is complete.

The rates are the report's overall ones (:func:`mmina.analysis.tables.sr_by_bucket`): the
latest verdict of the evaluator per task, n/a verdicts left out; a run the evaluator has not
scored shows none.
"""

from __future__ import annotations

from typing import Any

from mmina.analysis.data import query
from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.analysis.tables import Table, rate_columns, rate_values
from mmina.store import Store
from mmina.store.views import connect

RUNS_SQL = """
SELECT r.run_id, r.created_at AS started, r.agent, r.model, r.task_count,
       coalesce(e.tasks_done, 0) AS tasks_done, coalesce(e.episodes, 0) AS episodes, coalesce(e.errors, 0) AS errors,
       coalesce(e.repeats_done, 0) AS repeats_done,
       greatest(coalesce(try_cast(json_extract_string(r.config_json, '$.repeats') AS INTEGER), 1), 1) AS repeats,
       coalesce(e.endpoint_retries, 0) AS endpoint_retries, coalesce(e.endpoint_wait_s, 0) AS endpoint_wait_s,
       coalesce(s.judged, 0) AS judged, coalesce(s.passed, 0) AS passed,
       coalesce(s.hops_passed, 0) AS hops_passed, coalesce(s.hops_total, 0) AS hops_total, \
s.scored IS NOT NULL AS scored
FROM runs r
LEFT JOIN (SELECT run_id, count(*) AS episodes,
                  count(DISTINCT task_id) FILTER (WHERE current AND error_kind IS DISTINCT FROM 'infrastructure')
                      AS tasks_done,
                  count(DISTINCT (task_id, attempt)) FILTER (WHERE current AND error_kind IS DISTINCT FROM
                                                                 'infrastructure') AS repeats_done,
                  count(*) FILTER (WHERE current AND status = 'error') AS errors,
                  coalesce(sum(endpoint_retries), 0) AS endpoint_retries,
                  coalesce(sum(endpoint_wait_s), 0) AS endpoint_wait_s
           FROM (SELECT *, episode_id NOT IN (SELECT supersedes FROM episodes WHERE supersedes IS NOT NULL) AS current
                 FROM episodes) GROUP BY run_id) e ON e.run_id = r.run_id
LEFT JOIN (SELECT run_id, count(*) AS scored, count(passed) AS judged, count(*) FILTER (WHERE passed) AS passed,
                  sum(hops_passed) AS hops_passed, sum(hops_total) AS hops_total
           FROM episode_scores WHERE evaluator = $evaluator GROUP BY run_id) s ON s.run_id = r.run_id
ORDER BY r.created_at DESC NULLS LAST, r.run_id DESC
"""
COLUMNS = (
    "run_id",
    "started",
    "agent",
    "model",
    "tasks",
    "tasks_done",
    "episodes",
    "errors",
    *rate_columns("task_sr"),
    *rate_columns("hop_sr"),
    "status",
)


def list_runs(store: Store, evaluator: str = DEFAULT_EVALUATOR) -> Table:
    """One row per run, the latest first."""
    db = connect(store, only=("runs", "tasks", "episodes", "scores", "latest_scores", "episode_scores"))
    try:
        rows = query(db, RUNS_SQL, {"evaluator": evaluator})
    finally:
        db.close()
    return Table(
        "runs", f"Runs of {store.root} ({evaluator} verdicts)", COLUMNS, tuple(_row(r) for r in rows)
    )


def _row(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["run_id"],
        row["started"],
        row["agent"],
        row["model"],
        row["task_count"],
        row["tasks_done"],
        row["episodes"],
        row["errors"],
        *rate_values(row["passed"], row["judged"]),
        *rate_values(int(row["hops_passed"]), int(row["hops_total"])),
        _status(row),
    )


def _status(row: dict[str, Any]) -> str:
    """``complete`` (every task has an episode, one per repeat with ``record --repeats``),
    ``partial`` (some do: still being recorded, or stopped; ``mmina record --resume`` goes on),
    ``empty`` (none yet); ``, unscored`` when the evaluator has no verdict on it; then what the
    model endpoint's faults cost its episodes, if anything (``episodes.endpoint_retries``,
    ``endpoint_wait_s``)."""
    done, total = row["repeats_done"], row["task_count"] and row["task_count"] * row["repeats"]
    state = "empty" if not done else "complete" if total is None or done >= total else "partial"
    state = state if row["scored"] or not done else f"{state}, unscored"
    retries, waited = int(row["endpoint_retries"]), float(row["endpoint_wait_s"])
    return f"{state}; endpoint: {retries} retried, {waited:.0f} s waited" if retries or waited else state
