"""``mmina report``: every table of the analysis for some runs under one evaluator."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmina.analysis.data import DEFAULT_EVALUATOR, Scored, load
from mmina.analysis.runner_log import OFFICIAL_EVALUATOR, runner_log_table
from mmina.analysis.tables import Table, all_tables
from mmina.store import Store


@dataclass(frozen=True)
class Report:
    scored: Scored
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)

    def chosen(self, names: Sequence[str] = ()) -> list[Table]:
        """The tables named (every table when none are), in report order."""
        return [t for t in self.tables if not names or t.name in names]

    def as_json(self, names: Sequence[str] = ()) -> dict[str, Any]:
        return {"runs": list(self.scored.runs), "evaluator": self.scored.evaluator,
                "tasks": len(self.scored.episodes), "tables": {t.name: t.records() for t in self.chosen(names)}}


def build_report(store: Store, runs: Sequence[str] = (), evaluator: str = DEFAULT_EVALUATOR) -> Report:
    scored = load(store, runs, evaluator)
    tables = all_tables(scored.episodes)
    if evaluator == OFFICIAL_EVALUATOR:  # the runner's own log figures first: what a paper table quotes
        tables.insert(0, runner_log_table(store, scored.runs))
    return Report(scored, tuple(tables))
