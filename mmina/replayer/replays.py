"""Replay runs: stored episodes (or a new agent) re-driven on the archived web, recorded anew.

A replay is recorded like any run — same steps, requests and blobs — so everything that reads
a run (``mmina sql``, rescoring) reads a replay too. Its ``runs`` row says what it is: ``agent``
is ``replay`` (or the new agent's name in ``--agent`` mode) and ``config_json`` holds
``{"mode": "replay" | "agent", "source_run": ..., "source_episodes": [...], ...}``.

Every request of a replay context is answered by :class:`ArchiveRouter`; nothing reaches the
network, and no fixture web is started. The page clock follows the source episode's recorded
timeline (``timeline.py``; a new agent's replay: it starts at the recorded start and runs) and
``Math.random`` and ``crypto`` are seeded from the source episode id. Episodes run in one browser,
a fresh context each, one after another or ``concurrency`` at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from mmina.agents.registry import INTERACTIVE_AGENTS, make_agent
from mmina.agents.settings import AgentSettings
from mmina.errors import AgentError, StoreError
from mmina.executors.interface import Layout
from mmina.executors.spread import spread
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.recording import new_run_id
from mmina.recorder.verdicts import with_verdicts_due
from mmina.replayer.fidelity import (
    PIXEL_TOLERANCE,
    EpisodeFidelity,
    StepView,
    compare_steps,
    screenshot_differ,
    summarize,
)
from mmina.replayer.jobs import STEP_COLUMNS, AgentEpisode, AgentJob, ReplaySetup, StoredActionsJob
from mmina.replayer.source import Source, SourceRun, by_episode, select_sources
from mmina.store import Store
from mmina.store.layout import check_id
from mmina.store.runs import SuiteRef, run_row
from mmina.tasks.budget import Limits

OnStart = Callable[[str, int], None]


@dataclass
class ReplayReport:
    """A replay run and how faithfully it reproduced its source."""

    source_run: str
    replay_run: str
    store: str
    episodes: list[EpisodeFidelity] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return summarize(self.episodes)

    @property
    def fidelity(self) -> float:
        return self.summary()["fidelity"]

    def as_json(self) -> dict[str, Any]:
        """The report for scripts (``--format json``): the summary and every episode's steps."""
        summary = self.summary()
        return {
            "source_run": self.source_run,
            "replay_run": self.replay_run,
            "store": self.store,
            "summary": {**summary, "requests": asdict(summary["requests"])},
            "episodes": [e.as_json() for e in self.episodes],
        }


@dataclass
class AgentReplayReport:
    source_run: str
    replay_run: str
    store: str
    agent: str
    episodes: list[AgentEpisode] = field(default_factory=list)

    @property
    def coverage_gaps(self) -> list[str]:
        """Every distinct ``METHOD URL`` that fell outside the archive, in first-seen order."""
        return list(dict.fromkeys(g for e in self.episodes for g in e.coverage_gaps))

    @property
    def unmatched(self) -> int:
        return sum(e.requests.unmatched for e in self.episodes)

    def as_json(self) -> dict[str, Any]:
        """The report for scripts (``--format json``)."""
        episodes = [
            {
                **asdict(e.result),
                "success": e.result.success,
                "requests": asdict(e.requests),
                "coverage_gaps": list(e.coverage_gaps),
            }
            for e in self.episodes
        ]
        return {
            "source_run": self.source_run,
            "replay_run": self.replay_run,
            "store": self.store,
            "agent": self.agent,
            "episodes": episodes,
            "coverage_gaps": self.coverage_gaps,
            "unmatched": self.unmatched,
        }


# ---------------------------------------------------------------- replaying stored episodes


def replay_run(
    store: Store,
    run_id: str | None = None,
    episode_id: str | None = None,
    *,
    browser: BrowserConfig | None = None,
    new_run: str | None = None,
    tolerance: int = PIXEL_TOLERANCE,
    layout: Layout = Layout(),
    on_start: OnStart | None = None,
    on_episode: Callable[[EpisodeFidelity], None] | None = None,
) -> ReplayReport:
    """Re-drive every episode of ``run_id`` (or the one ``episode_id``) from the archive.

    Each episode gets its own archive (its own recorded requests), a fresh context, the stored
    actions, and a fidelity comparison with its recording. ``browser`` may name the executable
    and extra Chromium arguments; viewport and screenshot settings come from the source run.
    ``layout`` spreads the episodes over threads, processes or Ray actors (``mmina.executors.spread``).
    """
    source_run, sources = select_sources(store, run_id, episode_id)
    episodes = frozenset(s.episode_id for s in sources)
    source = SourceRun.load(store, source_run, set(episodes))
    replay_id = _check_new_run(new_run) or new_run_id("replay")
    settings = {
        "mode": "replay",
        "source_run": source_run,
        "source_episodes": [s.episode_id for s in sources],
        "clock": "each source episode's recorded timeline (mmina.replayer.timeline)",
        "limits": asdict(source.limits),
        "archive": "per episode",
        **layout.describe(),
    }
    setup = ReplaySetup(
        store=store.location,
        replay_id=replay_id,
        source_run=source_run,
        episodes=episodes,
        browser=source.browser_config(browser),
        tolerance=tolerance,
    )
    report = ReplayReport(source_run, replay_id, str(store.root))
    items = list(_numbered(sources))
    with _new_run(
        store, setup, source, [s.task_id for s in sources], None, settings, layout, len(items)
    ) as session:
        if on_start:
            on_start(replay_id, len(sources))
        here = StoredActionsJob(setup, session, store, source) if session else None
        settled = partial(_replayed_source, store, replay_id)
        for _item, fidelity in spread(partial(StoredActionsJob, setup), items, layout, here, settled):
            report.episodes.append(fidelity)
            if on_episode:
                on_episode(fidelity)
    order = {s.episode_id: i for i, s in enumerate(sources)}
    report.episodes.sort(key=lambda e: order[e.source_episode])
    return report


def _replayed(store: Store, replay_id: str) -> set[tuple[str, int]]:
    """The tasks and attempts the replay run has committed (a lost worker's items that are
    there are not replayed again: ``mmina.executors.spread.spread``'s ``settled``)."""
    rows = store.read("episodes", run_id=replay_id, columns=["task_id", "attempt"])
    return set(zip(rows.column("task_id").to_pylist(), rows.column("attempt").to_pylist()))


def _replayed_source(store: Store, replay_id: str, item: tuple[int, Source]) -> bool:
    return (item[1].task_id, item[0]) in _replayed(store, replay_id)


def _replayed_task(store: Store, replay_id: str, item: tuple[str, tuple[Source, ...]]) -> bool:
    return (item[0], 1) in _replayed(store, replay_id)


def _numbered(sources: Sequence[Source]) -> Iterator[tuple[int, Source]]:
    """Each source with its attempt (its repeat, as in the source run)."""
    for source in sources:
        yield source.attempt, source


# ---------------------------------------------------------------- a new agent on the archived web


def replay_agent(
    store: Store,
    agent: str,
    run_id: str | None = None,
    episode_id: str | None = None,
    *,
    settings: AgentSettings | None = None,
    limits: Limits | None = None,
    task_ids: Sequence[str] = (),
    browser: BrowserConfig | None = None,
    new_run: str | None = None,
    layout: Layout = Layout(),
    on_start: OnStart | None = None,
    on_episode: Callable[[AgentEpisode], None] | None = None,
) -> AgentReplayReport:
    """Run ``agent`` on each task of the source against that task's archived web.

    The archive of a task pools every source episode of it (in recorded order); the clock
    starts at the first one's start. Requests outside the archive get an error response and are
    reported as coverage gaps: what the agent saw there is not what the live site showed.
    """
    if agent in INTERACTIVE_AGENTS and layout != Layout():
        raise AgentError(f"the {agent} agent reads the terminal: use it with --workers 1 --concurrency 1")
    source_run, sources = select_sources(store, run_id, episode_id)
    by_task = _by_task(sources, task_ids, source_run)
    episodes = frozenset(s.episode_id for group in by_task.values() for s in group)
    source = SourceRun.load(store, source_run, set(episodes))
    settings = settings or AgentSettings()
    replay_id = _check_new_run(new_run) or new_run_id(agent)
    settings = replace(settings, run_id=replay_id)
    the_agent = make_agent(agent, settings, store)
    limits = limits or Limits()
    config = {
        "mode": "agent",
        "source_run": source_run,
        "agent": agent,
        "source_episodes": [s.episode_id for group in by_task.values() for s in group],
        "clock": "starts at the first source episode's start, runs in real time",
        "limits": asdict(limits),
        "agent_settings": asdict(replace(settings, run_id=None)),
        "archive": "per task",
        **layout.describe(),
    }
    setup = ReplaySetup(
        store=store.location,
        replay_id=replay_id,
        source_run=source_run,
        episodes=episodes,
        browser=source.browser_config(browser),
        agent=agent,
        settings=settings,
        limits=limits,
    )
    report = AgentReplayReport(source_run, replay_id, str(store.root), agent)
    items = [(task_id, tuple(group)) for task_id, group in by_task.items()]
    with _new_run(store, setup, source, list(by_task), settings.model, config, layout, len(items)) as session:
        if on_start:
            on_start(replay_id, len(by_task))
        here = AgentJob(setup, session, store, source, the_agent) if session else None
        settled = partial(_replayed_task, store, replay_id)
        for _item, episode in spread(partial(AgentJob, setup), items, layout, here, settled):
            report.episodes.append(episode)
            if on_episode:
                on_episode(episode)
    order = {t: i for i, t in enumerate(by_task)}
    report.episodes.sort(key=lambda e: order[e.result.task_id])
    return report


def _by_task(sources: list[Source], task_ids: Sequence[str], source_run: str) -> dict[str, list[Source]]:
    grouped: dict[str, list[Source]] = {}
    for source in sources:
        grouped.setdefault(source.task_id, []).append(source)
    missing = [t for t in task_ids if t not in grouped]
    if missing:
        raise StoreError(f"run {source_run} has no episode of task(s) {', '.join(missing)}")
    return {t: grouped[t] for t in task_ids} if task_ids else grouped


# ---------------------------------------------------------------- shared machinery


@contextmanager
def _new_run(
    store: Store,
    setup: ReplaySetup,
    source: SourceRun,
    task_ids: list[str],
    model: str | None,
    config: dict[str, Any],
    layout: Layout,
    items: int,
) -> Iterator[BrowserSession | None]:
    """Start a browser (for its version, and for the work if it stays in this process: then it
    is yielded, else None), create the replay run, and always close the browser again."""
    session = BrowserSession(setup.browser)
    try:
        _begin(
            store,
            setup.replay_id,
            source,
            task_ids,
            setup.agent,
            model,
            with_verdicts_due({**config, "browser": asdict(setup.browser)}),
            session.version,
        )
        if not layout.in_this_process(items):
            session.close()
        yield session if layout.in_this_process(items) else None
    finally:
        session.close()


def _check_new_run(run_id: str | None) -> str | None:
    return check_id("run id", run_id) if run_id else None


def _begin(
    store: Store,
    run_id: str,
    source: SourceRun,
    task_ids: list[str],
    agent: str,
    model: str | None,
    config: dict[str, Any],
    browser_version: str,
) -> None:
    """Create the replay run: the source's suite and tasks, this machine's software."""
    tasks = [{k: v for k, v in source.tasks[t].items() if k != "run_id"} for t in dict.fromkeys(task_ids)]
    recorded = source.row
    suite = SuiteRef(recorded["task_suite"], recorded["task_suite_path"], recorded["task_suite_sha256"])
    row = run_row(
        agent,
        model,
        config,
        suite,
        len(tasks),
        browser_version,
        (recorded["viewport_width"], recorded["viewport_height"]),
    )
    if not store.begin_run(run_id, row, tasks):
        raise StoreError(f"run {run_id} already exists in {store.root}; choose another --run-id")


# ---------------------------------------------------------------- comparing two stored runs


def compare_runs(
    store: Store, recorded_run: str, other_run: str, tolerance: int = PIXEL_TOLERANCE
) -> list[EpisodeFidelity]:
    """Each task's latest episode in ``other_run`` compared step by step with its latest in
    ``recorded_run`` (e.g. a live re-run on a drifted site); no request counts."""
    latest = {run: _latest_by_task(store, run) for run in (recorded_run, other_run)}
    tasks = [t for t in latest[recorded_run] if t in latest[other_run]]
    pairs = [(latest[recorded_run][t], latest[other_run][t]) for t in tasks]
    steps = {
        run: by_episode(store, "steps", run, "step_index", {p[i] for p in pairs}, STEP_COLUMNS)
        for i, run in enumerate((recorded_run, other_run))
    }
    digests = {
        r["screenshot"]
        for group in steps.values()
        for rows in group.values()
        for r in rows
        if r["screenshot"]
    }
    differ = screenshot_differ(store.read_blobs(sorted(digests)), tolerance)
    result = []
    for task, (old, new) in zip(tasks, pairs):
        recorded, replayed = steps[recorded_run].get(old, []), steps[other_run].get(new, [])
        compared = compare_steps(
            [StepView.from_row(r) for r in recorded], [StepView.from_row(r) for r in replayed], differ
        )
        result.append(
            EpisodeFidelity(
                task_id=task,
                source_episode=old,
                replay_episode=new,
                recorded_steps=len(recorded),
                replayed_steps=len(replayed),
                steps=compared,
            )
        )
    return result


def _latest_by_task(store: Store, run_id: str) -> dict[str, str]:
    """Task id → the run's most recently finished episode of it."""
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id", "task_id", "ended_at"])
    return {row["task_id"]: row["episode_id"] for row in episodes.sort_by("ended_at").to_pylist()}
