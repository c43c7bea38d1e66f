"""``python -m bench --only repeats``: the report of a repeated run, at MMInA's size.

One synthetic run of the 1,050 tasks × 3 repeats (``bench/synthetic.py`` with one run: a
task's later episodes are its further attempts; each episode passes with probability 0.6, on
its own), scored by ``hops``. Measured in one go: how long the whole report takes, and the
repeats' tables and ``hop_cost`` apart; the estimators against what independent repeats of
p = 0.6 give (pass@3 = 1 - 0.4³ = 0.936, pass^3 = 0.6³ = 0.216); and how much wider the
bootstrap interval over tasks and repeats is than Table 2's Wilson interval, which takes the
3,150 episodes as independent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.results import Section
from bench.synthetic import TASKS_PER_RUN, build
from mmina.analysis.hop_cost import hop_cost
from mmina.analysis.repeats import consistency, repeat_rates
from mmina.analysis.report import build_report
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.store import Store

REPEATS = 3
RUN = "synthetic-repeats"
PASS = 0.6
"""The chance a synthetic episode passes (``bench/synthetic.py``)."""


def repeats_section(work: Path, log: Callable[[str], None]) -> Section:
    section = Section("repeats")
    log(f"repeats: a synthetic run of {TASKS_PER_RUN} tasks × {REPEATS} repeats, scored")
    build(work / "store", TASKS_PER_RUN * REPEATS, log, one_run=RUN)
    store = Store.open(work / "store")
    rescore(store, RescoreConfig(evaluator="hops"))
    log("repeats: the report, then its repeats and hop_cost tables apart")
    started = time.perf_counter()
    report = build_report(store, [RUN])
    whole = time.perf_counter() - started
    episodes = report.scored.episodes
    section.add(
        "report of 1,050 tasks × 3 repeats",
        round(whole, 2),
        "s",
        note=f"{len(episodes)} episodes, every table",
    )
    for name, table in (
        ("repeats table", repeat_rates),
        ("consistency table", consistency),
        ("hop_cost table", hop_cost),
    ):
        started = time.perf_counter()
        table(episodes)
        section.add(name, round(time.perf_counter() - started, 3), "s", note="of the same episodes")
    _estimates(
        section,
        report.table("consistency").records(),
        report.table("repeats").records()[-1],
        report.table("sr_by_bucket").records()[-1],
    )
    return section


def _estimates(section: Section, consistency_rows: list[dict], repeats: dict, table2: dict) -> None:
    """The estimators beside what independent repeats give, and the two intervals' widths."""
    last = next(r for r in consistency_rows if r["k"] == REPEATS)
    section.add(
        "pass@3 (p = 0.6 each: 0.936 expected)",
        round(last["pass_at_k"], 3),
        "",
        note=f"{last['tasks']} tasks",
    )
    section.add(
        "pass^3 (p = 0.6 each: 0.216 expected)",
        round(last["pass_hat_k"], 3),
        "",
        note=f"{last['tasks']} tasks",
    )
    bootstrap = repeats["task_sr_hi"] - repeats["task_sr_lo"]
    wilson = table2["task_sr_hi"] - table2["task_sr_lo"]
    section.add(
        "bootstrap interval / Wilson interval, task SR",
        round(bootstrap / wilson, 2),
        "×",
        note=f"task SR {repeats['task_sr']:.3f}: bootstrap [{repeats['task_sr_lo']:.3f}, "
        f"{repeats['task_sr_hi']:.3f}], Wilson [{table2['task_sr_lo']:.3f}, {table2['task_sr_hi']:.3f}]",
    )
