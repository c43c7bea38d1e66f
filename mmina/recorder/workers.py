"""Recording episodes in one process or several: each worker owns a browser and an agent.

Workers share nothing but the store (whose writers are safe side by side), so an
episode's result does not depend on how many workers ran or which one took it.
"""
from __future__ import annotations

import atexit
import multiprocessing
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from mmina.agents.captions import Captioner, make_captioner
from mmina.agents.protocol import Agent
from mmina.agents.registry import make_agent
from mmina.agents.settings import AgentSettings
from mmina.budget import Limits
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.store import Store
from mmina.tasks import Task


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to rebuild everything on its own (picklable); ``settings`` carry the run id."""

    agent: str
    settings: AgentSettings
    store: str
    run_id: str
    limits: Limits
    browser: BrowserConfig


class EpisodeRunner:
    """Records one task at a time with its own browser session, agent and temp folder.

    In the recording process it is handed what the run already made; a worker process builds
    its own from the :class:`WorkerSetup`.
    """

    def __init__(self, setup: WorkerSetup, session: BrowserSession, store: Store, agent: Agent,
                 captioner: Captioner | None) -> None:
        self.setup, self.session, self.store, self.agent, self.captioner = setup, session, store, agent, captioner
        self._workdir = tempfile.TemporaryDirectory(prefix="mmina-")

    def record(self, task: Task) -> EpisodeResult:
        writer = self.store.episode_writer(self.setup.run_id, new_episode_id(task))
        try:
            result = EpisodeRecorder(self.session, self.agent, task, writer, self.setup.limits,
                                     Path(self._workdir.name), self.captioner).record(attempt=1)
        except BaseException:  # Ctrl-C or a bug: leave no partial file of this episode behind
            writer.abort()
            raise
        if not self.session.connected:
            self.session.close()
            self.session = BrowserSession(self.setup.browser)
        return result

    def close(self) -> None:
        self.session.close()
        self._workdir.cleanup()


def record_serially(runner: EpisodeRunner, tasks: Iterable[Task]) -> Iterator[tuple[Task, EpisodeResult]]:
    for task in tasks:
        yield task, runner.record(task)


_RUNNER: EpisodeRunner | None = None


def _start_worker(setup: WorkerSetup) -> None:
    global _RUNNER
    store = Store.open(setup.store)
    _RUNNER = EpisodeRunner(setup, BrowserSession(setup.browser), store,
                            make_agent(setup.agent, setup.settings, store), make_captioner(setup.settings))
    atexit.register(_RUNNER.close)


def _record_in_worker(task: Task) -> EpisodeResult:
    assert _RUNNER is not None, "worker not initialised"
    return _RUNNER.record(task)


def record_in_parallel(setup: WorkerSetup, tasks: list[Task], workers: int) -> Iterator[tuple[Task, EpisodeResult]]:
    """Episodes from ``workers`` processes, yielded as they finish."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(setup,)) as pool:
        pending: dict[Future[EpisodeResult], Task] = {pool.submit(_record_in_worker, t): t for t in tasks}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise

