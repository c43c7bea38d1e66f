"""What each page of ``mmina serve`` is given, as plain JSON-ready data.

Every number comes from the code ``mmina report`` and ``mmina compare`` use (the analysis
package) or from the episode index built from it; nothing here computes a rate its own way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import plotly.io

from mmina.analysis.charts import report_charts
from mmina.analysis.display import display
from mmina.analysis.html import report_sections
from mmina.analysis.paired import Side, compare
from mmina.analysis.report import build_report
from mmina.analysis.viewer import episode_data, input_texts
from mmina.serve.catalog import Catalog, Kept, StoredEpisode
from mmina.serve.params import EpisodeQuery
from mmina.serve.watcher import StoreWatcher
from mmina.store.runs import run_config
from mmina.store.sql import run_query

RUNS_SQL = """
SELECT run_id, created_at, agent, model, task_suite, task_count, config_json FROM runs
ORDER BY created_at DESC, run_id DESC
"""
COUNTS_SQL = """
SELECT run_id, count(*) AS episodes, count(DISTINCT task_id) AS tasks_done, min(started_at) AS first_started,
       max(ended_at) AS last_ended
FROM episodes GROUP BY run_id
"""
SQL_ROWS_SHOWN = 1000
ANALYSES_KEPT = 16


def runs_page(catalog: Catalog, watcher: StoreWatcher) -> dict[str, Any]:
    """Every run with its progress, rates (from the index, as it fills) and, while it is being
    recorded, an estimate of the time left."""
    counts = {row["run_id"]: row for row in catalog.rows(COUNTS_SQL)}
    rates = watcher.index().rates()
    runs = [
        _run_entry(run, counts.get(run["run_id"]), rates.get(run["run_id"]), watcher)
        for run in catalog.rows(RUNS_SQL)
    ]
    return {
        "runs": runs,
        "evaluator": watcher.default_evaluator,
        **watcher.progress(),
        "problem": watcher.problem,
    }


def _run_entry(
    run: dict[str, Any], counts: dict[str, Any] | None, rates: dict[str, Any] | None, watcher: StoreWatcher
) -> dict[str, Any]:
    config = run_config(run.pop("config_json"))
    done = counts["tasks_done"] if counts else 0
    live = watcher.live(run["run_id"]) and done < (run["task_count"] or 0)
    return {
        **run,
        "episodes": counts["episodes"] if counts else 0,
        "tasks_done": done,
        "live": live,
        "eta_s": _eta(counts, run["task_count"]) if live and counts else None,
        "source_run": config.get("source_run"),
        "mode": config.get("mode"),
        "rates": rates,
        "problem": watcher.run_problems.get(run["run_id"]),
    }


def _eta(counts: dict[str, Any], total: int) -> float | None:
    """Seconds left at the pace so far (tasks done over the time since the first began)."""
    first, last = counts["first_started"], counts["last_ended"]
    if not isinstance(first, datetime) or not isinstance(last, datetime) or last <= first:
        return None
    pace = counts["tasks_done"] / (last - first).total_seconds()
    return (total - counts["tasks_done"]) / pace if pace > 0 else None


def episodes_page(catalog: Catalog, watcher: StoreWatcher, request: EpisodeQuery) -> dict[str, Any]:
    """One page of the episodes table, with the number of matches and how far indexing is;
    the runs of its first rows get their connections made ahead (a click opens one)."""
    total, rows = watcher.index(request.evaluator).select(request)
    catalog.warm([row["run_id"] for row in rows])
    return {
        "total": total,
        "offset": request.offset,
        "limit": request.limit,
        "rows": rows,
        "evaluator": request.evaluator,
        **watcher.progress(request.evaluator),
    }


def facets_page(watcher: StoreWatcher, runs: tuple[str, ...], evaluator: str) -> dict[str, Any]:
    return {"facets": watcher.index(evaluator).facets(runs), **watcher.progress(evaluator)}


def image_url(episode_id: str, step_index: int) -> str:
    return f"/api/episodes/{quote(episode_id, safe='')}/steps/{step_index}/image"


def blob_url(digest: str | None, episode_id: str) -> str | None:
    return f"/blobs/{digest}?episode={quote(episode_id, safe='')}" if digest else None


def episode_page(catalog: Catalog, watcher: StoreWatcher, episode_id: str, evaluator: str) -> dict[str, Any]:
    """What ``mmina view`` shows for the episode, images as URLs, plus each step's network
    requests and the episode's line of the episodes table."""
    summary = watcher.index(evaluator).episode(episode_id)
    episode = catalog.episode(episode_id, summary["run_id"] if summary else None)
    packs = episode.row["blob_packs"]
    shots = [
        image_url(episode_id, s["step_index"]) if s["screenshot"] or s["screenshot_som"] else None
        for s in episode.steps
    ]
    data = episode_data(
        episode.row,
        episode.steps,
        catalog.verdicts(episode),
        input_texts(catalog.store, episode.steps, packs),
        shots,
        blob_url(episode.row["final_screenshot"], episode_id),
    )
    for step, row in zip(data["steps"], episode.steps):
        step["screenshot"] = blob_url(row["screenshot"], episode_id)
        step["requests"] = _requests(episode, row["step_index"])
    for terminal in data["steps"][len(episode.steps) :]:  # the terminal observation: no action, no requests
        terminal["screenshot"], terminal["requests"] = terminal["shot"], []
    data["requests_before"] = _requests(episode, -1)
    data["summary"] = summary
    return data


def _requests(episode: StoredEpisode, step_index: int) -> list[dict[str, Any]]:
    """The requests a step's action issued (-1: the first page load), bodies as links."""
    found = []
    for row in episode.requests:
        if row["step_index"] == step_index:
            episode_id = episode.row["episode_id"]
            found.append(
                {
                    **row,
                    "request_body": blob_url(row["request_body"], episode_id),
                    "response_body": blob_url(row["response_body"], episode_id),
                }
            )
    return found


def compare_page(catalog: Catalog, a: Side, b: Side) -> dict[str, Any]:
    """``mmina compare`` of two sides, with every paired task and its two episodes."""
    result = compare(catalog.store, a, b)
    pairs = [
        {
            "task_id": x["task_id"],
            "episode_a": x["episode_id"],
            "episode_b": y["episode_id"],
            "passed_a": x["passed"],
            "passed_b": y["passed"],
            "hops_a": f"{x['hops_passed']}/{x['hops_total']}",
            "hops_b": f"{y['hops_passed']}/{y['hops_total']}",
        }
        for x, y in result.pairs
    ]
    summary = result.summary()
    return {
        **result.as_json(),
        "pairs": pairs,
        "summary": {"title": summary.title, "columns": display(summary)[0], "rows": display(summary)[1]},
    }


def side_by_side(catalog: Catalog, watcher: StoreWatcher, a: str, b: str, evaluator: str) -> dict[str, Any]:
    """Two episodes step by step, each step pair marked as the same URL and action or not,
    and the first step where they part (None when they never do)."""
    left, right = (episode_page(catalog, watcher, e, evaluator) for e in (a, b))
    pairs = []
    for index in range(max(len(left["steps"]), len(right["steps"]))):
        x = left["steps"][index] if index < len(left["steps"]) else None
        y = right["steps"][index] if index < len(right["steps"]) else None
        pairs.append(
            {
                "index": index,
                "same_url": bool(x and y and x["url"] == y["url"]),
                "same_action": bool(x and y and x["action"] == y["action"]),
            }
        )
    parted = next((p["index"] for p in pairs if not (p["same_url"] and p["same_action"])), None)
    return {"a": left, "b": right, "pairs": pairs, "diverges_at": parted}


class Analyses:
    """The report of some runs under an evaluator, kept until those runs' files change."""

    def __init__(self, catalog: Catalog, watcher: StoreWatcher) -> None:
        self.catalog, self.watcher = catalog, watcher
        self._kept: Kept[tuple[Any, ...], dict[str, Any]] = Kept(ANALYSES_KEPT)

    def page(self, runs: Sequence[str], evaluator: str) -> dict[str, Any]:
        marks = (
            tuple(self.watcher.listing.runs.get(r) for r in runs)
            if runs
            else tuple(self.watcher.listing.runs.items())
        )
        key = (tuple(runs), evaluator, marks)
        return self._kept.get(key) or self._kept.put(key, analysis_page(self.catalog, runs, evaluator))


def analysis_page(catalog: Catalog, runs: Sequence[str], evaluator: str) -> dict[str, Any]:
    """Every table and chart of ``mmina report`` for the runs under the evaluator, tables as
    the report prints them (rates with their intervals) and charts as plotly figures."""
    report = build_report(catalog.store, runs, evaluator)
    tables = {}
    for table in report.tables:
        columns, rows = display(table)
        tables[table.name] = {"title": table.title, "columns": columns, "rows": rows}
    charts = {
        name: [{"id": element, "figure": json.loads(plotly.io.to_json(figure))} for element, figure in found]
        for name, found in report_charts(report).items()
    }
    sections = [{"id": i, "title": t, "table": name} for i, t, name in report_sections(report)]
    return {
        "runs": list(report.scored.runs),
        "evaluator": evaluator,
        "tasks": len(report.scored.episodes),
        "sections": sections,
        "tables": tables,
        "charts": charts,
    }


def sql_page(catalog: Catalog, query: str) -> dict[str, Any]:
    """A read-only query's columns and first rows (``SQL_ROWS_SHOWN``; only those are fetched),
    whether more exist, under the sandbox's deadline."""
    result = run_query(catalog.store, query, max_rows=SQL_ROWS_SHOWN)
    return {
        "columns": result.columns,
        "rows": result.rows,
        "total": len(result.rows),
        "truncated": result.truncated,
    }
