"""Benchmarks that record the built-in suite in Chromium: capture cost, parallel recording,
memory, bytes per step, and archive replay against live recording.

Run A (one worker, full capture) is the reference every ratio is taken against.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.results import AT_LEAST, Section, Target, ratio
from mmina.actions.grammar import Action, ActionKind, parse_agent_output
from mmina.agents import OracleAgent, ScriptEnd
from mmina.agents.settings import AgentSettings
from mmina.executors.interface import Layout
from mmina.fixtures.web import FixtureWeb
from mmina.observations.observation import Observation
from mmina.recorder.browser import ActionFailed, BrowserConfig, BrowserSession
from mmina.recorder.episode_browser import EpisodeBrowser
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.fidelity import summarize
from mmina.replayer.replays import compare_runs, replay_run
from mmina.store import Store
from mmina.store.compact import compact_store
from mmina.store.marks import repaint
from mmina.store.sql import run_query
from mmina.tasks.task import Task
from mmina.tasks.taskcheck import load_suite

MEMORY_TASKS = tuple(f"{suite}/{n}" for suite in ("shopping", "wikipedia") for n in range(1, 6))
MEMORY_RUNS = 8
CAPTURE_PARTS = ("observe_ms", "tree_ms", "screenshot_ms", "images_ms", "som_ms")


@dataclass
class Recording:
    summary: RunSummary
    wall_s: float


def record(store: Path, task_ids: tuple[str, ...], workers: int = 1) -> Recording:
    """Record the tasks with the oracle."""
    started = time.perf_counter()
    summary = record_run(
        Store.open(store, create=True), RecordConfig(task_ids=task_ids, layout=Layout(workers=workers))
    )
    return Recording(summary, time.perf_counter() - started)


def act_without_capture(tasks: list[Task]) -> tuple[float, dict[str, list[str]]]:
    """The oracle's actions on the same tasks with capture off: only the accessibility tree an
    agent needs to act, no screenshot, images, set-of-marks, network trace or store."""
    actions: dict[str, list[str]] = {}
    config = BrowserConfig(screenshots=False, set_of_marks=False)
    started = time.perf_counter()  # like a recording: web and browser start-up included
    with FixtureWeb() as web:
        session = BrowserSession(
            BrowserConfig(screenshots=False, set_of_marks=False, extra_args=tuple(web.chromium_args()))
        )
        try:
            for task in tasks:
                actions[task.task_id] = _act(session, config, task)
            return time.perf_counter() - started, actions
        finally:
            session.close()


def _act(session: BrowserSession, config: BrowserConfig, task: Task) -> list[str]:
    browser = session.episode(None)
    try:
        browser.open(task.start_urls)
        return oracle_episode(browser, task, try_action)
    finally:
        browser.close()


def try_action(browser: EpisodeBrowser, action: Action) -> None:
    """Do ``action``; one that fails is the page's (the episode goes on, as a recording's does)."""
    try:
        browser.execute(action)
    except ActionFailed:
        pass


def oracle_episode(
    browser: EpisodeBrowser, task: Task, act: Callable[[EpisodeBrowser, Action], None]
) -> list[str]:
    """The oracle's episode of ``task`` in ``browser`` (open at the task's start pages), each of its
    actions done by ``act`` up to its stop: the actions rendered, the stop included."""
    agent, done = OracleAgent(), []
    agent.reset(task)
    for step in range(30):
        tree, elements = browser.tree()
        observation = Observation(
            step_index=step,
            url=browser.url,
            title="",
            tabs=[],
            active_tab=0,
            tree_text=tree,
            elements=elements,
            intent=task.intent,
        )
        try:
            action = parse_agent_output(agent.act(observation).output)
        except ScriptEnd:
            break
        done.append(action.render())
        if action.kind is ActionKind.STOP:
            break
        act(browser, action)
    return done


def recorded_actions(store: Store, run_id: str) -> dict[str, list[str]]:
    rows = run_query(
        store,
        "select e.task_id, s.action from steps s join episodes e using (episode_id) "
        f"where e.run_id = '{run_id}' order by e.task_id, s.step_index",
    ).rows
    actions: dict[str, list[str]] = {}
    for task_id, action in rows:
        actions.setdefault(task_id, []).append(action)
    return actions


def capture_section(store: Store, full: Recording, off_wall: float, same_actions: bool) -> Section:
    section = Section("capture")
    run_id = full.summary.run_id
    section.add("recorded with full capture", round(full.wall_s, 1), "s")
    section.add("same actions, capture off", round(off_wall, 1), "s", note=f"same actions: {same_actions}")
    section.add("full / off", round(ratio(full.wall_s, off_wall), 2), "×", Target(1.5))
    columns = ", ".join(f"median({p}), quantile_cont({p}, 0.9)" for p in CAPTURE_PARTS)
    [row] = run_query(store, f"select count(*), {columns} from steps where run_id = '{run_id}'").rows
    section.add("steps", row[0])
    for index, part in enumerate(CAPTURE_PARTS):
        p50, p90 = row[1 + 2 * index], row[2 + 2 * index]
        name = {
            "observe_ms": "capture per step (critical path)",
            "som_ms": "set-of-marks (worker thread)",
        }.get(part, part.removesuffix("_ms"))
        section.add(
            f"{name} p50",
            round(p50 or 0, 1),
            "ms",
            Target(80) if part == "observe_ms" else None,
            note=f"p90 {p90 or 0:.1f} ms",
        )
    return section


def parallel_section(one: Recording, two: Recording) -> Section:
    section = Section("parallel")
    rate_one = len(one.summary.episodes) / one.wall_s * 60
    rate_two = len(two.summary.episodes) / two.wall_s * 60
    section.add("--workers 1", round(rate_one, 1), "episodes/min")
    section.add("--workers 2", round(rate_two, 1), "episodes/min")
    section.add("2 workers / 1", round(ratio(rate_two, rate_one), 2), "×", Target(1.6, AT_LEAST))
    return section


def memory_section(store: Path, task_ids: tuple[str, ...], runs: int) -> Section:
    """A fresh recording process records the same tasks ``runs`` times (the same mix of
    episodes each time), as the oracle and as an oracle shown the set-of-marks image (so every
    step's image is painted): its peak RSS after the first run and after the last must not
    differ. The painting once made it grow, episode after episode: a painting thread per
    episode, whose large image buffers landed in fresh malloc arenas; one pair of painting
    threads per browser session now."""
    section = Section("memory")
    for label, flags in (("oracle", []), ("oracle shown set-of-marks", ["--marks"])):
        probe = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.memory_probe",
                "--store",
                str(store / label),
                "--runs",
                str(runs),
                *flags,
                *task_ids,
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent.parent,
        )
        samples = [json.loads(line) for line in probe.stdout.splitlines() if line.startswith("{")]
        first, last = samples[0], samples[-1]
        for sample in (first, last):
            section.add(
                f"{label}: worker peak RSS after {sample['episodes']} episodes",
                round(sample["peak_mb"], 1),
                "MB",
                note=f"resident now {sample['now_mb']:.0f} MB",
            )
        growth = (last["peak_mb"] - first["peak_mb"]) / max(1, last["episodes"] - first["episodes"])
        section.add(
            f"{label}: peak growth per episode",
            round(growth, 3),
            "MB",
            Target(0.03),
            note=f"{len(task_ids)} tasks recorded {runs} times over by one worker and its browser",
        )
    return section


def size_section(store: Store, run_id: str) -> Section:
    """Bytes per recorded step (and what they would be with every set-of-marks image stored, as
    before schema version 4), where they go, the dedup ratio of blobs, and files before/after
    compaction."""
    section = Section("size")
    files = [p for p in store.root.rglob("*.parquet")]
    steps = run_query(store, f"select count(*) from steps where run_id = '{run_id}'").rows[0][0]
    episodes = run_query(store, f"select count(*) from episodes where run_id = '{run_id}'").rows[0][0]
    total = sum(p.stat().st_size for p in files)
    section.add(
        "store bytes per step",
        round(total / steps),
        "B",
        Target(60_000),
        note=f"{total / 1e6:.1f} MB for {steps} steps",
    )
    som = repainted_bytes(store, run_id)
    section.add(
        "the same with every set-of-marks image stored (before)",
        round((total + som) / steps),
        "B",
        note=f"{som / 1e6:.1f} MB of distinct set-of-marks images, painted again from the marks",
    )
    blob_packs = sum(p.stat().st_size for p in files if p.relative_to(store.root).parts[0] == "blobs")
    section.add("bytes per step in tables (not blobs)", round((total - blob_packs) / steps), "B")
    for kind, size in run_query(store, KINDS_SQL.format(run=run_id)).rows:
        section.add(f"bytes per step, {kind} (distinct blobs)", round((size or 0) / steps), "B")
    logical, physical = run_query(store, DEDUP_SQL.format(run=run_id)).rows[0]
    section.add(
        "blob dedup ratio",
        round(ratio(logical or 0, physical or 0), 2),
        "×",
        note=f"{(logical or 0) / 1e6:.1f} MB referenced, {(physical or 0) / 1e6:.1f} MB stored",
    )
    section.add("files per episode", round(len(files) / episodes, 2))
    compact_store(store, [run_id])
    after = len(list(store.root.rglob("*.parquet")))
    section.add(
        "files per episode after compaction",
        round(after / episodes, 2),
        note="blob packs stay one per episode",
    )
    return section


def repainted_bytes(store: Store, run_id: str) -> int:
    """Bytes of the distinct set-of-marks images of a run's steps, painted from their marks
    (each episode's screenshots read from its blob packs at once)."""
    rows = run_query(
        store,
        f"select e.blob_packs, list(s.screenshot), list(s.marks) from steps s join episodes e "
        f"using (episode_id) where s.run_id = '{run_id}' and s.screenshot is not null "
        f"group by e.episode_id, e.blob_packs",
    ).rows
    painted: dict[str, int] = {}
    for packs, digests, marks_lists in rows:
        shots = store.read_blobs(sorted(set(digests)), packs)
        for digest, marks in zip(digests, marks_lists):
            key = digest + json.dumps(marks, sort_keys=True)
            if key not in painted:
                painted[key] = len(repaint(shots[digest], marks or []))
    return sum(painted.values())


REFS_SQL = """
with refs as (
    select 'screenshots' as kind, screenshot as sha from steps where run_id = '{run}'
    union all select 'set-of-marks images', screenshot_som from steps where run_id = '{run}'
    union all select 'page images', unnest(images).blob from steps where run_id = '{run}'
    union all select 'network bodies', request_body from requests where run_id = '{run}'
    union all select 'network bodies', response_body from requests where run_id = '{run}'
    union all select 'model input', model_input from steps where run_id = '{run}'
), sizes as (select distinct sha256, size from blobs)
"""
"""Every blob a run's rows refer to, by kind, and the size of every stored blob."""

KINDS_SQL = (
    REFS_SQL
    + """
select kind, sum(size) from (select distinct kind, sha from refs where sha is not null) r
join sizes s on s.sha256 = r.sha group by kind order by kind
"""
)

DEDUP_SQL = (
    REFS_SQL
    + """
select (select sum(s.size) from refs join sizes s on s.sha256 = refs.sha where refs.kind <> 'model input'),
       (select sum(size) from sizes)
"""
)
"""Bytes referenced by pages and traffic (as this figure was first defined, before model
inputs were stored) against all bytes stored."""


def replay_section(store: Store, full: Recording, live_rerun: bool, drift: int = 3) -> Section:
    """Issue 5's check and issue 6's ratio: replay the drift-0 run with a drifted web up."""
    section = Section("replay")
    with FixtureWeb(drift=drift) as live:
        started = time.perf_counter()
        report = replay_run(
            store, full.summary.run_id, browser=BrowserConfig(extra_args=tuple(live.chromium_args()))
        )
        wall = time.perf_counter() - started
        hits = live.served
    summary = summarize(report.episodes)
    section.add("archive replay", round(wall, 1), "s", note=f"{summary['episodes']} episodes")
    section.add("replay / live recording", round(ratio(wall, full.wall_s), 2), "×", Target(1.0))
    section.add(
        "steps with URL and tree reproduced",
        round(summary["fidelity"], 4),
        "share",
        Target(1.0, AT_LEAST),
        note=f"{summary['url_equal']} URLs, {summary['tree_equal']} trees of {summary['steps']}",
    )
    section.add(
        "screenshots pixel-identical",
        round(summary["screenshots_identical"] or 0, 4),
        "share",
        Target(0.99, AT_LEAST),
    )
    section.add("requests unmatched by the archive", summary["requests"].unmatched, "", Target(0))
    section.add(f"requests reaching the live drift-{drift} web", hits, "", Target(0))
    if live_rerun:
        rerun = record_run(
            store,
            RecordConfig(
                task_ids=tuple(e.task_id for e in full.summary.episodes),
                agent="replay",
                drift=drift,
                agent_settings=AgentSettings(from_run=full.summary.run_id),
            ),
        )
        diverged = summarize(compare_runs(store, full.summary.run_id, rerun.run_id))
        section.add(
            f"live re-run at drift {drift}: trees equal",
            round(diverged["tree_equal"] / diverged["steps"], 4),
            "share",
            note=f"{diverged['tree_equal']} of {diverged['steps']} steps; the live web drifted",
        )
    return section


def run_recording(
    work: Path, task_ids: tuple[str, ...], live_rerun: bool, log: Callable[[str], None]
) -> list[Section]:
    tasks = [t for t in load_suite().tasks if t.task_id in set(task_ids)]
    log(f"recording {len(tasks)} tasks, one worker, full capture")
    full = record(work / "store", task_ids)
    store = Store.open(work / "store")
    log("the same actions with capture off")
    off_wall, off_actions = act_without_capture(tasks)
    same = off_actions == recorded_actions(store, full.summary.run_id)
    log("recording again with two workers")
    two = record(work / "store-2", task_ids, workers=2)
    sections = [capture_section(store, full, off_wall, same), parallel_section(full, two)]
    log("replaying the run from the archive, drifted web up")
    sections.append(replay_section(store, full, live_rerun))
    sections.append(size_section(Store.open(work / "store-2"), two.summary.run_id))
    return sections
