"""Rankings that survive replay: does the archived web keep the live ranking of agents?

A frozen copy of the web is only a benchmark if agents rank on it as they rank on the live web
(RetroSearch's check of its frozen search engine). Each agent is given as a pair of runs: one
recorded on the live web (``mmina record``) and one on the archive of a reference run (``mmina
replay --agent``). Per agent: its task success rate live and archived (95% Wilson intervals),
over the tasks both of its runs scored, and the change; over the agents: Kendall's τ-b between
the live and the archived rates, with a bootstrap interval (each run's task outcomes resampled
within the run), and whether the order is the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from random import Random
from typing import Any

from mmina.analysis.data import AnalysisError, agent_label, query
from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.stats import kendall_tau, percentile_interval, resample_counts, wilson
from mmina.store import Store
from mmina.store.views import connect

OUTCOMES_SQL = """
SELECT s.run_id, s.task_id, s.passed, r.agent, r.model
FROM episode_scores s JOIN runs r ON r.run_id = s.run_id
WHERE s.evaluator = $evaluator AND list_contains($runs, s.run_id) AND s.passed IS NOT NULL
"""


@dataclass(frozen=True)
class Side:
    run_id: str
    passed: int
    tasks: int

    @property
    def rate(self) -> float:
        return self.passed / self.tasks if self.tasks else 0.0

    def as_json(self) -> dict[str, Any]:
        low, high = wilson(self.passed, self.tasks)
        return {**asdict(self), "task_sr": self.rate, "low": low, "high": high}


@dataclass(frozen=True)
class AgentPair:
    """One agent live and archived, over the tasks both runs scored."""

    agent: str
    live: Side
    archived: Side

    @property
    def change(self) -> float:
        return self.archived.rate - self.live.rate

    def as_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "live": self.live.as_json(),
            "archived": self.archived.as_json(),
            "change": self.change,
        }


@dataclass(frozen=True, kw_only=True)
class RankingShift:
    evaluator: str
    agents: tuple[AgentPair, ...]
    tau: float | None
    low: float | None
    high: float | None
    same_order: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "evaluator": self.evaluator,
            "agents": [a.as_json() for a in self.agents],
            "tau": self.tau,
            "tau_low": self.low,
            "tau_high": self.high,
            "same_order": self.same_order,
        }


def replay_rankings(
    store: Store,
    pairs: Sequence[tuple[str, str]],
    evaluator: str = DEFAULT_EVALUATOR,
    resamples: int = 1000,
    seed: int = 0,
) -> RankingShift:
    """The live and archived success of each agent (``pairs``: live run, archived run) and how
    far the archived web keeps their ranking (see the module)."""
    if len(pairs) < 2:
        raise AnalysisError("a ranking needs two agents or more: give --pair LIVE ARCHIVED for each")
    resolved = [(store.resolve_run(live), store.resolve_run(archived)) for live, archived in pairs]
    outcomes, labels = _outcomes(store, [run for pair in resolved for run in pair], evaluator)
    counts = [_common(outcomes.get(live, {}), outcomes.get(archived, {})) for live, archived in resolved]
    agents = tuple(
        AgentPair(labels.get(live, live), _side(live, c[0]), _side(archived, c[1]))
        for (live, archived), c in zip(resolved, counts)
    )
    empty = [a.agent for a in agents if not a.live.tasks]
    if empty:
        raise AnalysisError(
            f"no task scored by {evaluator} in both runs of {empty[0]}: rescore them, or pair "
            "runs of the same tasks"
        )
    tau = kendall_tau([a.live.rate for a in agents], [a.archived.rate for a in agents])
    draw = Random(seed)
    values = [t for t in (_resampled_tau(draw, counts) for _ in range(resamples)) if t is not None]
    low, high = percentile_interval(values)
    return RankingShift(
        evaluator=evaluator, agents=agents, tau=tau, low=low, high=high, same_order=_same_order(agents)
    )


def _outcomes(
    store: Store, runs: Sequence[str], evaluator: str
) -> tuple[dict[str, dict[str, list[bool]]], dict[str, str]]:
    """Each run's task outcomes (every repeat) and its agent's label."""
    db = connect(store, list(dict.fromkeys(runs)))
    try:
        rows = query(db, OUTCOMES_SQL, {"evaluator": evaluator, "runs": list(runs)})
    finally:
        db.close()
    outcomes: dict[str, dict[str, list[bool]]] = {}
    for row in rows:
        outcomes.setdefault(row["run_id"], {}).setdefault(row["task_id"], []).append(bool(row["passed"]))
    return outcomes, {r["run_id"]: agent_label(r["agent"], r["model"]) for r in rows}


def _common(
    live: Mapping[str, list[bool]], archived: Mapping[str, list[bool]]
) -> tuple[Counter[bool], Counter[bool]]:
    """Pass and fail counts of each run over the tasks both scored."""
    tasks = live.keys() & archived.keys()
    return (Counter(v for t in tasks for v in live[t]), Counter(v for t in tasks for v in archived[t]))


def _side(run_id: str, counts: Counter[bool]) -> Side:
    return Side(run_id, counts[True], counts[True] + counts[False])


def _resampled_tau(draw: Random, counts: Sequence[tuple[Counter[bool], Counter[bool]]]) -> float | None:
    def rate(c: Counter[bool]) -> float:
        again = resample_counts(draw, c)
        total = sum(again.values())
        return again.get(True, 0) / total if total else 0.0

    rates = [(rate(live), rate(archived)) for live, archived in counts]
    return kendall_tau([r[0] for r in rates], [r[1] for r in rates])


def _same_order(agents: Sequence[AgentPair]) -> bool:
    """Whether every two agents are ordered alike live and archived (a tie on one side only is a change)."""

    def sign(value: float) -> int:
        return (value > 0) - (value < 0)

    return all(
        sign(a.live.rate - b.live.rate) == sign(a.archived.rate - b.archived.rate)
        for i, a in enumerate(agents)
        for b in agents[i + 1 :]
    )
