"""``--executor ray``: workers as Ray actors, on this machine or a cluster.

An actor holds one job built in its own process (see ``mmina.pool``; for recording a
:class:`~mmina.recorder.workers.Worker`: its own Chromium, ``concurrency`` episodes in flight
on threads, so a threaded actor with that ``max_concurrency``). Items are handed out as actors
have room and results come back as they finish, so progress, ``--resume`` and Ctrl-C behave as
with local processes: on an error or Ctrl-C nothing new starts and what is in flight finishes
(and commits) first.

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from mmina.errors import MminaError
from mmina.pool import AGAIN, Layout

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError:  # pragma: no cover - depends on the installation
    ray = None  # type: ignore[assignment]  # the extra is optional: checked where Ray is asked for

T = TypeVar("T")
_END: Any = object()
FORWARDED = ("OPENAI_", "AWS_", "MMINA_", "FSSPEC_", "GOOGLE_", "AZURE_")
"""Prefixes of the environment variables an actor gets from the command's environment."""


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
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "logging_level": logging.ERROR, "configure_logging": True}
    if address:
        options["address"] = address
    else:
        options["num_cpus"] = max(os.cpu_count() or 1, workers)
    try:
        ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise MminaError(f"cannot start or join the Ray cluster{f' at {address}' if address else ''}: "
                         f"{str(exc).splitlines()[0]}") from None


def spread(make: Callable[[], Any], items: Sequence[T], layout: Layout) -> Iterator[tuple[T, Any]]:
    """Every item worked on by ``layout.workers`` actors, each holding ``make()`` and taking
    ``layout.concurrency`` items at once, yielded as they finish (see ``mmina.pool``)."""
    connect(layout.ray_address, layout.workers)
    actor_class = ray.remote(num_cpus=1)(_Actor)
    count = max(1, min(layout.workers, len(items)))
    options = {"max_concurrency": layout.concurrency, "runtime_env": {"env_vars": forwarded_env()}}
    actors = [actor_class.options(**options).remote(make) for _ in range(count)]
    try:
        yield from _dispatch(actors, items, layout.concurrency)
    finally:
        _stop(actors)


def forwarded_env() -> dict[str, str]:
    """The variables of this environment that an actor needs (keys, endpoints, credentials)."""
    return {name: value for name, value in os.environ.items() if name.startswith(FORWARDED)}


def _dispatch(actors: Sequence[Any], items: Iterable[T], per_actor: int) -> Iterator[tuple[T, Any]]:
    """Each item to an actor with room (at most ``per_actor`` in flight each), results as they
    finish; on an error or when the consumer stops, nothing new starts and what runs finishes."""
    load = [0] * len(actors)
    running: dict[Any, tuple[T, int]] = {}
    todo = iter(items)
    try:
        while True:
            _fill(actors, todo, running, load, per_actor)
            if not running:
                return
            [ready], _ = ray.wait(list(running), num_returns=1)
            item, actor = running.pop(ready)
            load[actor] -= 1
            yield item, _result(ready)
    finally:
        if running:
            ray.wait(list(running), num_returns=len(running))


def _fill(actors: Sequence[Any], todo: Iterator[T], running: dict[Any, tuple[T, int]], load: list[int],
          per_actor: int) -> None:
    for index, actor in enumerate(actors):
        while load[index] < per_actor:
            item = next(todo, _END)
            if item is _END:
                return
            running[actor.work.remote(item)] = (item, index)
            load[index] += 1


def _result(ref: Any) -> Any:
    """A finished call's value; its exception raised as itself (not wrapped by Ray)."""
    try:
        return ray.get(ref)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        raise (cause if isinstance(cause, BaseException) else MminaError(str(exc).splitlines()[0])) from None
    except RayActorError as exc:
        raise MminaError(f"a Ray worker died ({str(exc).splitlines()[0]}): {AGAIN}") from None


def _stop(actors: Sequence[Any]) -> None:
    """Let each actor close its job (its browser), then end it."""
    try:
        ray.get([actor.close.remote() for actor in actors], timeout=60)
    except Exception:  # noqa: BLE001 - an actor that died or hangs is killed below all the same
        pass
    for actor in actors:
        ray.kill(actor)


class _Actor:
    """A job built in the actor's process (see ``mmina.pool``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.job = make()

    def work(self, item: Any) -> Any:
        return self.job.work(item)

    def close(self) -> None:
        self.job.close()
