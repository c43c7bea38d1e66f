"""The browser's event loop: Playwright's async API on a thread of its own.

Every Playwright object of a session lives on one asyncio loop running on a daemon thread
(:class:`BrowserLoop`); the episodes' threads hand it coroutines and wait for their results,
each wait bounded on the caller's side (:meth:`BrowserLoop.run`). Playwright's driver, which
starts Chromium, runs in a session of its own so that Ctrl-C at a terminal does not kill it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from mmina.errors import MminaError
from mmina.recorder.settling import CALL_DEADLINE_S, PROBE_DEADLINE_S, DeadlinePassed

T = TypeVar("T")


class SessionStopped(MminaError):
    """The browser session was stopped (closed, or replaced after it stopped answering) while a
    call of an episode still ran on its loop: that episode ends with this error, the run goes on."""

    infrastructure = True


class _OwnSessionLoop(asyncio.SelectorEventLoop):
    """An event loop whose subprocesses (Playwright's driver, which starts Chromium) run in a
    session of their own: Ctrl-C at a terminal signals the whole foreground process group, and
    a driver that died of it would fail every episode in flight, which ``--resume`` then skips.
    mmina handles Ctrl-C itself (the episodes in flight finish, or are left uncommitted)."""

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("start_new_session", True)
        return await super().subprocess_exec(*args, **kwargs)


class BrowserLoop:
    """An asyncio event loop on a daemon thread; :meth:`run` waits for a coroutine run there,
    never past its deadline."""

    def __init__(self) -> None:
        self.loop = _OwnSessionLoop()
        self.loop.set_exception_handler(_report_unless_driver_gone)
        self.wedged = False
        """True once the loop itself stopped answering (a blocking call on its thread)."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="mmina-browser", daemon=True)
        self._thread.start()

    def run(
        self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None, doing: str = "a browser call"
    ) -> T:
        """The coroutine's result, waited for until ``deadline`` (``time.monotonic()``; default
        ``CALL_DEADLINE_S`` from now). Past it the coroutine is cancelled and
        :class:`DeadlinePassed` says what was ``doing`` and where it waited."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("the browser's loop cannot wait for itself")
        started = time.monotonic()
        deadline = deadline if deadline is not None else started + CALL_DEADLINE_S
        task_box: list[asyncio.Task[Any]] = []
        tracked = _tracked(coroutine, task_box)
        try:
            future = asyncio.run_coroutine_threadsafe(tracked, self.loop)
        except RuntimeError:  # the loop is closed: its session was stopped
            tracked.close()
            coroutine.close()
            raise SessionStopped(f"{doing} could not start: the browser session was stopped") from None
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            pass
        except FutureCancelled:
            raise SessionStopped(f"{doing} was cut short: the browser session was stopped") from None
        where = self._where(task_box)
        if not future.cancel() and not future.cancelled():
            return future.result()  # it finished just now, after all
        raise DeadlinePassed(f"{doing} passed its deadline ({time.monotonic() - started:.0f} s) {where}")

    def _where(self, task_box: list[asyncio.Task[Any]]) -> str:
        """Where the stuck coroutine waits, read on the loop's thread (if the loop answers)."""
        if not task_box:
            self.wedged = True
            return "before it started: the browser's event loop does not answer"
        try:
            return asyncio.run_coroutine_threadsafe(_describe(task_box[0]), self.loop).result(
                timeout=PROBE_DEADLINE_S
            )
        except FutureTimeout:
            self.wedged = True
            return "and the browser's event loop does not answer"

    def stop(self) -> None:
        """Cancel what still runs on the loop (e.g. route handlers of a dead driver), then stop it."""
        try:
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - stopping goes on whatever the tasks did
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


async def _tracked(coroutine: Coroutine[Any, Any, T], task_box: list[asyncio.Task[Any]]) -> T:
    """Run ``coroutine``, leaving its task where the caller can ask where it waits."""
    task = asyncio.current_task()
    if task is not None:
        task_box.append(task)
    return await coroutine


async def _describe(task: asyncio.Task[Any]) -> str:
    """Where a task waits: the innermost Playwright call and the innermost mmina function of its
    chain of awaits (``Task.get_stack`` shows only the outermost frame of a suspended task)."""
    playwright_call = mmina_function = ""
    awaited: Any = task.get_coro()
    while awaited is not None and hasattr(awaited, "cr_code"):
        module = awaited.cr_frame.f_globals.get("__name__", "") if awaited.cr_frame else ""
        name = f"{module}.{awaited.cr_code.co_qualname}"
        if module.startswith("playwright.async_api"):
            playwright_call = awaited.cr_code.co_qualname
        elif module.startswith("mmina."):
            mmina_function = name
        awaited = awaited.cr_await
    if not (playwright_call or mmina_function):
        return "(it had finished or not started)"
    parts = [
        f"waiting for {playwright_call}" if playwright_call else "waiting",
        f"in {mmina_function}" if mmina_function else "",
    ]
    return " ".join(p for p in parts if p)


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _report_unless_driver_gone(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's report of an error nobody awaited, except the driver's connection closing
    (every episode in flight already ends with that error)."""
    if "connection closed" not in str(context.get("exception", "")).lower():
        loop.default_exception_handler(context)
