"""The work of a replay worker (a job of ``mmina.executors.interface``): episodes re-driven on the archive.

A job reads what it needs of the source run once, holds one browser session, and replays one
item per call, from as many threads as the run's ``--concurrency``: :class:`StoredActionsJob`
re-drives a recorded episode with its own actions and compares it with the recording;
:class:`AgentJob` runs a new agent on a task's pooled archive. Jobs are built from a picklable
:class:`ReplaySetup`, so they run alike in this process, in worker processes or in Ray actors.
"""

from __future__ import annotations

import bisect
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from mmina.agents.protocol import Agent
from mmina.agents.registry import make_agent
from mmina.agents.settings import AgentSettings
from mmina.agents.stored_actions import ReplayAgent, stored_steps
from mmina.recorder.browser import BrowserConfig, BrowserSession, Offline, RestartingSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.replayer.archive import MatchKind
from mmina.replayer.fidelity import (
    PIXEL_TOLERANCE,
    EpisodeFidelity,
    RequestCounts,
    RequestMatch,
    SocketFidelity,
    StepView,
    compare_steps,
    screenshot_differ,
)
from mmina.replayer.pace import PacedSteps, RecordedPace
from mmina.replayer.router import ArchiveRouter, Served
from mmina.replayer.source import Rows, Source, SourceRun, by_episode
from mmina.replayer.timeline import Timeline
from mmina.store import Store
from mmina.tasks.budget import Limits
from mmina.tasks.task import Task

STEP_COLUMNS = [
    "episode_id",
    "step_index",
    "url",
    "tree_text",
    "screenshot",
    "action",
    "model_output",
    "started_at",
    "acted_at",
    "frozen_ms",
    "tree_ms",
    "dispatch_ms",
]


@dataclass(frozen=True, kw_only=True)
class ReplaySetup:
    """What a replay worker needs to rebuild everything on its own (picklable)."""

    store: str
    replay_id: str
    source_run: str
    episodes: frozenset[str]
    browser: BrowserConfig
    tolerance: int = PIXEL_TOLERANCE
    agent: str = "replay"
    """``replay`` (the stored actions) or the new agent of ``--agent`` mode."""
    settings: AgentSettings = field(default_factory=AgentSettings)
    limits: Limits | None = None
    """The new agent's budget (stored actions keep the source's)."""


@dataclass(frozen=True)
class AgentEpisode:
    """One episode of a new agent on the archived web, with the requests the archive lacked."""

    result: EpisodeResult
    requests: RequestCounts
    coverage_gaps: tuple[str, ...]


@dataclass(frozen=True)
class _Outcome:
    result: EpisodeResult
    steps: list[dict[str, Any]]
    step_starts: list[datetime]
    served: list[Served]
    sockets: tuple[SocketFidelity, ...] = ()


class _ArchiveJob:
    """The source run read once, one browser session, a store handle per thread."""

    def __init__(
        self,
        setup: ReplaySetup,
        session: BrowserSession | None = None,
        store: Store | None = None,
        source: SourceRun | None = None,
    ) -> None:
        self.setup = setup
        self.store = store or Store.open(setup.store)
        self.source = source or SourceRun.load(self.store, setup.source_run, set(setup.episodes))
        self.browsers = RestartingSession(setup.browser, session)
        self._local = threading.local()

    def thread_store(self) -> Store:
        """This thread's handle on the store (a handle caches its blob index as it writes)."""
        if not hasattr(self._local, "store"):
            self._local.store = (
                self.store
                if threading.current_thread() is threading.main_thread()
                else Store.open(self.setup.store)
            )
        return self._local.store

    def replay(
        self,
        task: Task,
        agent: Agent,
        limits: Limits,
        sources: Sequence[Source],
        seed_name: str,
        attempt: int,
        pacer: PacedSteps | None = None,
        recorded_until: float | None = None,
    ) -> _Outcome:
        """One episode in a context routed to these sources' archive, at the ``pacer``'s pace
        (its order with the observations kept); a failure leaves nothing of it in the store.
        Its sockets are compared up to its last observation (when it was taken; what the recording
        received after it read the page was held until then) and ``recorded_until``, when the
        recording's last read the page (``ArchiveRouter.socket_fidelity``)."""
        router = ArchiveRouter(
            self.source.archive(self.store, sources),
            sources[0].started_at,
            paced=pacer is not None,
            on_socket=pacer.socket_opened if pacer else None,
            turns=pacer.turns if pacer else None,
            timeline=pacer.timeline if pacer else None,
            trusted_tls=True,
        )
        store = self.thread_store()
        writer = store.episode_writer(self.setup.replay_id, new_episode_id(task))
        with tempfile.TemporaryDirectory(prefix="mmina-replay-") as workdir:
            recorder = EpisodeRecorder(
                self.browsers.alive(),
                agent,
                task,
                writer,
                limits,
                Path(workdir),
                prepare=router.prepare,
                offline=Offline(tuple(router.bodies.addresses.values())),
                seed=sources[0].seeding(seed_name),
                pacer=pacer,
                more_traffic=router.traffic,
            )
            try:
                result = recorder.record(attempt)
            except BaseException:
                writer.abort()
                raise
        replayed_until = pacer.observed_until if pacer is not None and recorded_until is not None else None
        return _Outcome(
            result,
            writer.steps,
            recorder.step_starts,
            router.served,
            router.socket_fidelity(recorded_until, replayed_until),
        )

    def close(self) -> None:
        self.browsers.close()


class StoredActionsJob(_ArchiveJob):
    """Replays ``(attempt, source)`` items with their recorded actions; returns the fidelity."""

    def __init__(
        self,
        setup: ReplaySetup,
        session: BrowserSession | None = None,
        store: Store | None = None,
        source: SourceRun | None = None,
    ) -> None:
        super().__init__(setup, session, store, source)
        self.steps = by_episode(
            self.store, "steps", setup.source_run, "step_index", set(setup.episodes), STEP_COLUMNS
        )

    def work(self, item: tuple[int, Source]) -> EpisodeFidelity:
        attempt, source = item
        recorded = self.steps.get(source.episode_id, [])
        pace = RecordedPace.of(source.started_at, recorded, self.source.requests.get(source.episode_id, []))
        last = pace.observed_at[-1] if pace else None
        outcome = self.replay(
            self.source.task(source.task_id),
            _replayer(self.steps, source),
            self.source.limits,
            [source],
            source.episode_id,
            attempt,
            PacedSteps(pace, timeline=Timeline()) if pace else None,
            last,
        )
        return _fidelity(self.thread_store(), source, recorded, outcome, self.setup.tolerance)


class AgentJobBase(_ArchiveJob):
    """A job that runs the setup's agent (one per thread) on archived webs."""

    def __init__(
        self,
        setup: ReplaySetup,
        session: BrowserSession | None = None,
        store: Store | None = None,
        source: SourceRun | None = None,
        agent: Agent | None = None,
    ) -> None:
        super().__init__(setup, session, store, source)
        self._first_agent = agent
        self._lock = threading.Lock()

    def thread_agent(self) -> Agent:
        """The agent given (for the first thread to ask), else a new one of the same kind."""
        if not hasattr(self._local, "agent"):
            with self._lock:
                given, self._first_agent = self._first_agent, None
            self._local.agent = given or make_agent(
                self.setup.agent, self.setup.settings, self.thread_store()
            )
        return self._local.agent


class AgentJob(AgentJobBase):
    """Runs the setup's agent on ``(task_id, sources)`` items, each task on its pooled archive."""

    def work(self, item: tuple[str, tuple[Source, ...]]) -> AgentEpisode:
        task_id, sources = item
        outcome = self.replay(
            self.source.task(task_id),
            self.thread_agent(),
            self.setup.limits or Limits(),
            sources,
            f"{self.setup.source_run}/{task_id}",
            1,
        )
        return AgentEpisode(outcome.result, counts(outcome.served), _gaps(outcome.served))


def _replayer(steps: Rows, source: Source) -> ReplayAgent:
    """The replay agent with the episode's actions: the parsed action, else the raw output (so
    parse errors repeat too)."""
    return ReplayAgent({}, only=stored_steps(steps.get(source.episode_id, [])))


def _fidelity(
    store: Store, source: Source, recorded: list[dict[str, Any]], outcome: _Outcome, tolerance: int
) -> EpisodeFidelity:
    """Compare the replayed steps with the recorded ones (screenshots fetched from both packs)."""
    digests = {s["screenshot"] for s in [*recorded, *outcome.steps] if s.get("screenshot")}
    index = store.blob_index
    packs = {*source.blob_packs, *(index.location[d] for d in digests if d in index)}
    differ = screenshot_differ(store.read_blobs(sorted(digests), sorted(packs)), tolerance)
    steps = compare_steps(
        [StepView.from_row(r) for r in recorded],
        [StepView.from_row(r) for r in outcome.steps],
        differ,
        _requests_by_step(outcome.served, outcome.step_starts),
    )
    matches = _traced_by_step(outcome.served, outcome.step_starts)
    steps = tuple(replace(s, matches=matches.get(s.step_index - 1, ())) for s in steps)
    return EpisodeFidelity(
        task_id=source.task_id,
        source_episode=source.episode_id,
        replay_episode=outcome.result.episode_id,
        recorded_steps=len(recorded),
        replayed_steps=len(outcome.steps),
        steps=steps,
        requests=counts(outcome.served),
        unmatched_urls=_gaps(outcome.served),
        status=outcome.result.status,
        error=outcome.result.error,
        sockets=outcome.sockets,
    )


def _requests_by_step(served: Sequence[Served], step_starts: Sequence[datetime]) -> dict[int, RequestCounts]:
    """Served requests grouped by the step whose action issued them (-1: the initial load)."""
    return {step: counts(requests) for step, requests in _by_step(served, step_starts).items()}


def _traced_by_step(
    served: Sequence[Served], step_starts: Sequence[datetime]
) -> dict[int, tuple[RequestMatch, ...]]:
    """Each step's requests answered by nearest match or synthetically, with what served them."""
    traced = {MatchKind.NEAREST, MatchKind.UNMATCHED}
    return {
        step: tuple(
            RequestMatch(r.method, r.url, r.kind.value, r.recorded_url, r.recorded_order)
            for r in requests
            if r.kind in traced and not r.failed
        )
        for step, requests in _by_step(served, step_starts).items()
    }


def _by_step(served: Sequence[Served], step_starts: Sequence[datetime]) -> dict[int, list[Served]]:
    groups: dict[int, list[Served]] = {}
    for request in served:
        groups.setdefault(bisect.bisect_right(step_starts, request.at) - 1, []).append(request)
    return groups


def counts(served: Sequence[Served]) -> RequestCounts:
    """How the router answered: by match kind, plus the defects (missing bodies, failures,
    bodies changed by redaction)."""
    answered = [s.kind for s in served if not s.failed]
    return RequestCounts.of(
        answered,
        sum(s.missing_body for s in served),
        sum(s.failed for s in served),
        sum(s.redacted_body for s in served),
    )


def _gaps(served: Iterable[Served]) -> tuple[str, ...]:
    return tuple(
        dict.fromkeys(f"{s.method} {s.url}" for s in served if s.kind is MatchKind.UNMATCHED and not s.failed)
    )
