"""The official runner's log figures for runs scored by ``mmina_official``, beside ``hops``.

The official ``run.py`` logs, per task, ``[Result] (PASS|FAIL) <file>`` (or, when it raised,
``[Unhandled Error] ...`` and no result line) and the running ``[Result] all success rate:
all_pass/all_all``: the hop rate a paper table quotes, whose numerator never counts END and
whose denominator depends on the rule set (``len(procedure)`` with END for multihop, 2 for
``normal``, 1 for single-hop tasks, whose numerator is always 0). ``mmina_official`` stores
each episode's outcome, numerator and denominator in its task row's detail; this sums them
per rule set and over all, and sets the clean ``hops`` figures of the same episodes beside.
Hop-conditioned episodes (``record --prefix-run``) have no place in it: see ``LOG_SQL``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mmina.analysis.data import query
from mmina.analysis.tables import Table, rate_columns, rate_values
from mmina.store import Store
from mmina.store.views import connect

OFFICIAL_EVALUATOR = "mmina_official"
CLEAN_EVALUATOR = "hops"
RULE_SETS = ("multihop", "2hop", "singlehop")
OUTCOMES = ("pass", "fail", "no_result", "unclear")

LOG_SQL = """
SELECT s.run_id, s.episode_id, l.detail_json, h.passed AS clean_passed, h.hops_passed AS clean_hops_passed,
       h.hops_total AS clean_hops_total
FROM episode_scores s
JOIN latest_scores l ON l.episode_id = s.episode_id AND l.evaluator = s.evaluator AND l.level = 'task'
LEFT JOIN episode_scores h ON h.episode_id = s.episode_id AND h.evaluator = $clean
WHERE s.evaluator = $official AND list_contains($runs, s.run_id) AND s.hops_given IS NULL
ORDER BY s.run_id, s.task_id
"""
"""Hop-conditioned episodes are left out: the official runner always starts at the start page,
so its log never holds a figure for an agent handed a prefix."""


def log_totals(details: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The runner's figures over some episodes' ``mmina_official`` details: PASS and FAIL lines,
    tasks without a result line, task SR (PASS lines / tasks) and ``all_pass/all_all``."""
    outcomes = [d.get("outcome") for d in details]
    numerator = sum(int(d.get("numerator") or 0) for d in details)
    denominator = sum(int(d.get("denominator") or 0) for d in details)
    tasks, passed = len(details), outcomes.count("pass")
    task_sr, logged = rate_values(passed, tasks), rate_values(numerator, denominator)
    return {
        "tasks": tasks,
        **{o: outcomes.count(o) for o in OUTCOMES},
        **dict(zip(rate_columns("task_sr"), task_sr)),
        "all_pass": numerator,
        "all_all": denominator,
        **dict(zip(rate_columns("logged_hop_rate"), logged)),
    }


def clean_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``hops`` figures of the same episodes (over those with a ``hops`` verdict)."""
    scored = [r for r in rows if r["clean_passed"] is not None]
    passed = sum(bool(r["clean_passed"]) for r in scored)
    hops, hops_passed = (
        sum(r["clean_hops_total"] for r in scored),
        sum(r["clean_hops_passed"] for r in scored),
    )
    return {
        "hops_scored": len(scored),
        **dict(zip(rate_columns("hops_task_sr"), rate_values(passed, len(scored)))),
        **dict(zip(rate_columns("hops_hop_sr"), rate_values(hops_passed, hops))),
    }


COLUMNS = (
    "rule_set",
    "tasks",
    "pass",
    "fail",
    "no_result",
    "unclear",
    *rate_columns("task_sr"),
    "all_pass",
    "all_all",
    *rate_columns("logged_hop_rate"),
    "hops_scored",
    *rate_columns("hops_task_sr"),
    *rate_columns("hops_hop_sr"),
)


def runner_log_table(store: Store, runs: Sequence[str]) -> Table:
    """One row per rule set present, then ``all``: the runner's log figures and the clean ones."""
    db = connect(store)
    try:
        rows = query(
            db, LOG_SQL, {"official": OFFICIAL_EVALUATOR, "clean": CLEAN_EVALUATOR, "runs": list(runs)}
        )
    finally:
        db.close()
    for row in rows:
        row["detail"] = json.loads(row["detail_json"] or "{}")
    groups = [(name, [r for r in rows if r["detail"].get("rule_set") == name]) for name in RULE_SETS]
    table_rows = [_row(name, group) for name, group in [*groups, ("all", rows)] if group or name == "all"]
    return Table(
        "runner_log",
        "The official runner's log (task SR = PASS lines / tasks; logged hop rate = "
        "all_pass/all_all, END never counted) beside the clean hops figures",
        COLUMNS,
        tuple(table_rows),
    )


def _row(name: str, rows: Iterable[Mapping[str, Any]]) -> tuple[Any, ...]:
    rows = list(rows)
    figures = {**log_totals([r["detail"] for r in rows]), **clean_totals(rows), "rule_set": name}
    return tuple(figures[c] for c in COLUMNS)
