"""``mmina compare``: two runs (or two evaluators on one run), paired by task.

Each side is (run, evaluator); a task counts when both sides scored it. Runs recorded with
``--repeats`` pair repeat by repeat: repeat r of a task on one side with repeat r of it on the
other (a repeat only one side has is listed apart, as a task only one side has). Flips are
pairs whose verdict differs; McNemar's exact test asks whether the two sides' success rates
differ beyond chance, using only the discordant pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mmina.analysis.data import AnalysisError, check_scored, query
from mmina.analysis.tables import Table
from mmina.stats import mcnemar_exact, rate, wilson
from mmina.store import Store
from mmina.store.views import connect

SIDE_SQL = """
SELECT task_id, attempt, episode_id, passed, hops_passed, hops_total FROM episode_scores
WHERE evaluator = $evaluator AND list_contains($runs, run_id) AND passed IS NOT NULL
ORDER BY task_id, attempt
"""


@dataclass(frozen=True)
class Side:
    run_id: str
    evaluator: str

    @property
    def label(self) -> str:
        return f"{self.run_id} ({self.evaluator})"


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    pairs: tuple[tuple[dict[str, Any], dict[str, Any]], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]

    def count(self, a_passed: bool, b_passed: bool) -> int:
        return sum(x["passed"] == a_passed and y["passed"] == b_passed for x, y in self.pairs)

    @property
    def p_value(self) -> float:
        return mcnemar_exact(self.count(True, False), self.count(False, True))

    def flips(self) -> Table:
        rows = tuple(
            (
                x["task_id"],
                "pass→fail" if x["passed"] else "fail→pass",
                x["episode_id"],
                y["episode_id"],
                x["hops_passed"],
                x["hops_total"],
                y["hops_passed"],
                y["hops_total"],
                x["attempt"],
            )
            for x, y in self.pairs
            if x["passed"] != y["passed"]
        )
        return Table(
            "flips",
            f"Tasks whose verdict differs: {self.a.label} → {self.b.label}",
            (
                "task_id",
                "direction",
                "episode_a",
                "episode_b",
                "hops_passed_a",
                "hops_total_a",
                "hops_passed_b",
                "hops_total_b",
                "repeat",
            ),
            rows,
        )

    def summary(self) -> Table:
        n = len(self.pairs)
        rows = [
            self._side_row("a", self.a, [x for x, _ in self.pairs]),
            self._side_row("b", self.b, [y for _, y in self.pairs]),
        ]
        return Table(
            "comparison",
            f"Paired by task (and repeat): {n} pair(s) scored on both sides",
            (
                "side",
                "run_id",
                "evaluator",
                "tasks",
                "passed",
                "task_sr",
                "task_sr_lo",
                "task_sr_hi",
                "hops",
                "hops_passed",
                "hop_sr",
                "hop_sr_lo",
                "hop_sr_hi",
            ),
            tuple(rows),
        )

    @staticmethod
    def _side_row(name: str, side: Side, rows: list[dict[str, Any]]) -> tuple[Any, ...]:
        passed, hops, hops_passed = (
            sum(r["passed"] for r in rows),
            sum(r["hops_total"] for r in rows),
            sum(r["hops_passed"] for r in rows),
        )
        return (
            name,
            side.run_id,
            side.evaluator,
            len(rows),
            passed,
            rate(passed, len(rows)),
            *wilson(passed, len(rows)),
            hops,
            hops_passed,
            rate(hops_passed, hops),
            *wilson(hops_passed, hops),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "a": vars(self.a),
            "b": vars(self.b),
            "paired_tasks": len(self.pairs),
            "both_passed": self.count(True, True),
            "both_failed": self.count(False, False),
            "pass_to_fail": self.count(True, False),
            "fail_to_pass": self.count(False, True),
            "mcnemar_p": self.p_value,
            "only_in_a": list(self.only_a),
            "only_in_b": list(self.only_b),
            "sides": self.summary().records(),
            "flips": self.flips().records(),
        }


Key = tuple[str, int]
"""A paired item: (task, repeat)."""


def _side_rows(store: Store, side: Side) -> dict[Key, dict[str, Any]]:
    params = {"evaluator": side.evaluator, "runs": [side.run_id]}
    db = connect(store, [side.run_id])
    try:
        check_scored(db, params)
        return {(r["task_id"], r["attempt"]): r for r in query(db, SIDE_SQL, params)}
    finally:
        db.close()


def _labels(keys: set[Key]) -> tuple[str, ...]:
    """Task ids, with the repeat after those that are not the first."""
    return tuple(task if attempt == 1 else f"{task} (repeat {attempt})" for task, attempt in sorted(keys))


def compare(store: Store, a: Side, b: Side) -> Comparison:
    """Pair the two sides' latest verdicts by task id and repeat (run references resolved
    first, see :meth:`Store.resolve_run`)."""
    a, b = (replace(side, run_id=store.resolve_run(side.run_id)) for side in (a, b))
    if a == b:
        raise AnalysisError("compare needs two different sides: two runs, or two --evaluator values")
    rows_a, rows_b = _side_rows(store, a), _side_rows(store, b)
    pairs = tuple((rows_a[t], rows_b[t]) for t in sorted(rows_a) if t in rows_b)
    if not pairs:
        raise AnalysisError(f"{a.label} and {b.label} have no task in common")
    return Comparison(a, b, pairs, _labels(set(rows_a) - set(rows_b)), _labels(set(rows_b) - set(rows_a)))
