"""Every episode of the store in one small in-memory table, for the episodes table's filters
and the runs page's rates, under one evaluator.

A run is indexed from the report's own reading of it (:func:`mmina.analysis.data.scored_episodes`:
the latest episode of each task and repeat with its hop verdicts, and its steps) and the report's
failure modes (:func:`mmina.analysis.failures.modes`); only one row per episode is kept (no
steps), so the index of a million steps is a few megabytes. Episodes the report does not
count (one recorded again for the same repeat, no verdict yet) are listed too, with ``counted`` false. A run is
indexed again whenever its files change (see ``watcher.py``); queries never wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

from mmina.analysis.data import Episode, query, scored_episodes
from mmina.analysis.failures import modes
from mmina.serve.params import EpisodeQuery
from mmina.stats import rate, wilson
from mmina.store import Store
from mmina.store.convenience import bucket_sql
from mmina.store.sqltypes import duckdb_type
from mmina.store.views import connect

COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("run_id", pa.string()),
    ("episode_id", pa.string()),
    ("task_id", pa.string()),
    ("attempt", pa.int32()),
    ("counted", pa.bool_()),
    ("status", pa.string()),
    ("stop_reason", pa.string()),
    ("final_answer", pa.string()),
    ("error", pa.string()),
    ("n_steps", pa.int32()),
    ("n_hops", pa.int32()),
    ("bucket", pa.string()),
    ("sites", pa.list_(pa.string())),
    ("verdict", pa.string()),
    ("hops_passed", pa.int32()),
    ("hops_total", pa.int32()),
    ("first_failure", pa.string()),
    ("modes", pa.list_(pa.string())),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("ended_at", pa.timestamp("us", tz="UTC")),
    ("duration_ms", pa.float64()),
    ("cost_usd", pa.float64()),
    ("tokens", pa.int64()),
    ("blob_packs", pa.list_(pa.string())),
)
SCHEMA = pa.schema(COLUMNS)
LISTED = (
    "run_id",
    "episode_id",
    "task_id",
    "attempt",
    "counted",
    "status",
    "stop_reason",
    "final_answer",
    "error",
    "n_steps",
    "n_hops",
    "bucket",
    "sites",
    "verdict",
    "hops_passed",
    "hops_total",
    "first_failure",
    "modes",
    "started_at",
    "duration_ms",
    "cost_usd",
    "tokens",
)
"""The columns the episodes table shows."""

INDEX_VIEWS = ("tasks", "episodes", "steps", "scores", "latest_scores", "episode_scores")
"""The views the report's reading of a run needs (each view costs its binding)."""
RUN_SQL = f"""
SELECT e.run_id, e.episode_id, e.task_id, e.attempt, e.status, e.stop_reason, e.final_answer, e.error, e.n_steps,
       e.n_hops, {bucket_sql("e.n_hops")} AS bucket, e.started_at, e.ended_at, e.duration_ms, e.cost_usd,
       e.prompt_tokens + e.completion_tokens AS tokens, e.blob_packs, t.procedure, s.verdict
FROM episodes e
LEFT JOIN tasks t ON t.run_id = e.run_id AND t.task_id = e.task_id
LEFT JOIN latest_scores s ON s.episode_id = e.episode_id AND s.evaluator = $evaluator AND s.level = 'task'
ORDER BY e.episode_id
"""
CLAUSES = {
    "bucket": "bucket = $bucket",
    "n_hops": "n_hops = $n_hops",
    "first_failure": "first_failure = $first_failure",
    "mode": "list_contains(modes, $mode)",
    "site": "list_contains(sites, $site)",
    "verdict": "verdict = $verdict",
    "status": "status = $status",
    "error": "contains(lower(coalesce(error, '')), lower($error))",
    "answer": "contains(lower(coalesce(final_answer, '')), lower($answer))",
    "task": "contains(lower(task_id), lower($task))",
}
RATES_SQL = """
SELECT run_id, count(*) AS episodes, count(DISTINCT task_id) AS tasks_done,
       count(*) FILTER (WHERE counted) AS tasks_scored, count(*) FILTER (WHERE counted AND verdict = 'pass') AS passed,
       coalesce(sum(hops_passed) FILTER (WHERE counted), 0) AS hops_passed,
       coalesce(sum(hops_total) FILTER (WHERE counted), 0) AS hops_total,
       count(*) FILTER (WHERE verdict = 'unscored') AS unscored, count(*) FILTER (WHERE status = 'error') AS errors,
       sum(cost_usd) AS cost_usd, sum(tokens) AS tokens, min(started_at) AS first_started, max(ended_at) AS last_ended
FROM idx GROUP BY run_id
"""
FACETS_SQL = """
SELECT 'site' AS facet, site AS value, count(*) AS n FROM (SELECT unnest(sites) AS site FROM idx {where}) GROUP BY ALL
UNION ALL SELECT 'mode', mode, count(*) FROM (SELECT unnest(modes) AS mode FROM idx {where}) GROUP BY ALL
UNION ALL SELECT 'status', status, count(*) FROM idx {where} GROUP BY ALL
UNION ALL SELECT 'verdict', verdict, count(*) FROM idx {where} GROUP BY ALL
UNION ALL SELECT 'n_hops', n_hops::VARCHAR, count(*) FROM idx {where} GROUP BY ALL
UNION ALL SELECT 'first_failure', first_failure, count(*) FROM idx {where} GROUP BY ALL
UNION ALL SELECT 'bucket', bucket, count(*) FROM idx {where} GROUP BY ALL
"""


def run_table(store: Store, run_id: str, evaluator: str) -> pa.Table:
    """One run's index rows, read through views that see that run's files only."""
    db = connect(store, [run_id], INDEX_VIEWS)
    try:
        base = query(db, RUN_SQL, {"evaluator": evaluator})
        scored = {e.episode_id: e for e in scored_episodes(db, [run_id], evaluator)}
    finally:
        db.close()
    return pa.Table.from_pylist(
        [index_row(row, scored.get(row["episode_id"])) for row in base], schema=SCHEMA
    )


def index_row(row: dict[str, Any], episode: Episode | None) -> dict[str, Any]:
    """An episode's index row: its own columns, its sites (the task's procedure keywords) and,
    when the report counts it, its verdict, hops, first failure and failure modes."""
    procedure = list(row.pop("procedure") or ())
    sites = procedure[: procedure.index("end")] if "end" in procedure else procedure
    if episode is None:
        return {
            **row,
            "sites": sites,
            "counted": False,
            "verdict": row["verdict"] or "unscored",
            "hops_passed": None,
            "hops_total": None,
            "first_failure": None,
            "modes": [],
        }
    found = [name for name, on in modes(episode).items() if on]
    return {
        **row,
        "sites": sites,
        "counted": True,
        "verdict": episode.verdict,
        "hops_passed": episode.hops_passed,
        "hops_total": episode.hops_total,
        "first_failure": episode.first_failure,
        "modes": found,
    }


def where(runs: tuple[str, ...], filters: Mapping[str, str | int]) -> tuple[str, dict[str, Any]]:
    """The WHERE clause of a query (every value a bound parameter) and its parameters."""
    clauses = ["list_contains($runs, run_id)"] if runs else []
    params: dict[str, Any] = {"runs": list(runs)} if runs else {}
    for name, value in filters.items():
        clauses.append(CLAUSES[name])
        params[name] = value
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


class EpisodeIndex:
    """The index under one evaluator: which runs it holds (and as of which files), and queries."""

    def __init__(self, store: Store, evaluator: str) -> None:
        self.store, self.evaluator = store, evaluator
        self.indexed: dict[str, str] = {}
        """run → fingerprint of the files it was indexed from."""
        self._db = duckdb.connect(":memory:")
        self._db.execute(
            "CREATE TABLE idx (" + ", ".join(f'"{n}" {duckdb_type(t)}' for n, t in COLUMNS) + ")"
        )
        self._lock = threading.Lock()

    def index_run(self, run_id: str, fingerprint: str) -> None:
        """Read the run again and replace its rows in one transaction (queries see old or new)."""
        table = run_table(self.store, run_id, self.evaluator)
        with self._lock:
            cursor = self._db.cursor()
            cursor.register("batch", table)
            cursor.begin()
            cursor.execute("DELETE FROM idx WHERE run_id = $run", {"run": run_id})
            cursor.execute("INSERT INTO idx SELECT * FROM batch")
            cursor.commit()
            cursor.close()
            self.indexed[run_id] = fingerprint

    def drop_run(self, run_id: str) -> None:
        with self._lock:
            self._db.cursor().execute("DELETE FROM idx WHERE run_id = $run", {"run": run_id})
            self.indexed.pop(run_id, None)

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        cursor = self._db.cursor()
        try:
            result = cursor.execute(sql, params or {})
            columns = [d[0] for d in result.description or []]
            return [dict(zip(columns, row)) for row in result.fetchall()]
        finally:
            cursor.close()

    def select(self, request: EpisodeQuery) -> tuple[int, list[dict[str, Any]]]:
        """How many episodes match, and the asked page of them."""
        clause, params = where(request.runs, request.filters)
        total = self.rows(f"SELECT count(*) AS n FROM idx{clause}", params)[0]["n"]
        order = f'"{request.sort}" {"DESC" if request.descending else "ASC"} NULLS LAST, episode_id'
        columns = ", ".join(f'"{c}"' for c in LISTED)
        page = self.rows(
            f"SELECT {columns} FROM idx{clause} ORDER BY {order} LIMIT {request.limit} "
            f"OFFSET {request.offset}",
            params,
        )
        return total, page

    def facets(self, runs: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
        """The values each filter can take among the runs' episodes, with their counts."""
        clause, params = where(runs, {})
        found: dict[str, list[tuple[str, int]]] = {}
        for row in self.rows(FACETS_SQL.format(where=clause), params):
            if row["value"] is not None:
                found.setdefault(row["facet"], []).append((row["value"], row["n"]))
        return {name: sorted(values, key=lambda v: (len(v[0]), v[0])) for name, values in found.items()}

    def rates(self) -> dict[str, dict[str, Any]]:
        """Per indexed run: episodes, task and hop success with 95% Wilson intervals, cost."""
        found = {}
        for row in self.rows(RATES_SQL):
            task_lo, task_hi = wilson(row["passed"], row["tasks_scored"])
            hop_lo, hop_hi = wilson(row["hops_passed"], row["hops_total"])
            found[row["run_id"]] = {
                **row,
                "task_sr": rate(row["passed"], row["tasks_scored"]),
                "task_sr_lo": task_lo,
                "task_sr_hi": task_hi,
                "hop_sr": rate(row["hops_passed"], row["hops_total"]),
                "hop_sr_lo": hop_lo,
                "hop_sr_hi": hop_hi,
            }
        return found

    def episode(self, episode_id: str) -> dict[str, Any] | None:
        """The episode's row of the index (with its run and blob packs), or None."""
        found = self.rows("SELECT * FROM idx WHERE episode_id = $id", {"id": episode_id})
        return found[0] if found else None
