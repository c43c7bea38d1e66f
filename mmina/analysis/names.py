"""What a user picks from in the analysis: the report's tables and whose verdicts it reads by
default. Kept apart from the tables' code so the command line can show the choices without
loading DuckDB."""

from __future__ import annotations

DEFAULT_EVALUATOR = "hops"
"""Whose verdicts a report reads unless told: the clean hop queue."""

REPEAT_TABLES = ("repeats", "consistency", "flaky_tasks")
"""The tables of repeated runs (``mmina.analysis.repeats``), when some task has several episodes."""
TABLE_NAMES = (
    "runner_log",
    "sr_by_bucket",
    *REPEAT_TABLES,
    "hop_positions",
    "hop_cost",
    "first_failures",
    "failure_modes",
    "episode_failures",
    "per_site",
    "actions_by_hops",
    "cost",
    "conditioned_hops",
)
"""The report's tables, in report order: ``runner_log`` (``mmina.analysis.runner_log``) only for
``mmina_official``, then the ones :func:`mmina.analysis.tables.all_tables` returns with the
repeats' tables (when a task has several episodes) after Table 2 and ``hop_cost``
(``mmina.analysis.hop_cost``) after Table 3, then ``conditioned_hops`` when the runs hold
hop-conditioned episodes."""
