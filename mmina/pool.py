"""Work spread over threads, processes and Ray actors: ``--concurrency``, ``--workers``, ``--executor``.

A *job* is what one worker builds in its own process (a browser session and what an episode
needs, for instance) and then calls ``work(item)`` on, from up to ``concurrency`` threads at
once. :func:`spread` hands the items to ``workers`` such jobs — in this process, in processes
of their own, or in Ray actors — and yields ``(item, result)`` as each finishes. Whatever runs
where, each item is worked on once and independently, so results do not depend on the layout.

On an error or Ctrl-C in the consumer no new item starts and the items in flight finish first
(an episode in flight commits, so ``--resume`` has nothing half-done to redo).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from mmina.errors import MminaError, MminaWarning

T = TypeVar("T")
R = TypeVar("R")
POLL_S = 0.5
MAX_LOST = 16
"""Worker processes a spread replaces at most (one that dies on every item must end the run)."""
EXECUTORS = ("local", "ray")
AGAIN = "run the command again (mmina record: with --resume, which skips the finished tasks)"
"""What to do when a worker died: what finished is committed, the rest is not."""
_END: Any = object()


class Job(Protocol):
    def work(self, item: Any) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Layout:
    """How work is spread: ``workers`` jobs, each with ``concurrency`` items in flight, run by
    ``executor`` (``local``: this process or processes on this machine; ``ray``: Ray actors)."""

    workers: int = 1
    concurrency: int = 1
    executor: str = "local"
    ray_address: str | None = None

    def in_this_process(self, items: int) -> bool:
        """Whether one job in this process does it all (one worker, or too few items for more)."""
        return self.executor == "local" and (self.workers == 1 or items <= self.concurrency)

    def describe(self) -> dict[str, Any]:
        return {"workers": self.workers, "concurrency": self.concurrency, "executor": self.executor}


def never() -> bool:
    return False


def spread(make: Callable[[], Job], items: Sequence[T], layout: Layout, here: Job | None = None,
           settled: Callable[[T], bool] | None = None, stop: Callable[[], bool] = never) -> Iterator[tuple[T, Any]]:
    """Every item worked on by jobs ``make()`` builds where ``layout`` says (``here``, a job
    already built in this process, is used when the work stays in this process); with
    ``settled`` (whether an item's work is kept already), the items a lost worker had in flight
    are worked on again by another (``mmina.ray_executor``, :func:`in_processes`). Once
    ``stop()`` (asked as results come) no item starts; those in flight finish and are yielded."""
    if layout.in_this_process(len(items)):
        job = here or make()
        try:
            yield from in_flight(job.work, items, layout.concurrency, stop)
        finally:
            job.close()
    elif layout.executor == "ray":
        from mmina import ray_executor

        yield from ray_executor.spread(make, items, layout, settled, stop)
    else:
        yield from in_processes(make, items, min(layout.workers, -(-len(items) // layout.concurrency)),
                                layout.concurrency, settled, stop)


def in_flight(work: Callable[[T], R], items: Iterable[T], concurrency: int,
              stop: Callable[[], bool] = never) -> Iterator[tuple[T, R]]:
    """``work`` on each item, ``concurrency`` at a time on a pool of threads (on the calling
    thread when 1), yielding ``(item, result)`` as they come; none is taken once ``stop()``."""
    if concurrency == 1:
        for item in items:
            if stop():
                return
            yield item, work(item)
        return
    pending: dict[Future[R], T] = {}
    todo = iter(items)
    with ThreadPoolExecutor(concurrency, thread_name_prefix="work") as pool:
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
            wait(pending)  # the items in flight finish before anything else happens


def in_processes(make: Callable[[], Job], items: Sequence[T], workers: int, concurrency: int,
                 settled: Callable[[T], bool] | None = None, stop: Callable[[], bool] = never
                 ) -> Iterator[tuple[T, Any]]:
    """``workers`` processes (spawned), each building one job and taking items from one queue.

    A process that dies (killed: by the OOM killer, by hand) costs its items in flight: with
    ``settled``, those not settled go to a new process of their own (the others' queue keeps its
    order and end marks); without, the run ends with an error naming how many did not finish.
    """
    context = multiprocessing.get_context("spawn")
    crew = _Processes(context, make, concurrency)
    for index, item in enumerate(items):
        crew.todo.put((index, item))
    for _ in range(workers):
        crew.start(crew.todo)
    try:
        yield from _collect(crew, items, settled, stop)
    finally:
        crew.stop.set()
        _join(crew.processes, crew.results)


class _Processes:
    """The worker processes, their queues, and which process works on which item."""

    def __init__(self, context: Any, make: Callable[[], Job], concurrency: int) -> None:
        self.context, self.make, self.concurrency = context, make, concurrency
        self.todo: Any = context.Queue()
        self.results: Any = context.Queue()
        self.stop = context.Event()
        self.processes: list[Any] = []
        self.everyone: list[Any] = []
        """Every process started that has not been seen to end by a signal or an error."""
        self.queues: list[Any] = []
        self.working: dict[int, int] = {}
        """Item index -> the pid of the process working on it."""
        self.lost = 0

    def start(self, todo: Any, items: Sequence[tuple[int, Any]] = ()) -> None:
        """One more process taking from ``todo`` (with ``items`` put first: a replacement's own queue,
        kept here: a queue the parent drops is unlinked before the child opens it)."""
        self.queues.append(todo)
        for entry in items:
            todo.put(entry)
        todo.put(None)  # its end mark: each process stops at the first it sees
        process = self.context.Process(target=_serve, args=(self.make, self.concurrency, todo, self.results,
                                                            self.stop), daemon=True)
        process.start()
        self.processes.append(process)
        self.everyone.append(process)

    def killed(self) -> bool:
        """Whether a process ended by a signal or an error since the last look (each counted once)."""
        ended = [p for p in self.everyone if p.exitcode not in (None, 0)]
        self.everyone = [p for p in self.everyone if p not in ended]
        return bool(ended)

    def dead_with_work(self) -> list[Any]:
        """The processes that died with items in flight (each reported once)."""
        pids = set(self.working.values())
        dead = [p for p in self.processes if not p.is_alive() and p.pid in pids]
        self.processes = [p for p in self.processes if p not in dead]
        return dead


def _collect(crew: _Processes, items: Sequence[T], settled: Callable[[T], bool] | None,
             stop: Callable[[], bool]) -> Iterator[tuple[T, Any]]:
    waiting = set(range(len(items)))
    while waiting:
        if stop():
            crew.stop.set()  # the processes take no more; what they work on finishes
        try:
            kind, index, payload = crew.results.get(timeout=POLL_S)
        except queue.Empty:
            if crew.stop.is_set() and not crew.working:
                return
            _mend(crew, items, settled, waiting)
            continue
        if kind == "error":
            raise payload
        if kind == "started":
            crew.working[index] = payload
            continue
        crew.working.pop(index, None)
        waiting.discard(index)
        yield items[index], payload


def _mend(crew: _Processes, items: Sequence[T], settled: Callable[[T], bool] | None, waiting: set[int]) -> None:
    """Queue again what dead processes had in flight, each dead one replaced (see :func:`in_processes`)."""
    if settled is not None and crew.lost <= MAX_LOST:
        for process in crew.dead_with_work():
            _replace(crew, process, items, settled, waiting)
        if not any(p.is_alive() for p in crew.processes) and crew.killed():
            _rescue(crew, items, settled, waiting)
    if waiting and not any(p.is_alive() for p in crew.processes):
        raise MminaError(f"the worker processes exited before {len(waiting)} of {len(items)} item(s) "
                         f"finished: {AGAIN}") from None


def _replace(crew: _Processes, process: Any, items: Sequence[T], settled: Callable[[T], bool],
             waiting: set[int]) -> None:
    """A new process for the items a dead one had in flight, those not settled first."""
    crew.lost += 1
    again = []
    for index in [i for i, pid in crew.working.items() if pid == process.pid]:
        del crew.working[index]
        if settled(items[index]):
            waiting.discard(index)
        else:
            again.append((index, items[index]))
    crew.start(crew.context.Queue(), again)
    warnings.warn(MminaWarning(f"a worker process was lost (exit code {process.exitcode}); what it had in flight is "
                               f"worked on again by a new one ({crew.lost} lost so far)"), stacklevel=1)


def _rescue(crew: _Processes, items: Sequence[T], settled: Callable[[T], bool], waiting: set[int]) -> None:
    """Every process gone, items never reported done: a killed process took them from the queue
    before it could say so. Those not settled go to a new process."""
    crew.lost += 1
    again = []
    for index in sorted(waiting):
        if settled(items[index]):
            waiting.discard(index)
        else:
            again.append((index, items[index]))
    if again:
        crew.start(crew.context.Queue(), again)


def _join(processes: list[Any], results: Any) -> None:
    """Wait for the processes to end, reading what they still send (a process cannot exit
    while its queue holds data nobody read)."""
    while any(p.is_alive() for p in processes):
        try:
            results.get(timeout=POLL_S)
        except queue.Empty:
            pass
    for process in processes:
        process.join()


def _serve(make: Callable[[], Job], concurrency: int, todo: Any, results: Any, stop: Any) -> None:
    """A worker process. Ctrl-C is the parent's to handle (it tells us to stop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        job = make()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", -1, sendable(exc)))
        return
    def work(pair: tuple[int, Any]) -> Any:
        results.put(("started", pair[0], os.getpid()))
        return job.work(pair[1])

    try:
        for (index, _item), result in in_flight(work, _queued(todo, stop), concurrency, stop.is_set):
            results.put(("done", index, result))
    except BaseException as exc:  # noqa: BLE001 - as above
        results.put(("error", -1, sendable(exc)))
    finally:
        job.close()


def _queued(todo: Any, stop: Any) -> Iterator[tuple[int, Any]]:
    while not stop.is_set():
        entry = todo.get()
        if entry is None:
            return
        yield entry


def sendable(exc: BaseException) -> BaseException:
    """The exception if it survives pickling, else a plain one with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return MminaError(f"{type(exc).__name__}: {exc}")
