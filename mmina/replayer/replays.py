"""Replay runs: stored episodes (or a new agent) re-driven on the archived web, recorded anew.

A replay is recorded like any run — same steps, requests and blobs — so everything that reads
a run (``mmina sql``, rescoring) reads a replay too. Its ``runs`` row says what it is: ``agent``
is ``replay`` (or the new agent's name in ``--agent`` mode) and ``config_json`` holds
``{"mode": "replay" | "agent", "source_run": ..., "source_episodes": [...], ...}``.

Every request of a replay context is answered by :class:`ArchiveRouter`; nothing reaches the
network, and no fixture web is started. The page clock is frozen at the source episode's
start and ``Math.random`` is seeded from the source episode id. Episodes run in one browser,
a fresh context each, one after another or ``concurrency`` at once.
"""
from __future__ import annotations

import bisect
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from mmina.agents.protocol import Agent
from mmina.agents.registry import INTERACTIVE_AGENTS, make_agent
from mmina.agents.settings import AgentSettings
from mmina.agents.stored_actions import ReplayAgent
from mmina.budget import Limits
from mmina.errors import AgentError, StoreError
from mmina.recorder.browser import BrowserConfig, RestartingSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.recorder.recording import new_run_id
from mmina.recorder.workers import in_flight
from mmina.replayer.archive import MatchKind
from mmina.replayer.fidelity import (PIXEL_TOLERANCE, EpisodeFidelity, RequestCounts, StepView, compare_steps,
                                     screenshot_differ, summarize)
from mmina.replayer.router import ArchiveRouter, Served, seed_for
from mmina.replayer.source import Rows, Source, SourceRun, by_episode, select_sources
from mmina.runs import SuiteRef, run_row
from mmina.store import Store
from mmina.store.layout import check_id
from mmina.tasks import Task

STEP_COLUMNS = ["episode_id", "step_index", "url", "tree_text", "screenshot", "action", "model_output"]
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
        return {"source_run": self.source_run, "replay_run": self.replay_run, "store": self.store,
                "summary": {**summary, "requests": asdict(summary["requests"])},
                "episodes": [e.as_json() for e in self.episodes]}


@dataclass(frozen=True)
class AgentEpisode:
    """One episode of a new agent on the archived web, with the requests the archive lacked."""

    result: EpisodeResult
    requests: RequestCounts
    coverage_gaps: tuple[str, ...]


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
        episodes = [{**asdict(e.result), "success": e.result.success, "requests": asdict(e.requests),
                     "coverage_gaps": list(e.coverage_gaps)} for e in self.episodes]
        return {"source_run": self.source_run, "replay_run": self.replay_run, "store": self.store,
                "agent": self.agent, "episodes": episodes, "coverage_gaps": self.coverage_gaps,
                "unmatched": self.unmatched}


# ---------------------------------------------------------------- replaying stored episodes

def replay_run(store: Store, run_id: str | None = None, episode_id: str | None = None, *,
               browser: BrowserConfig | None = None, new_run: str | None = None,
               tolerance: int = PIXEL_TOLERANCE, concurrency: int = 1, on_start: OnStart | None = None,
               on_episode: Callable[[EpisodeFidelity], None] | None = None) -> ReplayReport:
    """Re-drive every episode of ``run_id`` (or the one ``episode_id``) from the archive.

    Each episode gets its own archive (its own recorded requests), a fresh context, the stored
    actions, and a fidelity comparison with its recording. ``browser`` may name the executable
    and extra Chromium arguments; viewport and screenshot settings come from the source run.
    ``concurrency`` episodes are replayed at once, each in its own context of one Chromium.
    """
    source_run, sources = select_sources(store, run_id, episode_id)
    source = SourceRun.load(store, source_run, {s.episode_id for s in sources})
    steps = by_episode(store, "steps", source_run, "step_index", {s.episode_id for s in sources}, STEP_COLUMNS)
    replay_id = _check_new_run(new_run) or new_run_id("replay")
    settings = {"mode": "replay", "source_run": source_run, "source_episodes": [s.episode_id for s in sources],
                "clock": "frozen at each source episode's start", "limits": asdict(source.limits),
                "archive": "per episode"}
    report = ReplayReport(source_run, replay_id, str(store.root))
    with _new_run(store, replay_id, source, [s.task_id for s in sources], "replay", None, settings,
                  browser) as session:
        if on_start:
            on_start(replay_id, len(sources))
        stores = _ThreadStores(store)

        def replay_one(job: tuple[int, Source]) -> EpisodeFidelity:
            attempt, item = job
            outcome = _record(session, stores.get(), replay_id, source.task(item.task_id), _replayer(steps, item),
                              source.limits, _router(store, source, [item], item.episode_id), attempt)
            return _fidelity(stores.get(), item, steps.get(item.episode_id, []), outcome, tolerance)

        for _job, fidelity in in_flight(replay_one, list(_numbered(sources)), concurrency):
            report.episodes.append(fidelity)
            if on_episode:
                on_episode(fidelity)
    order = {s.episode_id: i for i, s in enumerate(sources)}
    report.episodes.sort(key=lambda e: order[e.source_episode])
    return report


def _replayer(steps: Rows, source: Source) -> ReplayAgent:
    """The replay agent with the episode's actions: the parsed action, else the raw output (so
    parse errors repeat too)."""
    return ReplayAgent({}, only=[r["action"] or r["model_output"] or "" for r in steps.get(source.episode_id, [])])


def _numbered(sources: Sequence[Source]) -> Iterator[tuple[int, Source]]:
    """Each source with its attempt number within its task (1, 2, ... as in the source run)."""
    seen: dict[str, int] = {}
    for source in sources:
        seen[source.task_id] = seen.get(source.task_id, 0) + 1
        yield seen[source.task_id], source


def _fidelity(store: Store, source: Source, recorded: list[dict[str, Any]], outcome: _Outcome,
              tolerance: int) -> EpisodeFidelity:
    """Compare the replayed steps with the recorded ones (screenshots fetched from both packs)."""
    digests = {s["screenshot"] for s in [*recorded, *outcome.steps] if s.get("screenshot")}
    index = store.blob_index
    packs = {*source.blob_packs, *(index.location[d] for d in digests if d in index)}
    differ = screenshot_differ(store.read_blobs(sorted(digests), sorted(packs)), tolerance)
    steps = compare_steps([StepView.from_row(r) for r in recorded], [StepView.from_row(r) for r in outcome.steps],
                          differ, _requests_by_step(outcome.served, outcome.step_starts))
    return EpisodeFidelity(source.task_id, source.episode_id, outcome.result.episode_id, len(recorded),
                           len(outcome.steps), steps, RequestCounts.of(s.kind for s in outcome.served),
                           _gaps(outcome.served), outcome.result.status, outcome.result.error)


def _requests_by_step(served: Sequence[Served], step_starts: Sequence[datetime]) -> dict[int, RequestCounts]:
    """Served requests grouped by the step whose action issued them (-1: the initial load)."""
    groups: dict[int, list[MatchKind]] = {}
    for request in served:
        groups.setdefault(bisect.bisect_right(step_starts, request.at) - 1, []).append(request.kind)
    return {step: RequestCounts.of(kinds) for step, kinds in groups.items()}


def _gaps(served: Iterable[Served]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f"{s.method} {s.url}" for s in served if s.kind is MatchKind.UNMATCHED))


# ---------------------------------------------------------------- a new agent on the archived web

def replay_agent(store: Store, agent: str, run_id: str | None = None, episode_id: str | None = None, *,
                 settings: AgentSettings | None = None, limits: Limits | None = None,
                 task_ids: Sequence[str] = (), browser: BrowserConfig | None = None, new_run: str | None = None,
                 concurrency: int = 1, on_start: OnStart | None = None,
                 on_episode: Callable[[AgentEpisode], None] | None = None) -> AgentReplayReport:
    """Run ``agent`` on each task of the source against that task's archived web.

    The archive of a task pools every source episode of it (in recorded order); the clock is
    frozen at the first one's start. Requests outside the archive get an error response and are
    reported as coverage gaps: what the agent saw there is not what the live site showed.
    """
    if agent in INTERACTIVE_AGENTS and concurrency > 1:
        raise AgentError(f"the {agent} agent reads the terminal: use it with --concurrency 1")
    source_run, sources = select_sources(store, run_id, episode_id)
    by_task = _by_task(sources, task_ids, source_run)
    source = SourceRun.load(store, source_run, {s.episode_id for group in by_task.values() for s in group})
    settings = settings or AgentSettings()
    replay_id = _check_new_run(new_run) or new_run_id(agent)
    the_agent = make_agent(agent, replace(settings, run_id=replay_id), store)
    limits = limits or Limits()
    config = {"mode": "agent", "source_run": source_run, "agent": agent,
              "source_episodes": [s.episode_id for group in by_task.values() for s in group],
              "clock": "frozen at the first source episode's start", "limits": asdict(limits),
              "agent_settings": asdict(settings), "archive": "per task"}
    report = AgentReplayReport(source_run, replay_id, str(store.root), agent)
    with _new_run(store, replay_id, source, list(by_task), agent, settings.model, config, browser) as session:
        if on_start:
            on_start(replay_id, len(by_task))
        stores, agents = _ThreadStores(store), _ThreadAgents(the_agent, agent, replace(settings, run_id=replay_id))

        def run_one(task_id: str) -> AgentEpisode:
            outcome = _record(session, stores.get(), replay_id, source.task(task_id), agents.get(stores.get()), limits,
                              _router(store, source, by_task[task_id], f"{source_run}/{task_id}"), 1)
            return AgentEpisode(outcome.result, RequestCounts.of(s.kind for s in outcome.served), _gaps(outcome.served))

        for _task, episode in in_flight(run_one, list(by_task), concurrency):
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

@dataclass(frozen=True)
class _Outcome:
    result: EpisodeResult
    steps: list[dict[str, Any]]
    step_starts: list[datetime]
    served: list[Served]


def _router(store: Store, source: SourceRun, sources: Sequence[Source], seed_name: str) -> ArchiveRouter:
    """A router over these sources' traffic, the clock frozen at the first one's start."""
    return ArchiveRouter(source.archive(store, sources), sources[0].started_at, seed_for(seed_name))


class _ThreadStores:
    """One handle on the store per thread (a handle caches its blob index as it writes)."""

    def __init__(self, store: Store) -> None:
        self.store, self._local = store, threading.local()
        self._local.store = store

    def get(self) -> Store:
        if not hasattr(self._local, "store"):
            self._local.store = Store.open(self.store.root)
        return self._local.store


class _ThreadAgents:
    """The agent for each thread: the one given on the first, a new one of the same kind on others."""

    def __init__(self, first: Agent, spec: str, settings: AgentSettings) -> None:
        self.spec, self.settings, self._local = spec, settings, threading.local()
        self._local.agent = first

    def get(self, store: Store) -> Agent:
        if not hasattr(self._local, "agent"):
            self._local.agent = make_agent(self.spec, self.settings, store)
        return self._local.agent


@contextmanager
def _new_run(store: Store, run_id: str, source: SourceRun, task_ids: list[str], agent: str, model: str | None,
             config: dict[str, Any], browser: BrowserConfig | None) -> Iterator[RestartingSession]:
    """Start the browser, create the replay run, and always close the browser again."""
    browsers = RestartingSession(source.browser_config(browser))
    try:
        _begin(store, run_id, source, task_ids, agent, model,
               {**config, "browser": asdict(browsers.session.config)}, browsers.session.version)
        yield browsers
    finally:
        browsers.close()


def _record(browsers: RestartingSession, store: Store, run_id: str, task: Task, agent: Agent, limits: Limits,
            router: ArchiveRouter, attempt: int) -> _Outcome:
    """Record one episode in a routed context; a failure leaves nothing of it in the store."""
    session = browsers.alive()
    writer = store.episode_writer(run_id, new_episode_id(task))
    with tempfile.TemporaryDirectory(prefix="mmina-replay-") as workdir:
        recorder = EpisodeRecorder(session, agent, task, writer, limits, Path(workdir), prepare=router.prepare,
                                   offline=True)
        try:
            result = recorder.record(attempt)
        except BaseException:
            writer.abort()
            raise
    return _Outcome(result, writer.steps, recorder.step_starts, router.served)


def _check_new_run(run_id: str | None) -> str | None:
    return check_id("run id", run_id) if run_id else None


def _begin(store: Store, run_id: str, source: SourceRun, task_ids: list[str], agent: str, model: str | None,
           config: dict[str, Any], browser_version: str) -> None:
    """Create the replay run: the source's suite and tasks, this machine's software."""
    tasks = [{k: v for k, v in source.tasks[t].items() if k != "run_id"} for t in dict.fromkeys(task_ids)]
    recorded = source.row
    suite = SuiteRef(recorded["task_suite"], recorded["task_suite_path"], recorded["task_suite_sha256"])
    row = run_row(agent, model, config, suite, len(tasks), browser_version,
                  (recorded["viewport_width"], recorded["viewport_height"]))
    if not store.begin_run(run_id, row, tasks):
        raise StoreError(f"run {run_id} already exists in {store.root}; choose another --run-id")


# ---------------------------------------------------------------- comparing two stored runs

def compare_runs(store: Store, recorded_run: str, other_run: str,
                 tolerance: int = PIXEL_TOLERANCE) -> list[EpisodeFidelity]:
    """Each task's latest episode in ``other_run`` compared step by step with its latest in
    ``recorded_run`` (e.g. a live re-run on a drifted site); no request counts."""
    latest = {run: _latest_by_task(store, run) for run in (recorded_run, other_run)}
    tasks = [t for t in latest[recorded_run] if t in latest[other_run]]
    pairs = [(latest[recorded_run][t], latest[other_run][t]) for t in tasks]
    steps = {run: by_episode(store, "steps", run, "step_index", {p[i] for p in pairs}, STEP_COLUMNS)
             for i, run in enumerate((recorded_run, other_run))}
    digests = {r["screenshot"] for group in steps.values() for rows in group.values() for r in rows if r["screenshot"]}
    differ = screenshot_differ(store.read_blobs(sorted(digests)), tolerance)
    result = []
    for task, (old, new) in zip(tasks, pairs):
        recorded, replayed = steps[recorded_run].get(old, []), steps[other_run].get(new, [])
        compared = compare_steps([StepView.from_row(r) for r in recorded], [StepView.from_row(r) for r in replayed],
                                 differ)
        result.append(EpisodeFidelity(task, old, new, len(recorded), len(replayed), compared))
    return result


def _latest_by_task(store: Store, run_id: str) -> dict[str, str]:
    """Task id → the run's most recently finished episode of it."""
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id", "task_id", "ended_at"])
    return {row["task_id"]: row["episode_id"] for row in episodes.sort_by("ended_at").to_pylist()}
