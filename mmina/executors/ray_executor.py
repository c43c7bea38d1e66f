"""``--executor ray``: workers as Ray actors, on this machine or a cluster.

An actor holds one job built in its own process (see ``mmina.executors.interface``; for recording a
:class:`~mmina.recorder.workers.Worker`: its own Chromium, ``concurrency`` episodes in flight
on threads, so a threaded actor with that ``max_concurrency``). Items are handed out as actors
have room and results come back as they finish, so progress, ``--resume`` and Ctrl-C behave as
with local processes: on an error or Ctrl-C nothing new starts and what is in flight finishes
(and commits) first.

**A lost actor** (its process killed, its node gone) costs only the items it had in flight:
given a ``settled`` check (recording: is the task's episode committed?), each of them that did
not settle is handed to a live actor again, and a new actor takes the dead one's place (Ray
puts it wherever the cluster has room; one that cannot start within ``REPLACE_S`` is given
up), so every item is worked on exactly once and the run goes on. Without the check, or with
no actor left, the run ends as before, saying to resume.

Ray's own logs stay in its session folder (``/tmp/ray/session_latest/logs``), not in mmina's
output: the driver does not forward workers' logs, and Ray's loggers are set to errors only.

Without an address ``ray.init()`` starts a local cluster; ``--ray-address`` (or
``RAY_ADDRESS``) joins a running one, whose nodes need mmina installed and the store reachable
(a shared folder or an object store). The environment variables mmina and its clients read
(``OPENAI_*``, ``AWS_*``, ``MMINA_*``...) go with each actor, so a model key or object-store
credentials set where the command runs reach the workers. Ray is an optional extra:
``pip install 'mmina[ray]'``.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mmina.errors import MminaError, MminaWarning
from mmina.executors.interface import AGAIN, Job, Layout, OnWorkers, Settled, never

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError:  # pragma: no cover - depends on the installation
    ray = None  # type: ignore[assignment]  # the extra is optional: checked where Ray is asked for

T = TypeVar("T")
FORWARDED = ("OPENAI_", "AWS_", "MMINA_", "FSSPEC_", "GOOGLE_", "AZURE_")
"""Prefixes of the environment variables an actor gets from the command's environment."""
REPLACE_S = 120.0
"""How long the run waits for a lost actor's replacement when no other actor is at work."""


class WorkerLost(MminaError):
    """A Ray actor died (its process or its node) with items in flight."""


def require_ray() -> Any:
    if ray is None:
        raise MminaError("--executor ray needs Ray: pip install 'mmina[ray]'")
    return ray


def connect(address: str | None, workers: int) -> None:
    """Join the cluster at ``address``, or start one on this machine with room for ``workers``
    actors (one CPU each)."""
    require_ray()
    if ray.is_initialized():
        return
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
        "configure_logging": True,
    }
    if address:
        options["address"] = address
    else:
        options["num_cpus"] = max(os.cpu_count() or 1, workers)
    try:
        ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise MminaError(
            f"cannot start or join the Ray cluster{f' at {address}' if address else ''}: "
            f"{str(exc).splitlines()[0]}"
        ) from None


class RayExecutor:
    """``--executor ray``: each worker a Ray actor (see the module)."""

    def spread(
        self,
        make: Callable[[], Job],
        items: Sequence[T],
        layout: Layout,
        settled: Settled | None = None,
        stop: Callable[[], bool] = never,
        on_workers: OnWorkers | None = None,
    ) -> Iterator[tuple[T, Any]]:
        """Every item worked on by ``layout.workers`` actors, each holding ``make()`` and taking
        ``layout.concurrency`` items at once, yielded as they finish; with ``settled``, a lost
        actor's items are worked on again elsewhere (see the module)."""
        connect(layout.ray_address, layout.workers)
        actor_class = ray.remote(num_cpus=1)(_Actor)
        options = {"max_concurrency": layout.concurrency, "runtime_env": {"env_vars": forwarded_env()}}
        crew = _Crew(lambda: actor_class.options(**options).remote(make), layout.concurrency, on_workers)
        crew.hire(max(1, min(layout.workers, len(items))))
        try:
            yield from _dispatch(crew, items, settled, stop)
        finally:
            _stop(crew)


def forwarded_env() -> dict[str, str]:
    """The variables of this environment that an actor needs (keys, endpoints, credentials)."""
    return {name: value for name, value in os.environ.items() if name.startswith(FORWARDED)}


@dataclass
class _Crew:
    """The actors at work, how many items each holds, and the ones hired but not ready yet."""

    new_actor: Callable[[], Any]
    per_actor: int
    on_workers: OnWorkers | None = None
    live: dict[int, Any] = field(default_factory=dict)
    load: dict[int, int] = field(default_factory=dict)
    hiring: dict[Any, int] = field(default_factory=dict)
    """A new actor's readiness call -> its index (it gets work once ready)."""
    everyone: list[Any] = field(default_factory=list)
    lost: int = 0

    def hire(self, count: int, ready: bool = True) -> None:
        """``count`` new actors: at work at once (the first ones; Ray queues their calls until
        they start), or once ready (a lost one's replacement, which may find no room)."""
        for _ in range(count):
            actor = self.new_actor()
            self.everyone.append(actor)
            index = len(self.everyone) - 1
            if ready:
                self.live[index], self.load[index] = actor, 0
            else:
                self.hiring[actor.ready.remote()] = index
        self.counted()

    def counted(self) -> None:
        """Tell ``on_workers`` the actors at work and lost."""
        if self.on_workers is not None:
            self.on_workers(len(self.live), self.lost)

    def started(self, ref: Any) -> None:
        index = self.hiring.pop(ref)
        try:
            ray.get(ref)
        except Exception:  # noqa: BLE001 - it died starting: nothing to give it
            return
        self.live[index], self.load[index] = self.everyone[index], 0
        self.counted()

    def fire(self, index: int) -> bool:
        """Forget a dead actor (killed for good, should it come back); whether it was still at work."""
        actor = self.live.pop(index, None)
        if actor is None:
            return False
        self.lost += 1
        self.counted()
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
        return True


def _dispatch(
    crew: _Crew, items: Iterable[T], settled: Settled | None, stop: Callable[[], bool]
) -> Iterator[tuple[T, Any]]:
    """Each item to an actor with room, results as they finish; a lost actor's items go to the
    others (see the module). On an error or when the consumer stops, nothing new starts and
    what runs finishes."""
    running: dict[Any, tuple[T, int]] = {}
    todo: deque[T] = deque(items)
    try:
        while True:
            if not stop():
                _fill(crew, todo, running)
            if not running and (not todo or stop()):
                return
            if not running and not crew.hiring:
                raise WorkerLost(f"every Ray worker was lost with {len(todo)} item(s) left: {AGAIN}")
            ready, _ = ray.wait(
                [*running, *crew.hiring], num_returns=1, timeout=None if running else REPLACE_S
            )
            if not ready:
                raise WorkerLost(
                    f"every Ray worker was lost and none could start again within {REPLACE_S:g} s: {AGAIN}"
                )
            if ready[0] in crew.hiring:
                crew.started(ready[0])
                continue
            item, actor = running.pop(ready[0])
            crew.load[actor] = crew.load.get(actor, 1) - 1
            try:
                result = _result(ready[0])
            except WorkerLost:
                if settled is None:
                    raise
                _lost(crew, actor, item, todo, settled)
                continue
            yield item, result
    finally:
        if running:
            ray.wait(list(running), num_returns=len(running))


def _lost(crew: _Crew, actor: int, item: T, todo: deque[T], settled: Settled) -> None:
    """An item whose actor died: worked on again unless it settled first; the actor replaced."""
    if crew.fire(actor):
        warnings.warn(
            MminaWarning(
                f"a Ray worker was lost ({crew.lost} so far); what it had in flight is worked "
                f"on again elsewhere (Ray's logs: /tmp/ray/session_latest/logs)"
            ),
            stacklevel=1,
        )
        crew.hire(1, ready=False)
    if not settled(item):
        todo.appendleft(item)


def _fill(crew: _Crew, todo: deque[T], running: dict[Any, tuple[T, int]]) -> None:
    for index, actor in list(crew.live.items()):
        while crew.load[index] < crew.per_actor:
            if not todo:
                return
            item = todo.popleft()
            running[actor.work.remote(item)] = (item, index)
            crew.load[index] += 1


def _result(ref: Any) -> Any:
    """A finished call's value; its exception raised as itself (not wrapped by Ray)."""
    try:
        return ray.get(ref)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        raise (cause if isinstance(cause, BaseException) else MminaError(str(exc).splitlines()[0])) from None
    except RayActorError as exc:
        raise WorkerLost(f"a Ray worker died ({str(exc).splitlines()[0]}): {AGAIN}") from None


def _stop(crew: _Crew) -> None:
    """Let each actor at work close its job (its browser), then end every actor hired."""
    closing = [actor.close.remote() for actor in crew.live.values()]
    if closing:
        ray.wait(
            closing, num_returns=len(closing), timeout=60
        )  # one that died or hangs is killed below all the same
    for actor in crew.everyone:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - gone with its node
            pass


class _Actor:
    """A job built in the actor's process (see ``mmina.executors.interface``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.job = make()

    def work(self, item: Any) -> Any:
        return self.job.work(item)

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.job.close()
