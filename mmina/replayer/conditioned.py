"""Hop-conditioned runs (``mmina record --prefix-run REF --at-hop K``): an agent started at hop K.

For each selected task of the reference run ``REF`` and each hop asked, the reference's
episode of the task is replayed from its archive up to the start of that hop
(:mod:`mmina.replayer.prefixes`), and the agent under test takes over on the live web — the
fixture web by default — from the state the replay reached (:mod:`mmina.replayer.handover`).
Each such episode is stored like any other, in a run of its own, with the prefix's run,
episode and length, the hop the agent started at, whether the prefix replayed faithfully, and
what was handed over (store schema 6, ``episodes.prefix_*``); its hop queue starts at that hop.

The run is the reference's tasks (``task_ids`` and ``limit`` select among them), recorded in
the reference run's viewport and capture settings (a replay must look the same), with the
agent, settings, budget, workers and concurrency of the ``record`` command. Episodes share
nothing but the store, so results do not depend on ``--workers`` or ``--concurrency``; with
``--resume`` the (task, start hop, prefix length) already recorded in the run are skipped.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from mmina.agents.captions import Captioner, make_captioner
from mmina.agents.protocol import Agent
from mmina.agents.registry import INTERACTIVE_AGENTS, make_agent
from mmina.errors import AgentError, StoreError
from mmina.executors.interface import Layout
from mmina.executors.spread import spread
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.recorder.recording import RecordConfig, RunSummary, choose_run_id, fixture_web
from mmina.recorder.verdicts import add_missing_verdicts, with_verdicts_due
from mmina.replayer.fidelity import RequestCounts
from mmina.replayer.handover import CLOCK, HandOverRouter, PrefixCheck, PrefixedAgent, check_prefix
from mmina.replayer.jobs import AgentJobBase, ReplaySetup, counts
from mmina.replayer.prefixes import Prefix, PrefixSpec, Skipped, plan_prefixes
from mmina.replayer.source import SourceRun
from mmina.store import Store
from mmina.store.runs import SuiteRef, run_config, run_row
from mmina.tasks.budget import Limits
from mmina.tasks.task import HopTracker, Task, task_from_row

OnEpisode = Callable[["ConditionedEpisode"], None]


@dataclass(frozen=True)
class ConditionedEpisode:
    """One recorded hop-conditioned episode: where it started, how its prefix replayed, its result."""

    prefix: Prefix
    result: EpisodeResult
    check: PrefixCheck
    requests: RequestCounts
    """How the prefix's requests were answered from the archive."""
    handed: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self.result),
            "success": self.result.success,
            "hops_given": self.prefix.start_hop,
            "prefix_episode": self.prefix.source.episode_id,
            "prefix_steps": self.prefix.steps,
            "prefix": self.check.as_json(),
            "prefix_requests": asdict(self.requests),
            "handover": self.handed,
        }


@dataclass
class ConditionedSummary:
    """A conditioned run: its episodes (``run``, as any run's summary), their prefixes, and the
    tasks and hops that got no episode, with why."""

    run: RunSummary
    prefix_run: str
    episodes: list[ConditionedEpisode] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def faithful_episodes(self) -> int:
        return sum(e.check.faithful for e in self.episodes)

    @property
    def prefix_fidelity(self) -> float:
        """Prefix steps (and pages handed over) replayed faithfully / compared; 1.0 with none."""
        compared = sum(e.check.compared for e in self.episodes)
        return sum(e.check.faithful_steps for e in self.episodes) / compared if compared else 1.0

    def as_json(self) -> dict[str, Any]:
        """The summary for scripts (``--format json``)."""
        return {
            **self.run.as_json(),
            "prefix_run": self.prefix_run,
            "episodes": [e.as_json() for e in self.episodes],
            "skipped_prefixes": [asdict(s) for s in self.skipped],
            "prefix_fidelity": self.prefix_fidelity,
            "faithful_prefixes": self.faithful_episodes,
        }


class ConditionedJob(AgentJobBase):
    """Records :class:`Prefix` items: the reference's prefix from its archive, then the agent live."""

    def thread_captioner(self) -> Captioner | None:
        if not hasattr(self._local, "captioner"):
            self._local.captioner = make_captioner(self.setup.settings)
        return self._local.captioner

    def work(self, prefix: Prefix) -> ConditionedEpisode:
        task = self.source.task(prefix.task_id)
        session = self.browsers.alive()
        router = HandOverRouter(self.source.archive(self.store, [prefix.source]), prefix.source.started_at)
        agent = PrefixedAgent(
            self.thread_agent(),
            prefix,
            lambda: session.run(router.hand_over()),
            self.setup.settings.show_prefix,
        )
        checked: list[PrefixCheck] = []

        def columns(steps: list[dict[str, Any]]) -> dict[str, Any]:
            checked.append(check_prefix(prefix, steps, agent.handed is not None))
            return prefix_columns(self.setup.source_run, prefix, checked[-1], agent.handed)

        result = self._record(task, session, agent, router, prefix, columns)
        return ConditionedEpisode(prefix, result, checked[-1], counts(router.served), agent.handed)

    def _record(
        self,
        task: Task,
        session: BrowserSession,
        agent: Agent,
        router: HandOverRouter,
        prefix: Prefix,
        columns: Callable[[list[dict[str, Any]]], dict[str, Any]],
    ) -> EpisodeResult:
        """One episode in a context routed to the prefix's archive until the hand-over (never
        offline: the agent goes on on the live web); a failure leaves nothing of it in the store."""
        writer = self.thread_store().episode_writer(self.setup.replay_id, new_episode_id(task))
        with tempfile.TemporaryDirectory(prefix="mmina-conditioned-") as workdir:
            recorder = EpisodeRecorder(
                session,
                agent,
                task,
                writer,
                self.setup.limits or Limits(),
                Path(workdir),
                self.thread_captioner(),
                prepare=router.prepare,
                seed=prefix.source.seeding(),
                tracker=HopTracker(task, prefix.given, prefix.steps),
                columns=columns,
            )
            try:
                return recorder.record(attempt=1)
            except BaseException:
                writer.abort()
                raise


def prefix_columns(
    prefix_run: str, prefix: Prefix, check: PrefixCheck, handed: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``episodes.prefix_*`` columns of a conditioned episode (store schema 6; ``hops_given``
    since 7)."""
    return {
        "prefix_run": prefix_run,
        "prefix_episode": prefix.source.episode_id,
        "prefix_steps": prefix.steps,
        "hops_given": prefix.start_hop,
        "prefix_hop_steps": list(prefix.given),
        "prefix_faithful": check.faithful,
        "prefix_mismatch": check.mismatch,
        "handover_json": json.dumps(handed, sort_keys=True) if handed is not None else None,
    }


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """A conditioned run as checked before anything is written."""

    source: SourceRun
    tasks: list[Task]
    prefixes: list[Prefix]
    skipped: list[Skipped]
    run_id: str
    agent: Agent


def record_conditioned(
    store: Store,
    config: RecordConfig,
    spec: PrefixSpec,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: OnEpisode | None = None,
) -> ConditionedSummary:
    """Record one hop-conditioned episode per selected task of ``spec.run_id`` and hop asked
    (see the module); everything that can fail on user input is checked before the first write."""
    started = time.perf_counter()
    spec = replace(spec, run_id=store.resolve_run(spec.run_id))
    plan = _plan(store, config, spec)
    with fixture_web(plan.tasks, config.drift) as extra_args:
        setup = ReplaySetup(
            store=store.location,
            replay_id=plan.run_id,
            source_run=spec.run_id,
            episodes=frozenset(p.source.episode_id for p in plan.prefixes),
            browser=_browser(plan, config, extra_args),
            agent=config.agent,
            settings=replace(config.agent_settings, run_id=plan.run_id),
            limits=config.limits,
        )
        with _new_run(store, setup, plan, config, spec) as (session, todo, summary):
            if on_start:
                on_start(plan.run_id, len(todo))
            here = ConditionedJob(setup, session, store, plan.source, plan.agent) if session else None
            for _prefix, episode in spread(partial(ConditionedJob, setup), todo, config.layout, here):
                summary.episodes.append(episode)
                if on_episode:
                    on_episode(episode)
    order = {p.key: i for i, p in enumerate(plan.prefixes)}
    summary.episodes.sort(key=lambda e: order[e.prefix.key])
    summary.run.episodes = [e.result for e in summary.episodes]
    summary.run.duration_s = time.perf_counter() - started
    return summary


def _browser(plan: _Plan, config: RecordConfig, extra_args: list[str]) -> BrowserConfig:
    """The reference's viewport and capture (its prefix must look the same), launched as the
    caller says (with the fixture web's arguments), tabs allowed the schemes of both."""
    launch = replace(config.browser, extra_args=(*config.browser.extra_args, *extra_args))
    recorded = plan.source.browser_config(launch)
    return replace(
        recorded,
        allowed_schemes=tuple(dict.fromkeys((*recorded.allowed_schemes, *config.browser.allowed_schemes))),
    )


def _plan(store: Store, config: RecordConfig, spec: PrefixSpec) -> _Plan:
    """The reference's selected tasks, the prefixes, the run id and the agent, each checked."""
    if config.tasks is not None:
        raise StoreError(
            "--prefix-run records the reference run's tasks: select among them with --task, "
            "--task-ids or --limit, not --tasks"
        )
    if config.agent in INTERACTIVE_AGENTS and config.layout != Layout():
        raise AgentError(
            f"the {config.agent} agent reads the terminal: use it with --workers 1 --concurrency 1"
        )
    rows = store.read("tasks", run_id=spec.run_id).to_pylist()
    if not rows:
        raise StoreError(
            f"run {spec.run_id} has no tasks in {store.root} (--prefix-run names the reference run)"
        )
    tasks = _selected([task_from_row(r) for r in rows], config.task_ids, config.limit)
    prefixes, skipped = plan_prefixes(store, spec, {t.task_id: t for t in tasks}, config.limits.max_steps)
    source = SourceRun.load(store, spec.run_id, {p.source.episode_id for p in prefixes})
    run_id = choose_run_id(store, config)
    settings = replace(config.agent_settings, run_id=run_id)
    return _Plan(
        source=source,
        tasks=tasks,
        prefixes=prefixes,
        skipped=skipped,
        run_id=run_id,
        agent=make_agent(config.agent, settings, store),
    )


def _selected(tasks: list[Task], task_ids: tuple[str, ...], limit: int | None) -> list[Task]:
    """The tasks named (all when none are), in the reference run's order, at most ``limit``."""
    known = {t.task_id for t in tasks}
    missing = [t for t in task_ids if t not in known]
    if missing:
        raise StoreError(f"the reference run has no task {', '.join(missing)}")
    chosen = [t for t in tasks if not task_ids or t.task_id in task_ids]
    return chosen[:limit] if limit is not None else chosen


@contextmanager
def _new_run(
    store: Store, setup: ReplaySetup, plan: _Plan, config: RecordConfig, spec: PrefixSpec
) -> Iterator[tuple[BrowserSession | None, list[Prefix], ConditionedSummary]]:
    """Start a browser, create the run (or reopen it with ``resume``); yields the session when
    the work stays in this process, the prefixes still to record, and the summary to fill."""
    session = BrowserSession(setup.browser)
    try:
        done = _begin(store, setup, plan, config, spec, session.version)
        todo = [p for p in plan.prefixes if p.key not in done]
        summary = ConditionedSummary(
            RunSummary(plan.run_id, str(store.root), skipped=[f"{k[0]}@{k[1] + 1}" for k in sorted(done)]),
            spec.run_id,
            skipped=list(plan.skipped),
        )
        if not config.layout.in_this_process(len(todo)):
            session.close()
        yield (session if config.layout.in_this_process(len(todo)) else None), todo, summary
    finally:
        session.close()


def _begin(
    store: Store,
    setup: ReplaySetup,
    plan: _Plan,
    config: RecordConfig,
    spec: PrefixSpec,
    browser_version: str,
) -> set[tuple[str, int, int]]:
    """Create the run (the reference's suite and tasks, this run's agent); with ``resume``,
    reopen it: the keys of the episodes it already holds."""
    recorded = plan.source.row
    suite = SuiteRef(recorded["task_suite"], recorded["task_suite_path"], recorded["task_suite_sha256"])
    settings = {
        "mode": "conditioned",
        **spec.describe(),
        "agent": config.agent,
        "clock": CLOCK,
        "reference_episodes": sorted(setup.episodes),
        "task_ids": [t.task_id for t in plan.tasks],
        "limits": asdict(config.limits),
        "drift": config.drift,
        "browser": asdict(setup.browser),
        **config.layout.describe(),
        "agent_settings": asdict(replace(setup.settings, run_id=None)),
    }
    row = run_row(
        config.agent,
        setup.settings.model,
        with_verdicts_due(settings),
        suite,
        len(plan.tasks),
        browser_version,
        (recorded["viewport_width"], recorded["viewport_height"]),
    )
    tasks = [{k: v for k, v in plan.source.tasks[t.task_id].items() if k != "run_id"} for t in plan.tasks]
    if not store.begin_run(plan.run_id, row, tasks):
        _check_resumable(store, plan.run_id, spec, config.resume)
        add_missing_verdicts(store, plan.run_id)
    episodes = store.read("episodes", run_id=plan.run_id, columns=["task_id", "hops_given", "prefix_steps"])
    return {(r["task_id"], r["hops_given"] or 0, r["prefix_steps"] or 0) for r in episodes.to_pylist()}


def _check_resumable(store: Store, run_id: str, spec: PrefixSpec, resume: bool) -> None:
    """An existing run is continued only with ``resume``, and only a conditioned run on the same prefixes."""
    if not resume:
        raise StoreError(f"run {run_id} already exists in {store.root}; pass --resume to continue it")
    (row,) = store.read("runs", run_id=run_id, columns=["config_json"]).to_pylist()
    config = run_config(row["config_json"])
    if config.get("mode") != "conditioned" or config.get("prefix_run") != spec.run_id:
        raise StoreError(
            f"run {run_id} is not a hop-conditioned run on prefixes of run {spec.run_id}; "
            "resume it as it was recorded, or use a new run id"
        )
