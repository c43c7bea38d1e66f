"""Recording episodes side by side: threads sharing a browser, processes, or Ray actors.

A :class:`Worker` owns one browser session and records up to ``concurrency`` episodes at a
time, each on its own thread in its own browser context, with its own agent, store handle and
temporary folder. ``--workers P`` runs P workers in processes of their own (``local``) or as
Ray actors (``ray``, see ``mmina.recorder.ray_executor``). Workers share nothing but the store
(whose writers are safe side by side), so an episode's result does not depend on how many
workers or threads ran, or which one took it.
"""
from __future__ import annotations

import multiprocessing
import queue
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mmina.agents.captions import Captioner, make_captioner
from mmina.agents.protocol import Agent
from mmina.agents.registry import make_agent
from mmina.agents.settings import AgentSettings
from mmina.budget import Limits
from mmina.errors import MminaError
from mmina.recorder.browser import BrowserConfig, BrowserSession, RestartingSession
from mmina.recorder.episode import EpisodeRecorder, EpisodeResult, new_episode_id
from mmina.store import Store
from mmina.tasks import Task

Done = Iterator[tuple[Task, EpisodeResult]]
T = TypeVar("T")
R = TypeVar("R")
POLL_S = 0.5
_END: Any = object()


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to rebuild everything on its own (picklable); ``settings`` carry the run id."""

    agent: str
    settings: AgentSettings
    store: str
    run_id: str
    limits: Limits
    browser: BrowserConfig
    concurrency: int = 1


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

    def __init__(self, setup: WorkerSetup, session: BrowserSession | None = None, store: Store | None = None,
                 agent: Agent | None = None, captioner: Captioner | None = None) -> None:
        self.setup = setup
        self.browsers = RestartingSession(setup.browser, session)
        self._given = (agent, captioner, store) if agent is not None and store is not None else None
        self._local = threading.local()
        self._hands: list[_Hands] = []
        self._lock = threading.Lock()

    def record(self, task: Task) -> EpisodeResult:
        """Record one task on the calling thread (many threads may call at once)."""
        hands = self._thread_hands()
        writer = hands.store.episode_writer(self.setup.run_id, new_episode_id(task))
        try:
            return EpisodeRecorder(self.browsers.alive(), hands.agent, task, writer, self.setup.limits,
                                   Path(hands.workdir.name), hands.captioner).record(attempt=1)
        except BaseException:  # Ctrl-C or a bug: leave no partial file of this episode behind
            writer.abort()
            raise

    def record_all(self, tasks: Iterable[Task], stop: Callable[[], bool] = lambda: False) -> Done:
        """Every task, ``concurrency`` at a time, yielded as each finishes; takes no new task
        once ``stop()`` is true. On an error (or Ctrl-C) the episodes in flight finish first."""
        if self.setup.concurrency == 1:
            for task in tasks:
                if stop():
                    return
                yield task, self.record(task)
            return
        yield from in_flight(self.record, tasks, self.setup.concurrency, stop)

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


def in_flight(work: Callable[[T], R], items: Iterable[T], concurrency: int,
              stop: Callable[[], bool] = lambda: False) -> Iterator[tuple[T, R]]:
    """``work`` on each item on a pool of ``concurrency`` threads, yielding ``(item, result)`` as
    they come; at most ``concurrency`` items are taken ahead, none once ``stop()`` is true."""
    pending: dict[Future[R], T] = {}
    todo = iter(items)
    with ThreadPoolExecutor(concurrency, thread_name_prefix="episode") as pool:
        try:
            while True:
                while len(pending) < concurrency and not stop():
                    item = next(todo, _END)
                    if item is _END:
                        break
                    pending[pool.submit(work, item)] = item
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        finally:
            wait(pending)  # the episodes in flight finish (and commit) before anything else happens


# ---------------------------------------------------------------- processes on this machine

def record_in_processes(setup: WorkerSetup, tasks: list[Task], workers: int) -> Done:
    """Episodes from ``workers`` processes, each a :class:`Worker`, yielded as they finish.

    The workers take tasks from one queue; on an error or Ctrl-C here they take no more and
    finish the episodes in flight. A worker that dies (killed) costs its episodes in flight:
    the run then ends with an error naming them (``--resume`` records them).
    """
    context = multiprocessing.get_context("spawn")
    todo: Any = context.Queue()
    results: Any = context.Queue()
    stop = context.Event()
    for task in tasks:
        todo.put(task)
    for _ in range(workers):
        todo.put(None)  # one end mark per worker: each stops taking tasks at the first it sees
    processes = [context.Process(target=_serve, args=(setup, todo, results, stop), daemon=True)
                 for _ in range(workers)]
    for process in processes:
        process.start()
    try:
        yield from _collect(results, processes, {t.task_id: t for t in tasks})
    finally:
        stop.set()
        _join(processes, results)


def _collect(results: Any, processes: list[Any], tasks: dict[str, Task]) -> Done:
    waiting = dict(tasks)
    while waiting:
        try:
            kind, task_id, payload = results.get(timeout=POLL_S)
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                raise MminaError(f"recording workers exited before {len(waiting)} task(s) finished "
                                 f"({', '.join(sorted(waiting)[:5])}...): run again with --resume") from None
            continue
        if kind == "error":
            raise payload
        yield waiting.pop(task_id), payload


def _join(processes: list[Any], results: Any) -> None:
    """Wait for the workers to end, reading what they still send (a process cannot exit while
    its queue holds data nobody read)."""
    while any(p.is_alive() for p in processes):
        try:
            results.get(timeout=POLL_S)
        except queue.Empty:
            pass
    for process in processes:
        process.join()


def _serve(setup: WorkerSetup, todo: Any, results: Any, stop: Any) -> None:
    """A worker process: Ctrl-C is the recording process's to handle (it tells us to stop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(setup)
    try:
        for task, outcome in worker.record_all(_queued(todo, stop), stop.is_set):
            results.put(("done", task.task_id, outcome))
    except BaseException as exc:  # noqa: BLE001 - reported to the recording process, which raises it
        results.put(("error", "", _sendable(exc)))
    finally:
        worker.close()


def _queued(todo: Any, stop: Any) -> Iterator[Task]:
    while not stop.is_set():
        task = todo.get()
        if task is None:
            return
        yield task


def _sendable(exc: BaseException) -> BaseException:
    """The exception if it survives pickling, else a plain one with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return MminaError(f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- Ray actors

def record_with_ray(setup: WorkerSetup, tasks: list[Task], workers: int, address: str | None) -> Done:
    """Episodes recorded by ``workers`` Ray actors, each a :class:`Worker`, yielded as they finish."""
    from mmina import ray_executor

    ray_executor.connect(address, workers)
    actors = ray_executor.start_actors(Worker, (setup,), max(1, min(workers, len(tasks))), setup.concurrency)
    try:
        yield from ray_executor.spread(actors, lambda actor, task: actor.call.remote("record", task), tasks,
                                       setup.concurrency)
    finally:
        ray_executor.stop_actors(actors)
