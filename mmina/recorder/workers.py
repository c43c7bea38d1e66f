"""A recording worker: one browser session, many episodes in flight.

A :class:`Worker` (a job of ``mmina.executors.interface``) records up to ``concurrency`` episodes at a time,
each on its own thread in its own browser context, with its own agent, store handle and
temporary folder. ``--workers P`` runs P of them, in processes of their own or as Ray actors.
Workers share nothing but the store (whose writers are safe side by side), so an episode's
result does not depend on how many workers or threads ran, or which one took it.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from mmina.agents.captions import Captioner, make_captioner
from mmina.agents.protocol import Agent
from mmina.agents.registry import make_agent
from mmina.agents.settings import AgentSettings
from mmina.recorder.browser import BrowserConfig, BrowserSession, RestartingSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.store import Store
from mmina.tasks.budget import Limits
from mmina.tasks.task import Task


@dataclass(frozen=True)
class Repeat:
    """One episode a run records: a task, which of its repeats it is (``episodes.attempt``,
    1..``record --repeats``), and the episode of that repeat it records again (an error ended
    it: ``record --resume``), which the new one supersedes. Each is recorded once, and
    ``--resume`` skips those committed."""

    task: Task
    attempt: int = 1
    supersedes: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.task.task_id, self.attempt

    @property
    def label(self) -> str:
        """The task id, with the repeat after it when it is not the first."""
        return self.task.task_id if self.attempt == 1 else f"{self.task.task_id} (repeat {self.attempt})"


@dataclass(frozen=True, kw_only=True)
class WorkerSetup:
    """What a worker needs to rebuild everything on its own (picklable); ``settings`` carry the run id."""

    agent: str
    settings: AgentSettings
    store: str
    run_id: str
    limits: Limits
    browser: BrowserConfig


@dataclass
class _Hands:
    """What one episode thread records with: its agent, captioner, store handle and folder."""

    agent: Agent
    captioner: Captioner | None
    store: Store
    workdir: tempfile.TemporaryDirectory[str]


class Worker:
    """One browser session with up to ``setup.concurrency`` episodes in flight (one per thread).

    In the recording process it may be handed the session, store and agent the run already
    made (used by the first thread); otherwise it builds its own from the :class:`WorkerSetup`.
    """

    def __init__(
        self,
        setup: WorkerSetup,
        session: BrowserSession | None = None,
        store: Store | None = None,
        agent: Agent | None = None,
        captioner: Captioner | None = None,
    ) -> None:
        self.setup = setup
        self.browsers = RestartingSession(setup.browser, session)
        self._given = (agent, captioner, store) if agent is not None and store is not None else None
        self._local = threading.local()
        self._hands: list[_Hands] = []
        self._lock = threading.Lock()

    def work(self, item: Repeat) -> EpisodeResult:
        """Record one repeat of a task on the calling thread (many threads may call at once)."""
        hands = self._thread_hands()
        writer = hands.store.episode_writer(self.setup.run_id, new_episode_id(item.task))
        try:
            return EpisodeRecorder(
                self.browsers.alive(),
                hands.agent,
                item.task,
                writer,
                self.setup.limits,
                Path(hands.workdir.name),
                hands.captioner,
            ).record(item.attempt, item.supersedes)
        except BaseException:  # Ctrl-C or a bug: leave no partial file of this episode behind
            writer.abort()
            raise

    def _thread_hands(self) -> _Hands:
        hands = getattr(self._local, "hands", None)
        if hands is None:
            hands = self._local.hands = self._new_hands()
        return hands

    def _new_hands(self) -> _Hands:
        with self._lock:
            given, self._given = self._given, None
        if given is not None:
            agent, captioner, store = given
        else:
            store = Store.open(self.setup.store)
            agent = make_agent(self.setup.agent, self.setup.settings, store)
            captioner = make_captioner(self.setup.settings)
        hands = _Hands(agent, captioner, store, tempfile.TemporaryDirectory(prefix="mmina-"))
        with self._lock:
            self._hands.append(hands)
        return hands

    def close(self) -> None:
        self.browsers.close()
        for hands in self._hands:
            hands.workdir.cleanup()
