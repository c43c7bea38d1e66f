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
import pickle
import signal
import threading
import warnings
from collections import deque
from multiprocessing import connection
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
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
OnWorkers = Callable[[int, int], None]
"""Told the workers at work and those lost so far, whenever either changes (a progress display)."""


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
           settled: Callable[[T], bool] | None = None, stop: Callable[[], bool] = never,
           on_workers: OnWorkers | None = None) -> Iterator[tuple[T, Any]]:
    """Every item worked on by jobs ``make()`` builds where ``layout`` says (``here``, a job
    already built in this process, is used when the work stays in this process); with
    ``settled`` (whether an item's work is kept already), the items a lost worker had in flight
    are worked on again by another (``mmina.executors.ray_executor``, :func:`in_processes`). Once
    ``stop()`` (asked as results come) no item starts; those in flight finish and are yielded.
    Workers in processes or Ray actors are counted to ``on_workers`` as they start and are lost."""
    if layout.in_this_process(len(items)):
        job = here or make()
        try:
            yield from in_flight(job.work, items, layout.concurrency, stop)
        finally:
            job.close()
    elif layout.executor == "ray":
        from mmina.executors import ray_executor

        yield from ray_executor.spread(make, items, layout, settled, stop, on_workers)
    else:
        yield from in_processes(make, items, min(layout.workers, -(-len(items) // layout.concurrency)),
                                layout.concurrency, settled, stop, on_workers)


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
                 settled: Callable[[T], bool] | None = None, stop: Callable[[], bool] = never,
                 on_workers: OnWorkers | None = None) -> Iterator[tuple[T, Any]]:
    """``workers`` processes (spawned), each building one job and working on the items this
    process hands it over a pipe of its own, at most ``concurrency`` at a time.

    Each process has its own pipe, so one that dies (killed: by the OOM killer, by hand) cannot
    leave a shared queue's lock held, and which items it had is known here: with ``settled``,
    those not settled are handed to the others or a new process; without, the run ends with an
    error naming how many did not finish.
    """
    crew = _Processes(multiprocessing.get_context("spawn"), make, concurrency, on_workers)
    todo: deque[tuple[int, T]] = deque(enumerate(items))
    for _ in range(workers):
        crew.start()
    try:
        yield from _collect(crew, items, todo, settled, stop)
    finally:
        crew.close()


@dataclass
class _Hand:
    """One worker process, its end of the pipe, and the items it holds (index -> item)."""

    process: Any
    conn: Any
    holds: dict[int, Any] = field(default_factory=dict)
    ended: bool = False
    """Told that no more items come (it finishes what it holds, then exits)."""


class _Processes:
    """The worker processes and what each holds."""

    def __init__(self, context: Any, make: Callable[[], Job], concurrency: int,
                 on_workers: OnWorkers | None = None) -> None:
        self.context, self.make, self.concurrency, self.on_workers = context, make, concurrency, on_workers
        self.hands: list[_Hand] = []
        self.lost = 0

    def counted(self) -> None:
        """Tell ``on_workers`` the processes alive and lost."""
        if self.on_workers is not None:
            self.on_workers(sum(h.process.is_alive() for h in self.hands), self.lost)

    def start(self) -> None:
        mine, theirs = self.context.Pipe()
        process = self.context.Process(target=_serve, args=(self.make, self.concurrency, theirs), daemon=True)
        process.start()
        theirs.close()
        self.hands.append(_Hand(process, mine))
        self.counted()

    def feed(self, todo: deque[tuple[int, Any]], stopping: bool) -> None:
        """Each process as many items as it has room for; an end mark when none are left."""
        for hand in self.hands:
            while not hand.ended and not stopping and todo and len(hand.holds) < self.concurrency:
                index, item = todo.popleft()
                hand.holds[index] = item
                _send(hand, (index, item))
            if not hand.ended and (stopping or not todo):
                hand.ended = True
                _send(hand, None)

    def close(self) -> None:
        """End every process, reading what they still send (a full pipe would keep one from exiting)."""
        for hand in self.hands:
            if not hand.ended:
                hand.ended = True
                _send(hand, None)
        while any(h.process.is_alive() for h in self.hands):
            for conn in connection.wait([h.conn for h in self.hands if h.process.is_alive()], POLL_S):
                _receive(conn)
        for hand in self.hands:
            hand.process.join()
            hand.conn.close()


def _send(hand: _Hand, message: Any) -> None:
    try:
        hand.conn.send(message)
    except (BrokenPipeError, ConnectionResetError, OSError):
        pass  # it died: its items are handed out again when its end is seen


def _receive(conn: Any) -> Any:
    """The next message on ``conn``; None when its process is gone."""
    try:
        return conn.recv()
    except (EOFError, ConnectionResetError, OSError):
        return None


def _collect(crew: _Processes, items: Sequence[T], todo: deque[tuple[int, T]],
             settled: Callable[[T], bool] | None, stop: Callable[[], bool]) -> Iterator[tuple[T, Any]]:
    waiting = set(range(len(items)))
    while waiting:
        stopping = stop()
        crew.feed(todo, stopping)
        if stopping and not any(h.holds for h in crew.hands):
            return
        hands = {h.conn: h for h in crew.hands}
        ready = connection.wait([*hands, *(h.process.sentinel for h in crew.hands)], POLL_S)
        for hand in [h for h in crew.hands if h.conn in ready or not h.process.is_alive()]:
            for index, payload in _results(hand):  # an ended process's last results too
                waiting.discard(index)
                yield items[index], payload
        _mend(crew, items, todo, settled, waiting)


def _mend(crew: _Processes, items: Sequence[T], todo: deque[tuple[int, T]], settled: Callable[[T], bool] | None,
          waiting: set[int]) -> None:
    """The processes that ended: what they held goes to the others or to a new process, those
    settled meanwhile aside (see :func:`in_processes`)."""
    for hand in [h for h in crew.hands if not h.process.is_alive()]:
        crew.hands.remove(hand)
        if not hand.holds:
            continue
        if settled is None or crew.lost >= MAX_LOST:
            raise MminaError(f"a worker process exited before {len(waiting)} of {len(items)} item(s) finished: "
                             f"{AGAIN}")
        crew.lost += 1
        for index, item in hand.holds.items():
            if settled(item):
                waiting.discard(index)
            else:
                todo.appendleft((index, item))
        if not any(not h.ended for h in crew.hands):
            crew.start()
        crew.counted()
        warnings.warn(MminaWarning(f"a worker process was lost (exit code {hand.process.exitcode}); what it had in "
                                   f"flight is worked on again ({crew.lost} lost so far)"), stacklevel=1)
    if waiting and not crew.hands:
        raise MminaError(f"the worker processes exited before {len(waiting)} of {len(items)} item(s) "
                         f"finished: {AGAIN}")


def _results(hand: _Hand) -> list[tuple[int, Any]]:
    """The results waiting on a process's pipe (its error raised), each item no longer held."""
    found = []
    while _readable(hand.conn):
        message = _receive(hand.conn)
        if message is None:
            break
        kind, index, payload = message
        if kind == "error":
            raise payload
        hand.holds.pop(index, None)
        found.append((index, payload))
    return found


def _readable(conn: Any) -> bool:
    try:
        return bool(conn.poll())
    except (EOFError, OSError):
        return False


def _serve(make: Callable[[], Job], concurrency: int, conn: Any) -> None:
    """A worker process: the items the parent hands it, ``concurrency`` at a time, each result
    sent back as it finishes. Ctrl-C is the parent's to handle (it tells us to stop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sending = threading.Lock()

    def send(message: Any) -> None:
        with sending:
            conn.send(message)

    try:
        job = make()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        send(("error", -1, sendable(exc)))
        return
    try:
        for (index, _item), result in in_flight(lambda pair: job.work(pair[1]), _handed(conn), concurrency):
            send(("done", index, result))
    except BaseException as exc:  # noqa: BLE001 - as above
        send(("error", -1, sendable(exc)))
    finally:
        job.close()


def _handed(conn: Any) -> Iterator[tuple[int, Any]]:
    """The items the parent hands over, until its end mark (or its end)."""
    while True:
        message = _receive(conn)
        if message is None:
            return
        yield message


def sendable(exc: BaseException) -> BaseException:
    """The exception if it survives pickling, else a plain one with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return MminaError(f"{type(exc).__name__}: {exc}")
