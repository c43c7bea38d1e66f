"""``mmina report``: every table of the analysis for some runs under one evaluator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mmina.analysis.data import AnalysisError, Episode, Scored, agent_label, load, query
from mmina.analysis.hop_cost import hop_cost
from mmina.analysis.names import DEFAULT_EVALUATOR, REPEAT_TABLES
from mmina.analysis.repeats import has_repeats, repeat_tables
from mmina.analysis.runner_log import OFFICIAL_EVALUATOR, runner_log_table
from mmina.analysis.tables import Table, all_tables, conditioned_hops
from mmina.errors import not_found
from mmina.store import Store
from mmina.store.views import connect


@dataclass(frozen=True)
class Report:
    scored: Scored
    tables: tuple[Table, ...]
    absent: dict[str, str] = field(default_factory=dict)
    """Tables this report has not, with why (asking for one by name is an error that says so)."""

    @property
    def repeats(self) -> int:
        """The most repeats of a task in the report (1 without ``record --repeats``)."""
        return max((e.attempt for e in self.scored.episodes), default=1)

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)

    def has(self, name: str) -> bool:
        return any(t.name == name for t in self.tables)

    def chosen(self, names: Sequence[str] = ()) -> list[Table]:
        """The tables named (every table when none are), in report order."""
        missing = [n for n in names if n in self.absent]
        if missing:
            raise AnalysisError(
                not_found("table", missing[0], "this report", listing=self.absent[missing[0]])
            )
        return [t for t in self.tables if not names or t.name in names]

    def as_json(self, names: Sequence[str] = ()) -> dict[str, Any]:
        return {
            "runs": list(self.scored.runs),
            "evaluator": self.scored.evaluator,
            "tasks": len(self.scored.episodes),
            "repeats": self.repeats,
            "not_applicable": self.scored.not_applicable,
            "infrastructure_errors": self.scored.infrastructure,
            "blocked": self.scored.blocked,
            "tables": {t.name: t.records() for t in self.chosen(names)},
        }


def build_report(store: Store, runs: Sequence[str] = (), evaluator: str = DEFAULT_EVALUATOR) -> Report:
    scored = load(store, runs, evaluator)
    tables = all_tables(scored.episodes)
    tables.insert(2, hop_cost(scored.episodes))  # beside Table 3
    absent: dict[str, str] = {}
    if has_repeats(scored.episodes):
        tables[1:1] = repeat_tables(scored.episodes)  # beside Table 2
    else:
        absent |= dict.fromkeys(
            REPEAT_TABLES,
            "every task of the runs has one episode (record several with `mmina record --repeats K`)",
        )
    if evaluator == OFFICIAL_EVALUATOR:  # the runner's own log figures first: what a paper table quotes
        tables.insert(0, runner_log_table(store, scored.runs))
    else:
        absent["runner_log"] = f"only with --evaluator {OFFICIAL_EVALUATOR}"
    conditioned = [e for e in scored.episodes if e.conditioned]
    if conditioned:
        tables.append(conditioned_hops(conditioned, free_running(store, scored, conditioned)))
    else:
        absent["conditioned_hops"] = (
            "the runs hold no hop-conditioned episode (record some with "
            "`mmina record --prefix-run RUN --at-hop all`)"
        )
    return Report(scored, tuple(tables), absent)


FREE_RUNS_SQL = """
SELECT r.run_id, r.agent, r.model FROM runs r
WHERE NOT list_contains($runs, r.run_id)
  AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.run_id = r.run_id AND e.hops_given IS NOT NULL)
ORDER BY r.created_at
"""


def free_running(store: Store, scored: Scored, conditioned: Sequence[Episode]) -> list[Episode]:
    """The free-running episodes of the conditioned episodes' agents: those of the chosen runs,
    else (for an agent with none there) those of the store's other runs of that agent and model
    that carry ``scored.evaluator``'s verdicts."""
    agents = {e.agent_label for e in conditioned}
    free = [e for e in scored.episodes if not e.conditioned and e.agent_label in agents]
    wanting = agents - {e.agent_label for e in free}
    if not wanting:
        return free
    db = connect(store)
    try:
        others = query(db, FREE_RUNS_SQL, {"runs": list(scored.runs)})
    finally:
        db.close()
    for row in others:
        if agent_label(row["agent"], row["model"]) in wanting:
            free += _scored_or_none(store, row["run_id"], scored.evaluator)
    return free


def _scored_or_none(store: Store, run_id: str, evaluator: str) -> list[Episode]:
    """A run's scored episodes; none when some of its episodes lack the evaluator's verdict."""
    try:
        return list(load(store, [run_id], evaluator).episodes)
    except AnalysisError:
        return []
