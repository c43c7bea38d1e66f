"""Repeated runs (``mmina record --repeats K``): the rate over repeats, consistency, flaky tasks.

A run's *repeats* of a task are its episodes of that task (``attempt`` 1..K), each scored.
Rates pool every repeat (with all repeats recorded, the mean of the repeats' rates) and carry
a two-stage bootstrap interval over tasks and repeats (:func:`mmina.stats.nested_bootstrap`);
beside them, the lowest and highest rate a single repeat had. Consistency is pass@k (some of
k repeats passes) and pass^k (all k pass), each task's unbiased estimate averaged over the
tasks with at least k repeats. Hop-conditioned episodes are not repeats of a run's task: they
are left out here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mmina.analysis.data import Episode
from mmina.analysis.tables import Table, rate_columns
from mmina.stats import Cell, nested_bootstrap, pass_at_k, pass_hat_k, rate
from mmina.tasks.task import BUCKETS

Repeats = dict[tuple[str, str], list[Episode]]
"""(run, task) → its scored repeats, in attempt order."""

REPEAT_COLUMNS = (
    "run_id",
    "agent",
    "bucket",
    "tasks",
    "repeats",
    "episodes",
    *rate_columns("task_sr"),
    "task_sr_min",
    "task_sr_max",
    *rate_columns("hop_sr"),
    "hop_sr_min",
    "hop_sr_max",
)


def repeats_of(episodes: Iterable[Episode]) -> Repeats:
    """Every (run, task)'s free-running scored episodes, in attempt order."""
    found: Repeats = defaultdict(list)
    for episode in sorted(episodes, key=lambda e: e.attempt):
        if not episode.conditioned:
            found[(episode.run_id, episode.task_id)].append(episode)
    return dict(found)


def has_repeats(episodes: Iterable[Episode]) -> bool:
    """Whether some task of some run was scored more than once (``record --repeats``)."""
    return any(len(group) > 1 for group in repeats_of(episodes).values())


def _by_run(repeats: Repeats) -> dict[str, Repeats]:
    runs: dict[str, Repeats] = defaultdict(dict)
    for (run_id, task_id), group in repeats.items():
        runs[run_id][(run_id, task_id)] = group
    return dict(sorted(runs.items()))


def _rates(groups: Sequence[list[Episode]], cell: Callable[[Episode], Cell]) -> tuple[Any, ...]:
    """A pooled rate, its bootstrap interval, and the lowest and highest rate of one repeat."""
    cells = [[cell(e) for e in group] for group in groups]
    numerator, denominator = (sum(c[i] for g in cells for c in g) for i in (0, 1))
    per_repeat: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for group in groups:
        for episode in group:
            n, d = cell(episode)
            per_repeat[episode.attempt][0] += n
            per_repeat[episode.attempt][1] += d
    single = [n / d for n, d in per_repeat.values() if d]
    return (
        rate(int(numerator), int(denominator)),
        *nested_bootstrap(cells),
        min(single, default=None),
        max(single, default=None),
    )


def _task_cell(episode: Episode) -> Cell:
    return float(episode.passed), 1.0


def _hop_cell(episode: Episode) -> Cell:
    return float(episode.hops_passed), float(episode.hops_total)


def repeat_rates(episodes: Sequence[Episode]) -> Table:
    """Per run and hop-count bucket (and overall): task and hop SR over every repeat, with the
    bootstrap interval over tasks and repeats, and the range of the single repeats' rates."""
    rows = []
    for run_id, repeats in _by_run(repeats_of(episodes)).items():
        agent = next(iter(repeats.values()))[0].agent_label
        buckets: dict[str, list[list[Episode]]] = defaultdict(list)
        for group in repeats.values():
            buckets[group[0].bucket].append(group)
        overall = ("overall", list(repeats.values()))
        for bucket, groups in [*((b, buckets[b]) for b in BUCKETS if b in buckets), overall]:
            rows.append(
                (
                    run_id,
                    agent,
                    bucket,
                    len(groups),
                    max(len(g) for g in groups),
                    sum(len(g) for g in groups),
                    *_rates(groups, _task_cell),
                    *_rates(groups, _hop_cell),
                )
            )
    return Table(
        "repeats",
        "Success over repeated runs (record --repeats): rates over every repeat with a "
        "bootstrap 95% interval over tasks and repeats; min/max: the rate of the worst and best single "
        "repeat",
        REPEAT_COLUMNS,
        tuple(rows),
    )


def consistency(episodes: Sequence[Episode]) -> Table:
    """Per run and k: pass@k and pass^k, each task's unbiased estimate averaged over the tasks
    with at least k repeats (k = 1 is the plain success rate)."""
    rows = []
    for run_id, repeats in _by_run(repeats_of(episodes)).items():
        counts = [(len(group), sum(e.passed for e in group)) for group in repeats.values()]
        for k in range(1, max(n for n, _ in counts) + 1):
            at = [v for n, c in counts if (v := pass_at_k(n, c, k)) is not None]
            hat = [v for n, c in counts if (v := pass_hat_k(n, c, k)) is not None]
            rows.append((run_id, k, len(at), sum(at) / len(at), sum(hat) / len(hat)))
    return Table(
        "consistency",
        "Consistency over repeats: pass@k (at least one of k repeats passes) and pass^k "
        "(all k pass), unbiased estimates averaged over tasks",
        ("run_id", "k", "tasks", "pass_at_k", "pass_hat_k"),
        tuple(rows),
    )


def flaky_tasks(episodes: Sequence[Episode]) -> Table:
    """The tasks whose repeats disagree, the flakiest first (pass rate nearest one half), with
    the repeats that passed."""
    rows = []
    for (run_id, task_id), group in repeats_of(episodes).items():
        passed = [e.attempt for e in group if e.passed]
        if 0 < len(passed) < len(group):
            hops = sum(e.hops_passed for e in group) / len(group)
            rows.append(
                (
                    run_id,
                    task_id,
                    group[0].n_hops,
                    len(group),
                    len(passed),
                    len(passed) / len(group),
                    hops,
                    ",".join(map(str, passed)),
                )
            )
    rows.sort(key=lambda r: (-r[5] * (1 - r[5]), r[0], r[1]))
    return Table(
        "flaky_tasks",
        "Flaky tasks: repeats that disagree, the flakiest first",
        (
            "run_id",
            "task_id",
            "n_hops",
            "repeats",
            "passed",
            "pass_rate",
            "mean_hops_passed",
            "passed_repeats",
        ),
        tuple(rows),
    )


def repeat_tables(episodes: Sequence[Episode]) -> list[Table]:
    return [repeat_rates(episodes), consistency(episodes), flaky_tasks(episodes)]
