"""A recording run: tasks in, one committed episode per task and repeat out, resumable."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from mmina.agents.captions import Captioner, make_captioner
from mmina.agents.protocol import Agent
from mmina.agents.registry import INTERACTIVE_AGENTS, make_agent
from mmina.agents.settings import AgentSettings
from mmina.errors import DAMAGED_RUN_HINT, INFRASTRUCTURE, AgentError, StoreError, unreadable_file
from mmina.executors.interface import Layout, OnWorkers
from mmina.executors.spread import spread
from mmina.models.endpoint_gate import EndpointUnavailable
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode import EpisodeResult
from mmina.recorder.verdicts import add_missing_verdicts, with_verdicts_due
from mmina.recorder.workers import Repeat, Worker, WorkerSetup
from mmina.store import Store
from mmina.store.layout import check_id
from mmina.store.runs import run_config, run_row
from mmina.store.store import utcnow
from mmina.tasks.budget import Limits
from mmina.tasks.task import Task, TaskSuite, task_folder, task_from_row, task_row
from mmina.tasks.taskcheck import load_suite

FIXTURE_SUFFIX = ".mmina.test"


@dataclass(frozen=True)
class RecordConfig:
    tasks: str | None = None
    task_ids: tuple[str, ...] = ()
    limit: int | None = None
    agent: str = "oracle"
    run_id: str | None = None
    resume: bool = False
    rerun_errors: bool = False
    """With ``resume``, record again also the tasks whose episode an agent or task error ended
    (an infrastructure error's always are)."""
    limits: Limits = field(default_factory=Limits)
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    drift: int = 0
    layout: Layout = field(default_factory=Layout)
    """Workers, episodes in flight per worker, and where workers run (see ``mmina.executors.spread``)."""
    agent_settings: AgentSettings = field(default_factory=AgentSettings)
    serve_fixture_web: bool = True
    """False when the fixture web is served elsewhere already (its ``--host-resolver-rules`` in
    ``browser.extra_args``): a benchmark runs it in a process of its own to count its CPU apart."""
    max_cost_usd: float | None = None
    """No episode starts once this session's episodes cost this much (``--max-cost``; None: no limit)."""
    max_hours: float | None = None
    """No episode starts once this session has run this long (``--max-hours``; None: no limit)."""
    repeats: int | None = None
    """Episodes per task (``--repeats``, attempts 1..K); None: 1 for a new run, a resumed run's own."""

    def spent(self, cost_usd: float, elapsed_s: float) -> str | None:
        """Which budget this session has used up ("max_cost", "max_hours"), or None."""
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return "max_cost"
        if self.max_hours is not None and elapsed_s >= self.max_hours * 3600:
            return "max_hours"
        return None


@dataclass
class RunSummary:
    run_id: str
    store: str
    episodes: list[EpisodeResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """The tasks (and repeats) a resumed run had committed already."""
    duration_s: float = 0.0
    task_warnings: list[str] = field(default_factory=list)
    """What validation found odd but runnable in the task files (see ``mmina tasks validate``)."""
    verdicts_added: list[str] = field(default_factory=list)
    """Episodes ``--resume`` found committed without their verdicts (a crash), and scored."""
    stopped: str | None = None
    """The budget that stopped the session with tasks left ("max_cost", "max_hours"), or None."""
    left: int = 0
    """Episodes (tasks × repeats) of the run this session did not start (a budget stopped it):
    ``--resume`` records them."""
    repeats: int = 1
    """Episodes per task of the run (``--repeats``)."""
    workers_lost: int = 0
    """Worker processes or Ray actors lost during the session (what they had in flight was recorded again)."""
    rerun: list[str] = field(default_factory=list)
    """Tasks (and repeats) ``--resume`` recorded again: their episode had ended in an
    infrastructure error (any error with ``rerun_errors``); the new episode supersedes the old one."""

    @property
    def counted(self) -> list[EpisodeResult]:
        """This session's episodes that count in rates: all but those an infrastructure error ended."""
        return [e for e in self.episodes if e.error_kind != INFRASTRUCTURE]

    @property
    def hop_sr(self) -> float:
        """Hops passed by the ``hops`` verdicts / hops over this run's new episodes (an episode
        without verdicts counts its live-tracked hops; hops a prefix gave count in neither)."""
        hops = sum(e.hops_to_do for e in self.counted)
        return sum(e.hops_credited for e in self.counted) / hops if hops else 0.0

    @property
    def live_hop_sr(self) -> float:
        """Hops reached by live URL tracking / hops: progress while recording, not a verdict."""
        hops = sum(e.hops_to_do for e in self.counted)
        return sum(e.agent_live_hops for e in self.counted) / hops if hops else 0.0

    @property
    def task_sr(self) -> float:
        """Episodes whose ``hops`` verdict passed / episodes that count (see ``EpisodeResult.success``)."""
        counted = self.counted
        return sum(e.success for e in counted) / len(counted) if counted else 0.0

    @property
    def errors(self) -> int:
        """Episodes an error of the agent or its task ended (they count as failures)."""
        return sum(e.status == "error" for e in self.counted)

    @property
    def infrastructure_errors(self) -> int:
        """Episodes the infrastructure's failure ended: in no rate, recorded again by ``--resume``."""
        return len(self.episodes) - len(self.counted)

    @property
    def tokens(self) -> int:
        return sum(e.prompt_tokens + e.completion_tokens for e in self.episodes)

    @property
    def cost_usd(self) -> float:
        return sum(e.cost_usd for e in self.episodes)

    @property
    def steps(self) -> int:
        return sum(e.n_steps for e in self.episodes)

    @property
    def endpoint(self) -> dict[str, float | int]:
        """What the model endpoint's faults cost this session: retried attempts, seconds waited
        for it to come back, and the episodes that waited (none of them failed for it)."""
        return {
            "retries": sum(e.endpoint_retries for e in self.episodes),
            "waited_s": round(sum(e.endpoint_wait_s for e in self.episodes), 3),
            "episodes_held": sum(e.endpoint_wait_s > 0 for e in self.episodes),
        }

    def totals(self) -> dict[str, float | int]:
        return {
            "hop_sr": self.hop_sr,
            "task_sr": self.task_sr,
            "live_hop_sr": self.live_hop_sr,
            "errors": self.errors,
            "infrastructure_errors": self.infrastructure_errors,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "duration_s": self.duration_s,
        }

    def as_json(self) -> dict[str, Any]:
        """The summary for scripts (``--format json``): the run, each episode and the totals."""
        episodes = [{**asdict(e), "success": e.success} for e in self.episodes]
        return {
            **asdict(self),
            "episodes": episodes,
            "finished": len(self.episodes),
            **self.totals(),
            "endpoint_faults": self.endpoint,
        }


OnEpisode = Callable[[Task, EpisodeResult], None]


def new_run_id(agent: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in agent.split(":")[-1].lower())[:24]
    return f"{utcnow():%Y%m%d-%H%M%S}-{slug}-{uuid.uuid4().hex[:6]}"


def record_run(
    store: Store,
    config: RecordConfig,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: OnEpisode | None = None,
    on_workers: OnWorkers | None = None,
) -> RunSummary:
    """Record every selected task of the suite into ``store``, ``repeats`` times; with ``resume``,
    skip the repeats already done (see :func:`reruns_due`). ``on_workers`` is told how many worker
    processes or Ray actors are at work and lost, as that changes.

    Everything that can fail on user input (tasks, agent, run id, browser) is checked before
    the first byte is written, so a mistake leaves the store as it was.
    """
    plan = _plan(store, config)
    started = time.perf_counter()
    with fixture_web(plan.suite.tasks if config.serve_fixture_web else (), config.drift) as extra_args:
        browser = replace(config.browser, extra_args=(*config.browser.extra_args, *extra_args))
        session = BrowserSession(browser)
        try:
            summary, todo = _open_run(store, config, plan, session.version)
            if on_start:
                on_start(summary.run_id, len(todo))
            setup = WorkerSetup(
                agent=config.agent,
                settings=plan.settings,
                store=store.location,
                run_id=summary.run_id,
                limits=config.limits,
                browser=browser,
            )

            def spent() -> bool:
                summary.stopped = config.spent(summary.cost_usd, time.perf_counter() - started)
                return summary.stopped is not None

            def workers(alive: int, lost: int) -> None:
                summary.workers_lost = lost
                if on_workers is not None:
                    on_workers(alive, lost)

            try:
                for item, result in _episodes(
                    setup,
                    session,
                    store,
                    plan,
                    longest_first(todo, config.layout),
                    config.layout,
                    spent,
                    workers,
                ):
                    summary.episodes.append(result)
                    if on_episode:
                        on_episode(item.task, result)
                summary.left = len(todo) - len(summary.episodes)
                summary.stopped = summary.stopped if summary.left else None
            except EndpointUnavailable as exc:
                raise EndpointUnavailable(
                    f"{exc}: the run stopped, {len(summary.episodes)} episode(s) of this session stored and "
                    f"{len(todo) - len(summary.episodes)} task(s) left; once the endpoint answers again: "
                    f"mmina record --resume --run-id {summary.run_id}"
                ) from None
        finally:
            session.close()
    order = {t.task_id: i for i, t in enumerate(plan.suite.tasks)}
    summary.episodes.sort(
        key=lambda e: (e.attempt, order.get(e.task_id, len(order)))
    )  # a task the suite lost: last
    summary.duration_s = time.perf_counter() - started
    return summary


def longest_first(items: list[Repeat], layout: Layout) -> list[Repeat]:
    """The order episodes start in: with more than one in flight, the tasks with the most hops
    first (otherwise in the suite's order). A task of more hops takes more steps, so a run's
    end is then short episodes finishing side by side, not one long episode alone on an idle
    machine (longest-first scheduling: the run ends sooner, its results are the same and are
    reported in the suite's order). Repeats keep their order within a hop count: the first
    repeat of every task before the second."""
    if layout.workers * layout.concurrency <= 1:
        return items
    return sorted(items, key=lambda item: -item.task.n_hops)


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """What a run was checked to be before anything is written: tasks, run id, agent."""

    suite: TaskSuite
    run_id: str
    settings: AgentSettings
    agent: Agent
    captioner: Captioner | None
    repeats: int = 1
    """Episodes per task: ``--repeats``, or the resumed run's own."""


def _plan(store: Store, config: RecordConfig) -> _Plan:
    """The selected tasks, run id, agent and captioner, once each is known to be good."""
    suite = load_suite(config.tasks, list(config.task_ids) or None).head(config.limit)
    if config.agent in INTERACTIVE_AGENTS and config.layout != Layout():
        raise AgentError(
            f"the {config.agent} agent reads the terminal: use it with --workers 1 --concurrency 1"
        )
    run_id = choose_run_id(store, config)
    repeats = run_repeats(store, run_id, config.repeats) if config.resume else config.repeats or 1
    settings = replace(config.agent_settings, run_id=run_id)
    agent = make_agent(config.agent, settings, store)
    return _Plan(
        suite=suite,
        run_id=run_id,
        settings=settings,
        agent=agent,
        captioner=make_captioner(settings),
        repeats=repeats,
    )


def _episodes(
    setup: WorkerSetup,
    session: BrowserSession,
    store: Store,
    plan: _Plan,
    items: list[Repeat],
    layout: Layout,
    stop: Callable[[], bool],
    on_workers: OnWorkers | None = None,
) -> Iterator[tuple[Repeat, EpisodeResult]]:
    """Work that stays in this process uses the browser, store and agent already at hand;
    processes and Ray actors start their own. A worker lost with episodes in flight (a process
    killed, a Ray node gone) has them recorded again by another, unless they were committed."""
    if layout.in_this_process(len(items)):
        here = Worker(setup, session, store, plan.agent, plan.captioner)
        yield from spread(partial(Worker, setup), items, layout, here, stop=stop)
        return
    session.close()
    yield from spread(
        partial(Worker, setup),
        items,
        layout,
        settled=partial(_committed, store, plan.run_id),
        stop=stop,
        on_workers=on_workers,
    )


def _open_run(
    store: Store, config: RecordConfig, plan: _Plan, browser_version: str
) -> tuple[RunSummary, list[Repeat]]:
    """Create the run (or reopen it with ``resume``); returns the repeats of tasks still to record:
    those not committed, and those recorded again (an error ended their episode: :func:`reruns_due`)."""
    row = _run_row(config, plan.suite, browser_version)
    created = store.begin_run(plan.run_id, row, [task_row(t) for t in plan.suite.tasks])
    if not created and not config.resume:
        raise StoreError(f"run {plan.run_id} already exists in {store.root}; pass --resume to continue it")
    tasks = plan.suite.tasks if created else own_tasks(store, plan.run_id, plan.suite.tasks, config.task_ids)
    latest = latest_episodes(store, plan.run_id)
    reruns = reruns_due(latest, config.rerun_errors)
    items = [
        Repeat(task, attempt, reruns.get((task.task_id, attempt)))
        for attempt in range(1, plan.repeats + 1)
        for task in tasks
    ]
    done = set(latest) - set(reruns)
    summary = RunSummary(
        plan.run_id,
        str(store.root),
        skipped=[i.label for i in items if i.key in done],
        task_warnings=list(plan.suite.warnings),
        verdicts_added=[] if created else add_missing_verdicts(store, plan.run_id),
        repeats=plan.repeats,
        rerun=[i.label for i in items if i.supersedes],
    )
    return summary, [i for i in items if i.key not in done]


def run_repeats(store: Store, run_id: str, asked: int | None) -> int:
    """A resumed run's repeats (its ``--repeats``, 1 for runs before it); asking for others is an error."""
    rows = store.read("runs", run_id=run_id, columns=["config_json"]).column(0).to_pylist()
    recorded = run_config(rows[0] if rows else None).get("repeats")
    repeats = (
        recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1 else 1
    )
    if asked is not None and asked != repeats:
        raise StoreError(
            f"run {run_id} was recorded with --repeats {repeats}: a resumed run keeps its repeats "
            f"(leave --repeats out, or start a new run for {asked})"
        )
    return repeats


def own_tasks(store: Store, run_id: str, loaded: Sequence[Task], asked: Sequence[str]) -> list[Task]:
    """A resumed run's own tasks, as its ``tasks`` table lists them, in their order (each as the
    suite now has it when the same, else as stored): never a task the run did not have. Asking
    by ``--task-ids`` for one it does not have is an error."""
    rows = {r["task_id"]: r for r in store.read("tasks", run_id=run_id).to_pylist()}
    stranger = [task_id for task_id in asked if task_id not in rows]
    if stranger:
        raise StoreError(
            f"run {run_id} has no task {stranger[0]} (it has {len(rows)}): a resumed run records "
            "only its own tasks; start a new run for others"
        )
    suite_path = store.read("runs", run_id=run_id, columns=["task_suite_path"]).column(0)[0].as_py()
    by_id = {t.task_id: t for t in loaded}
    return [
        by_id[task_id]
        if task_id in by_id and by_id[task_id].sha256 == row["task_sha256"]
        else replace(task_from_row(row), folder=task_folder(suite_path, task_id))
        for task_id, row in rows.items()
    ]


def choose_run_id(store: Store, config: RecordConfig) -> str:
    """``--run-id``, else (with ``--resume``) the store's latest run, else a new id."""
    if config.run_id:
        run_id = check_id("run id", config.run_id)
        if (
            config.resume
            and not store.read("runs", run_id=run_id, columns=["run_id"]).num_rows
            and not store.unreadable("runs", run_id)
        ):
            raise StoreError(
                f"nothing to resume: {store.root} has no run {run_id} (leave out --resume to start it)"
            )
        return run_id
    if config.resume:
        runs = store.read("runs", columns=["run_id", "created_at"]).sort_by([("created_at", "descending")])
        if not runs.num_rows:
            unreadable = store.unreadable("runs")
            if unreadable:
                path, reason = unreadable[0]
                damaged = unreadable_file("runs", path, reason)
                raise StoreError(f"nothing to resume: {damaged}; {DAMAGED_RUN_HINT}")
            raise StoreError(f"nothing to resume: {store.root} has no runs")
        return runs.column("run_id")[0].as_py()
    return new_run_id(config.agent)


Key = tuple[str, int]
"""A task and its repeat (``episodes.attempt``)."""


def latest_episodes(store: Store, run_id: str) -> dict[Key, dict[str, Any]]:
    """Each task's and repeat's latest episode in the run (its status and ``error_kind``)."""
    rows = store.read(
        "episodes",
        run_id=run_id,
        columns=["episode_id", "task_id", "attempt", "status", "error_kind", "started_at"],
    ).to_pylist()
    return {(row["task_id"], row["attempt"]): row for row in sorted(rows, key=lambda r: r["started_at"])}


def reruns_due(latest: dict[Key, dict[str, Any]], rerun_errors: bool) -> dict[Key, str]:
    """The repeats of tasks ``--resume`` records again, each with the episode it supersedes: those
    whose latest episode an infrastructure error ended (with ``rerun_errors``, any error). The new
    episode is the same repeat (the same ``attempt``); the old one stays, counted in no table."""
    return {
        key: row["episode_id"]
        for key, row in latest.items()
        if row["status"] == "error" and (row["error_kind"] == INFRASTRUCTURE or rerun_errors)
    }


def _committed(store: Store, run_id: str, item: Repeat) -> bool:
    """Whether this session's episode of ``item`` is in the store (a lost worker's is not redone)."""
    row = latest_episodes(store, run_id).get(item.key)
    return row is not None and row["episode_id"] != item.supersedes


@contextmanager
def fixture_web(tasks: Sequence[Task], drift: int) -> Iterator[list[str]]:
    """Start the local fixture web when a task starts on it; yields the browser arguments."""
    if not any((urlsplit(u).hostname or "").endswith(FIXTURE_SUFFIX) for t in tasks for u in t.start_urls):
        yield []
        return
    from mmina.fixtures.web import FixtureWeb

    with FixtureWeb(drift=drift) as web:
        yield web.chromium_args()


def _run_row(config: RecordConfig, suite: TaskSuite, browser_version: str) -> dict[str, Any]:
    settings = {
        "agent": config.agent,
        "tasks": config.tasks,
        "task_ids": list(config.task_ids),
        "limit": config.limit,
        "repeats": config.repeats or 1,
        "limits": asdict(config.limits),
        "browser": asdict(config.browser),
        "drift": config.drift,
        **config.layout.describe(),
        "agent_settings": asdict(config.agent_settings),
    }
    return run_row(
        config.agent,
        config.agent_settings.model,
        with_verdicts_due(settings),
        suite,
        len(suite.tasks),
        browser_version,
        (config.browser.viewport_width, config.browser.viewport_height),
    )
