"""What each hop cost: steps, tokens, model time, wall time and money per hop position.

A step belongs to the hop that was at the head of the queue when the agent chose its action:
the evaluator's verdicts say at which step each passed hop completed (its ``completed_step``,
else live tracking's ``hop_steps``), a step whose observation completed hop k being the first
of hop k + 1. Steps after the last hop completed (answering) are the last hop's. A hop is
*reached* when the hops before it passed; a failed hop costs what was spent on it until the
episode ended, and the hops after it are not reached. The cost of a passed hop is everything
spent on that hop position (passed or not) over the hops that passed there. Hop-conditioned
episodes (``record --prefix-run``) are left out: their prefix steps are the reference's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from mmina.analysis.data import Episode, StepRow
from mmina.analysis.tables import Table

COLUMNS = (
    "n_hops",
    "hop",
    "reached",
    "passed",
    "mean_steps",
    "mean_tokens",
    "mean_model_s",
    "mean_wall_s",
    "mean_cost_usd",
    "steps_per_pass",
    "tokens_per_pass",
    "wall_s_per_pass",
    "cost_per_pass_usd",
)


@dataclass
class HopSpend:
    """What the episodes that reached one hop position spent on it."""

    reached: int = 0
    passed: int = 0
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    """Steps, tokens, model ms, wall ms, cost in USD."""

    def add(self, other: HopSpend) -> None:
        self.reached += other.reached
        self.passed += other.passed
        self.sums = [a + b for a, b in zip(self.sums, other.sums)]

    def row(self) -> tuple[int | float | None, ...]:
        steps, tokens, model_ms, wall_ms, cost = self.sums
        means = [
            v / self.reached if self.reached else None
            for v in (steps, tokens, model_ms / 1e3, wall_ms / 1e3, cost)
        ]
        per_pass = [v / self.passed if self.passed else None for v in (steps, tokens, wall_ms / 1e3, cost)]
        return (self.reached, self.passed, *means, *per_pass)


def completions(episode: Episode) -> list[int]:
    """The steps at which the agent's hops completed, in hop order, up to the first that did not."""
    steps = []
    for verdict in sorted(episode.hops, key=lambda h: h.hop_index):
        live = episode.live_hop_steps
        step = (
            verdict.completed_step
            if verdict.completed_step is not None
            else live[verdict.hop_index]
            if verdict.hop_index < len(live)
            else None
        )
        if not verdict.passed or step is None:
            break
        steps.append(step)
    return steps


def hop_of(step: StepRow, done: Sequence[int], first: int, last: int) -> int:
    """The hop (0-based) the step worked on: one more for each completion at or before it."""
    return min(first + bisect_right(done, step.step_index), last)


def episode_spend(episode: Episode) -> dict[int, HopSpend]:
    """Per hop position (1-based) the episode reached: what it spent there and whether it passed."""
    if not episode.hops or episode.conditioned:
        return {}
    first, last = episode.first_hop, max(h.hop_index for h in episode.hops)
    done = completions(episode)
    passed = {h.hop_index for h in episode.hops if h.passed}
    spend = {
        index + 1: HopSpend(1, index in passed) for index in range(first, min(first + len(done), last) + 1)
    }
    for step in episode.steps:
        cell = spend.setdefault(hop_of(step, done, first, last) + 1, HopSpend(1))
        values = (1, step.tokens, step.agent_ms, step.wall_ms, step.cost_usd)
        cell.sums = [a + b for a, b in zip(cell.sums, values)]
    return spend


def hop_cost(episodes: Sequence[Episode]) -> Table:
    """Per total hop count and hop position, then per hop position over all, then over every
    hop: what reaching a hop cost on average, and what each passed hop cost."""
    cells: dict[tuple[int, int], HopSpend] = defaultdict(HopSpend)
    for episode in episodes:
        for hop, spend in episode_spend(episode).items():
            cells[(episode.n_hops, hop)].add(spend)
    by_hop: dict[int, HopSpend] = defaultdict(HopSpend)
    total = HopSpend()
    for (_, hop), spend in cells.items():
        by_hop[hop].add(spend)
        total.add(spend)
    Row = tuple[int | float | str | None, ...]
    rows: list[Row] = [(n, hop, *spend.row()) for (n, hop), spend in sorted(cells.items())]
    rows += [("all", hop, *spend.row()) for hop, spend in sorted(by_hop.items())]
    if cells:
        rows.append(("all", "all", *total.row()))
    return Table(
        "hop_cost",
        "Cost per hop position (beside Table 3): means over the episodes that reached the "
        "hop; per pass: all spent at that position / hops passed there",
        COLUMNS,
        tuple(rows),
    )
