"""What every executor is: the one interface the local executor (``pool.py``: this process's
threads, or processes on this machine) and the Ray executor (``ray_executor.py``: Ray actors)
both implement, and the layout that says which one runs.

A *job* is what one worker builds in its own process (a browser session and what an episode
needs, for instance) and then calls ``work(item)`` on, from up to ``concurrency`` threads at
once. An :class:`Executor` hands the items to ``workers`` such jobs and yields ``(item, result)``
as each finishes; :func:`mmina.executors.spread.spread` picks it from the :class:`Layout`.
Executors import this module and nothing of each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
EXECUTORS = ("local", "ray")
AGAIN = "run the command again (mmina record: with --resume, which skips the finished tasks)"
"""What to do when a worker died: what finished is committed, the rest is not."""
OnWorkers = Callable[[int, int], None]
"""Told the workers at work and those lost so far, whenever either changes (a progress display)."""
Settled = Callable[[Any], bool]
"""Whether an item's work is done and kept already (a lost worker may have finished it first)."""


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


class Executor(Protocol):
    """Jobs built and worked on away from this process (``--executor``)."""

    def spread(
        self,
        make: Callable[[], Job],
        items: Sequence[T],
        layout: Layout,
        settled: Settled | None = None,
        stop: Callable[[], bool] = never,
        on_workers: OnWorkers | None = None,
    ) -> Iterator[tuple[T, Any]]:
        """Every item worked on by ``layout.workers`` jobs ``make()`` builds, each taking
        ``layout.concurrency`` items at once, yielded as they finish. With ``settled``, the items
        a lost worker had in flight are worked on again by another; once ``stop()`` (asked as
        results come) no item starts and those in flight finish. Workers are counted to
        ``on_workers`` as they start and are lost."""
        ...
