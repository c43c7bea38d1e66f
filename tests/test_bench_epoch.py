"""The epoch bench's choice of tasks and of the run its projection comes from (``bench/epoch.py``).

The bench itself runs for half an hour (its quick form under MMINA_HEAVY=1, ``test_bench.py``);
what is checked here is what would silently change its figures: that the MMInA-length tasks are
there and are of MMInA's length, and that the projected epoch is taken from them at 32 in flight
while the ratio to the previous release stays on the short tasks it was measured on.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from bench.cputree import CpuSplit
from bench.epoch import DELAY_S, LONG, LONG_SCRIPT, SHORT, Measured, Setting, long_tasks, projected_from, short_tasks
from mmina.taskcheck import load_suite


def test_long_tasks_are_of_mminas_length_and_cross_sites() -> None:
    suite_tasks = load_suite().tasks
    tasks = long_tasks(suite_tasks)
    assert len(tasks) >= 8
    for task in tasks:
        script = task.reference_script or []
        assert LONG_SCRIPT[0] <= len(script) <= LONG_SCRIPT[1]
        hosts = {urlsplit(u).hostname for u in task.start_urls} | {
            urlsplit(s["url"]).hostname for s in script if isinstance(s, dict) and s.get("action") == "goto"}
        assert len(hosts) >= 2, task.task_id
    assert not {t.task_id for t in tasks} & {t.task_id for t in short_tasks(suite_tasks)}


def measured(setting: Setting, steps: int) -> Measured:
    return Measured(setting, 60.0, setting.episodes, steps, 0, 0.0, CpuSplit({"mmina": steps * 0.2}, 60.0), DELAY_S)


def test_the_projection_comes_from_the_long_tasks_at_32_and_the_release_ratio_from_the_short() -> None:
    runs = [measured(Setting("1", 12, 1), 48), measured(Setting("32", 256, 32), 1000),
            measured(Setting("32 long", 128, 32, tasks=LONG), 1100), measured(Setting("64", 256, 64), 1000),
            measured(Setting("2 × 16", 256, 16, 2), 1000)]
    assert projected_from(runs).setting.label == "32 long"
    assert projected_from(runs, SHORT).setting.label == "32"
    without_long = [r for r in runs if r.setting.tasks != LONG]
    assert projected_from(without_long).setting.label == "32"
    quick = [measured(Setting("1", 2, 1), 8), measured(Setting("8", 8, 8), 32),
             measured(Setting("8 long", 8, 8, tasks=LONG), 70), measured(Setting("2 × 4", 8, 4, 2), 32)]
    assert projected_from(quick).setting.label == "8 long"
    assert projected_from(quick, SHORT).setting.label == "8"
