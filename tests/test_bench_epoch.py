"""The epoch bench's choice of tasks and of the run its projection comes from (``bench/epoch.py``).

The bench itself runs for half an hour (its quick form under MMINA_HEAVY=1, ``test_bench.py``);
what is checked here is what would silently change its figures: that the MMInA-length tasks are
there and are of MMInA's length, and that the projected epoch is taken from them at 32 in flight
while the ratio to the previous release stays on the short tasks it was measured on.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from bench.cputree import CpuSplit
from bench.epoch import (
    DELAY_S,
    LONG,
    LONG_SCRIPT,
    SHORT,
    Measured,
    Setting,
    long_tasks,
    oracle_policy,
    projected_from,
    short_tasks,
)
from mmina.actions.grammar import parse_action
from mmina.agents.oracle import script_action
from mmina.agents.prompts import user_text
from mmina.agents.settings import HISTORY_ACTIONS
from mmina.observations.observation import Observation
from mmina.tasks.taskcheck import load_suite


def test_long_tasks_are_of_mminas_length_and_cross_sites() -> None:
    suite_tasks = load_suite().tasks
    tasks = long_tasks(suite_tasks)
    assert len(tasks) >= 8
    for task in tasks:
        script = task.reference_script or []
        assert LONG_SCRIPT[0] <= len(script) <= LONG_SCRIPT[1]
        hosts = {urlsplit(u).hostname for u in task.start_urls} | {
            urlsplit(s["url"]).hostname for s in script if isinstance(s, dict) and s.get("action") == "goto"
        }
        assert len(hosts) >= 2, task.task_id
    assert not {t.task_id for t in tasks} & {t.task_id for t in short_tasks(suite_tasks)}


def test_the_bench_model_follows_the_whole_script_though_the_prompt_shows_only_the_last_actions() -> None:
    """The agent's prompt shows the last ``HISTORY_ACTIONS`` actions, numbered from 1: the
    bench's model must still answer each step of an MMInA-length script in turn, and stop after
    the last (it once repeated the sixth action until the repeat limit ended the episode)."""
    tasks = long_tasks(load_suite().tasks)
    policy = oracle_policy(tasks)
    for task in tasks:
        page = Observation(
            step_index=0,
            url=task.start_urls[0],
            title="",
            tabs=[],
            active_tab=0,
            tree_text="",
            elements=[],
            intent=task.intent,
        )
        script = [script_action(step, page) for step in task.reference_script or []]
        assert len(script) > HISTORY_ACTIONS
        taken: list[str] = []
        for step in script:
            answer = parse_action(policy(user_text(page, taken[-HISTORY_ACTIONS:], 10_000, [])))
            assert answer == step, (task.task_id, len(taken))
            taken.append(answer.render())
        assert policy(user_text(page, taken[-HISTORY_ACTIONS:], 10_000, [])).startswith("stop"), task.task_id


def measured(setting: Setting, steps: int) -> Measured:
    return Measured(
        setting, 60.0, setting.episodes, steps, 0, 0.0, CpuSplit({"mmina": steps * 0.2}, 60.0), DELAY_S
    )


def test_the_projection_comes_from_the_long_tasks_at_32_and_the_release_ratio_from_the_short() -> None:
    runs = [
        measured(Setting("1", 12, 1), 48),
        measured(Setting("32", 256, 32), 1000),
        measured(Setting("32 long", 128, 32, tasks=LONG), 1100),
        measured(Setting("64", 256, 64), 1000),
        measured(Setting("2 × 16", 256, 16, 2), 1000),
    ]
    assert projected_from(runs).setting.label == "32 long"
    assert projected_from(runs, SHORT).setting.label == "32"
    without_long = [r for r in runs if r.setting.tasks != LONG]
    assert projected_from(without_long).setting.label == "32"
    quick = [
        measured(Setting("1", 2, 1), 8),
        measured(Setting("8", 8, 8), 32),
        measured(Setting("8 long", 8, 8, tasks=LONG), 70),
        measured(Setting("2 × 4", 8, 4, 2), 32),
    ]
    assert projected_from(quick).setting.label == "8 long"
    assert projected_from(quick, SHORT).setting.label == "8"
