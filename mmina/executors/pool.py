"""The local executor: work on threads of this process, or in processes of this machine.

A job (see ``mmina.executors.interface``) is worked on from up to ``concurrency`` threads at
once (:func:`in_flight`); with more workers, each is a process of its own (:class:`LocalExecutor`).
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import connection
from typing import Any, TypeVar

from mmina.errors import MminaError, MminaWarning
from mmina.executors.interface import AGAIN, Job, Layout, OnWorkers, Settled, never

T = TypeVar("T")
R = TypeVar("R")
POLL_S = 0.5
MAX_LOST = 16
"""Worker processes a spread replaces at most (one that dies on every item must end the run)."""
_END: Any = object()


def in_flight(
    work: Callable[[T], R], items: Iterable[T], concurrency: int, stop: Callable[[], bool] = never
) -> Iterator[tuple[T, R]]:
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


class LocalExecutor:
    """``--executor local``: each worker a process of this machine (spawned), with a pipe of its own."""

    def spread(
        self,
        make: Callable[[], Job],
        items: Sequence[T],
        layout: Layout,
        settled: Settled | None = None,
        stop: Callable[[], bool] = never,
        on_workers: OnWorkers | None = None,
    ) -> Iterator[tuple[T, Any]]:
        workers = min(layout.workers, -(-len(items) // layout.concurrency))
        return in_processes(make, items, workers, layout.concurrency, settled, stop, on_workers)


def in_processes(
    make: Callable[[], Job],
    items: Sequence[T],
    workers: int,
    concurrency: int,
    settled: Callable[[T], bool] | None = None,
    stop: Callable[[], bool] = never,
    on_workers: OnWorkers | None = None,
) -> Iterator[tuple[T, Any]]:
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

    def __init__(
        self, context: Any, make: Callable[[], Job], concurrency: int, on_workers: OnWorkers | None = None
    ) -> None:
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


def _collect(
    crew: _Processes,
    items: Sequence[T],
    todo: deque[tuple[int, T]],
    settled: Callable[[T], bool] | None,
    stop: Callable[[], bool],
) -> Iterator[tuple[T, Any]]:
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


def _mend(
    crew: _Processes,
    items: Sequence[T],
    todo: deque[tuple[int, T]],
    settled: Callable[[T], bool] | None,
    waiting: set[int],
) -> None:
    """The processes that ended: what they held goes to the others or to a new process, those
    settled meanwhile aside (see :func:`in_processes`)."""
    for hand in [h for h in crew.hands if not h.process.is_alive()]:
        crew.hands.remove(hand)
        if not hand.holds:
            continue
        if settled is None or crew.lost >= MAX_LOST:
            raise MminaError(
                f"a worker process exited before {len(waiting)} of {len(items)} item(s) finished: {AGAIN}"
            )
        crew.lost += 1
        for index, item in hand.holds.items():
            if settled(item):
                waiting.discard(index)
            else:
                todo.appendleft((index, item))
        if not any(not h.ended for h in crew.hands):
            crew.start()
        crew.counted()
        warnings.warn(
            MminaWarning(
                f"a worker process was lost (exit code {hand.process.exitcode}); what it had in "
                f"flight is worked on again ({crew.lost} lost so far)"
            ),
            stacklevel=1,
        )
    if waiting and not crew.hands:
        raise MminaError(
            f"the worker processes exited before {len(waiting)} of {len(items)} item(s) finished: {AGAIN}"
        )


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
