"""What a bench run talks to, each in a process of its own so its CPU is counted apart: the
model (the tests' OpenAI-compatible server answering with the oracle's action after a delay)
and the fixture web. A real epoch has neither on mmina's machine: its model runs elsewhere and
its websites are on the internet.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

START_S = 60.0


@dataclass(frozen=True)
class Served:
    """A server running in a process of its own: its pid and what the caller needs of it."""

    pid: int
    value: Any


@contextmanager
def in_own_process(serve: Callable[..., None], *args: Any) -> Iterator[Served]:
    """Run ``serve(*args, ready, stop)`` in a spawned process until the block ends; ``serve``
    sends what the caller needs (a URL, a port) through ``ready`` once it serves."""
    context = multiprocessing.get_context("spawn")
    ready_receive, ready_send = context.Pipe(duplex=False)
    stop = context.Event()
    process = context.Process(target=serve, args=(*args, ready_send, stop), daemon=True)
    process.start()
    try:
        _wait_ready(ready_receive, process, serve.__name__)
        yield Served(process.pid or 0, ready_receive.recv())
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


def _wait_ready(ready: Any, process: Any, name: str) -> None:
    """Until the server said it serves; an error if it died or took longer than ``START_S``."""
    deadline = time.monotonic() + START_S
    while not ready.poll(0.2):
        if not process.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start (exit code {process.exitcode})")


def serve_model(delay_s: float, task_ids: list[str], ready: Any, stop: Any) -> None:
    """The bench's model: the oracle's next action for the task whose objective the prompt
    shows, after ``delay_s`` (see ``bench.epoch.oracle_policy``)."""
    from bench.epoch import oracle_policy
    from mmina.tasks.taskcheck import load_suite
    from tests.fake_openai import FakeOpenAI

    tasks = [t for t in load_suite().tasks if t.task_id in set(task_ids)]
    with FakeOpenAI(delay_s=delay_s, policy=oracle_policy(tasks), keep_requests=False) as server:
        ready.send(server.url)
        stop.wait()


def serve_fixture_web(ready: Any, stop: Any) -> None:
    """The fixture web; sends the browser arguments that reach it."""
    from mmina.fixtures.web import FixtureWeb

    with FixtureWeb() as web:
        ready.send(web.chromium_args())
        stop.wait()
