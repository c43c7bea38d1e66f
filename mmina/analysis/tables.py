"""Report tables: plain rows computed from the scored episodes, rendered alike everywhere.

Each rate comes with its 95 % Wilson interval (``*_lo``, ``*_hi``) and the count behind it.
Hop positions are 1-based (the paper's "hop 1"); ``hop_index`` in the store is 0-based.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mmina.analysis import failures
from mmina.analysis.data import Episode
from mmina.stats import rate, wilson
from mmina.tasks.task import BUCKETS


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def rate_columns(name: str) -> tuple[str, str, str]:
    return name, f"{name}_lo", f"{name}_hi"


def rate_values(successes: int, total: int) -> tuple[float | None, float | None, float | None]:
    return (rate(successes, total), *wilson(successes, total))


def _groups(episodes: Iterable[Episode], key: Callable[[Episode], Any]) -> dict[Any, list[Episode]]:
    found: dict[Any, list[Episode]] = defaultdict(list)
    for episode in episodes:
        found[key(episode)].append(episode)
    return dict(sorted(found.items()))


def _with_overall(episodes: Sequence[Episode]) -> list[tuple[str, list[Episode]]]:
    groups = _groups(episodes, lambda e: e.bucket)
    return [(b, groups[b]) for b in BUCKETS if b in groups] + [("overall", list(episodes))]


def sr_by_bucket(episodes: Sequence[Episode]) -> Table:
    rows = []
    for bucket, group in _with_overall(episodes):
        passed, hops, hops_passed = (
            sum(e.passed for e in group),
            sum(e.hops_total for e in group),
            sum(e.hops_passed for e in group),
        )
        rows.append(
            (
                bucket,
                len(group),
                passed,
                *rate_values(passed, len(group)),
                hops,
                hops_passed,
                *rate_values(hops_passed, hops),
            )
        )
    columns = (
        "bucket",
        "tasks",
        "tasks_passed",
        *rate_columns("task_sr"),
        "hops",
        "hops_passed",
        *rate_columns("hop_sr"),
    )
    return Table("sr_by_bucket", "Task SR and hop SR by hop count (paper Table 2)", columns, tuple(rows))


def hop_positions(episodes: Sequence[Episode]) -> Table:
    """Per total hop count and hop position: success, and success given the previous hop passed."""
    cells: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for episode in episodes:
        passed = {h.hop_index: h.passed for h in episode.hops}
        for index, ok in passed.items():
            cell = cells[(episode.n_hops, index + 1)]
            reached = index == episode.first_hop or passed.get(index - 1, False)
            cell[0] += 1
            cell[1] += ok
            cell[2] += reached
            cell[3] += ok and reached
    rows = tuple(
        (n, hop, tasks, ok, *rate_values(ok, tasks), reached, ok_after, *rate_values(ok_after, reached))
        for (n, hop), (tasks, ok, reached, ok_after) in sorted(cells.items())
    )
    columns = (
        "n_hops",
        "hop",
        "tasks",
        "passed",
        *rate_columns("sr"),
        "reached",
        "passed_after_previous",
        *rate_columns("conditional_sr"),
    )
    return Table(
        "hop_positions", "Success per hop position by total hop count (paper Table 3)", columns, rows
    )


def conditioned_hops(conditioned: Sequence[Episode], free: Sequence[Episode]) -> Table:
    """Hop success given a correct prefix, per agent, total hop count and hop position, beside
    the free-running Table 3 of the same agent (``free``; its ``sr`` and ``conditional_sr``).

    A cell counts the hop-conditioned episodes that started at that hop from a faithful prefix
    (``left_out``: those whose prefix did not replay faithfully) and whether the agent passed
    that hop, the first it had to do; ``gap`` = ``sr`` - ``free_sr``, what compounding costs.
    """
    table3: dict[tuple[str, int, int], dict[str, Any]] = {}
    for agent, group in _groups(free, lambda e: e.agent_label).items():
        table3 |= {(agent, row["n_hops"], row["hop"]): row for row in hop_positions(group).records()}
    cells: dict[tuple[str, int, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for episode in conditioned:
        cell = cells[(episode.agent_label, episode.n_hops, episode.first_hop + 1)]
        if episode.prefix_faithful is False:
            cell[2] += 1
            continue
        cell[0] += 1
        cell[1] += any(h.passed for h in episode.hops if h.hop_index == episode.first_hop)
    rows = tuple(_conditioned_row(key, counts, table3.get(key)) for key, counts in sorted(cells.items()))
    columns = (
        "agent",
        "n_hops",
        "hop",
        "episodes",
        "passed",
        *rate_columns("sr"),
        "left_out",
        "free_tasks",
        "free_passed",
        *rate_columns("free_sr"),
        *rate_columns("free_conditional_sr"),
        "gap",
    )
    return Table(
        "conditioned_hops",
        "Hop success given a correct prefix (hop-conditioned episodes) beside the "
        "free-running Table 3 of the same agent; gap = sr - free_sr",
        columns,
        rows,
    )


def _conditioned_row(
    key: tuple[str, int, int], counts: list[int], free: dict[str, Any] | None
) -> tuple[Any, ...]:
    episodes, passed, left_out = counts
    sr = rate_values(passed, episodes)
    free_cells = (
        (
            free["tasks"],
            free["passed"],
            free["sr"],
            free["sr_lo"],
            free["sr_hi"],
            free["conditional_sr"],
            free["conditional_sr_lo"],
            free["conditional_sr_hi"],
        )
        if free
        else (None,) * 8
    )
    gap = sr[0] - free["sr"] if free and sr[0] is not None else None
    return (*key, episodes, passed, *sr, left_out, *free_cells, gap)


def _failure_order(value: str) -> tuple[int, int]:
    return (0, int(value)) if value.isdigit() else (1, 0) if value == "answer" else (2, 0)


def first_failures(episodes: Sequence[Episode]) -> Table:
    rows = []
    for n_hops, group in _groups(episodes, lambda e: e.n_hops).items():
        counts = _groups(group, lambda e: e.first_failure)
        for value in sorted(counts, key=_failure_order):
            rows.append(
                (n_hops, value, len(counts[value]), len(group), *rate_values(len(counts[value]), len(group)))
            )
    columns = ("n_hops", "first_failure", "tasks", "of_tasks", *rate_columns("share"))
    return Table("first_failures", "Where tasks first fail, by total hop count", columns, tuple(rows))


def episode_failures(episodes: Sequence[Episode]) -> Table:
    rows = tuple(
        (
            e.run_id,
            e.episode_id,
            e.task_id,
            e.n_hops,
            e.hops_passed,
            e.stop_reason,
            *failures.modes(e).values(),
        )
        for e in episodes
        if not e.passed
    )
    columns = ("run_id", "episode_id", "task_id", "n_hops", "hops_passed", "stop_reason", *failures.MODES)
    return Table("episode_failures", "Failure modes of each failed episode", columns, rows)


def failure_modes(per_episode: Table) -> Table:
    failed = len(per_episode.rows)
    rows = []
    for mode in failures.MODES:
        count = sum(bool(r[mode]) for r in per_episode.records())
        rows.append((mode, count, failed, *rate_values(count, failed)))
    return Table(
        "failure_modes",
        "Failure modes over failed episodes (an episode may have several)",
        ("mode", "episodes", "failed", *rate_columns("share")),
        tuple(rows),
    )


def per_site(episodes: Sequence[Episode]) -> Table:
    counts: dict[str, list[Any]] = defaultdict(lambda: [0, 0, set()])
    for episode in episodes:
        for hop in episode.hops:
            site = episode.procedure[hop.hop_index] if hop.hop_index < len(episode.procedure) else "?"
            counts[site][0] += 1
            counts[site][1] += hop.passed
            counts[site][2].add((episode.run_id, episode.task_id))
    rows = tuple(
        (site, len(tasks), hops, ok, *rate_values(ok, hops))
        for site, (hops, ok, tasks) in sorted(counts.items())
    )
    return Table(
        "per_site",
        "Hop success per site (the hop's procedure keyword)",
        ("site", "tasks", "hops", "hops_passed", *rate_columns("sr")),
        rows,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def actions_by_hops(episodes: Sequence[Episode]) -> Table:
    rows = []
    for n_hops, group in _groups(episodes, lambda e: e.n_hops).items():
        steps = [e.n_steps for e in group]
        rows.append(
            (
                n_hops,
                len(group),
                _mean(steps),
                min(steps),
                max(steps),
                _mean([e.n_steps for e in group if e.passed]),
                _mean([e.n_steps for e in group if not e.passed]),
            )
        )
    columns = (
        "n_hops",
        "tasks",
        "mean_steps",
        "min_steps",
        "max_steps",
        "mean_steps_passed",
        "mean_steps_failed",
    )
    return Table(
        "actions_by_hops", "Actions (steps) per task by hop count (paper Fig. 3)", columns, tuple(rows)
    )


def cost(episodes: Sequence[Episode]) -> Table:
    rows = tuple(
        (
            bucket,
            len(group),
            _mean([e.prompt_tokens for e in group]),
            _mean([e.completion_tokens for e in group]),
            _mean([e.cost_usd for e in group]),
            sum(e.cost_usd for e in group),
        )
        for bucket, group in _with_overall(episodes)
    )
    columns = (
        "bucket",
        "tasks",
        "mean_prompt_tokens",
        "mean_completion_tokens",
        "mean_cost_usd",
        "total_cost_usd",
    )
    return Table("cost", "Tokens and cost per task", columns, rows)


def all_tables(episodes: Sequence[Episode]) -> list[Table]:
    per_episode = episode_failures(episodes)
    return [
        sr_by_bucket(episodes),
        hop_positions(episodes),
        first_failures(episodes),
        failure_modes(per_episode),
        per_episode,
        per_site(episodes),
        actions_by_hops(episodes),
        cost(episodes),
    ]
