"""Work spread where its layout says: ``--concurrency``, ``--workers``, ``--executor``.

Whatever runs where, each item is worked on once and independently, so results do not depend
on the layout. On an error or Ctrl-C in the consumer no new item starts and the items in flight
finish first (an episode in flight commits, so ``--resume`` has nothing half-done to redo).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from mmina.executors.interface import Executor, Job, Layout, OnWorkers, never
from mmina.executors.pool import LocalExecutor, in_flight

T = TypeVar("T")


def executor(name: str) -> Executor:
    """The executor ``--executor`` names (Ray, an optional extra, is imported only when asked for)."""
    if name == "ray":
        from mmina.executors.ray_executor import RayExecutor

        return RayExecutor()
    return LocalExecutor()


def spread(
    make: Callable[[], Job],
    items: Sequence[T],
    layout: Layout,
    here: Job | None = None,
    settled: Callable[[T], bool] | None = None,
    stop: Callable[[], bool] = never,
    on_workers: OnWorkers | None = None,
) -> Iterator[tuple[T, Any]]:
    """Every item worked on by jobs ``make()`` builds where ``layout`` says (``here``, a job
    already built in this process, is used when the work stays in this process); elsewhere by
    the layout's :class:`~mmina.executors.interface.Executor` (see its ``spread``)."""
    if layout.in_this_process(len(items)):
        job = here or make()
        try:
            yield from in_flight(job.work, items, layout.concurrency, stop)
        finally:
            job.close()
    else:
        yield from executor(layout.executor).spread(make, items, layout, settled, stop, on_workers)
