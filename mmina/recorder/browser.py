"""The browser: one Chromium per session, one context per episode.

Playwright runs on its async API in an event loop on a thread of its own
(``mmina.recorder.browser_loop``), shared by every episode of the session: each episode's own
thread calls the synchronous methods of its :class:`EpisodeBrowser`
(``mmina.recorder.episode_browser``), which run on that loop (``mmina.recorder.tabs`` and the
modules beside it hold what they do). So many episodes, each in its own context, share one
Chromium and one Playwright driver, and a model call or a slow page of one never blocks the
others. Which Chromium, and with which arguments, is ``mmina.recorder.chromium``'s.

This module, ``browser_loop.py``, ``chromium.py``, ``episode_browser.py``, ``tabs.py``,
``settling.py``, ``observing.py``, ``acting.py``, ``shots.py``, ``freezing.py``, ``streams.py``,
``web_workers.py``, ``shared_workers.py`` and ``har.py`` are the only recorder modules that touch
Playwright.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import Browser, BrowserContext, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from mmina.errors import BrowserNotFoundError, first_line
from mmina.recorder.acting import ActionFailed
from mmina.recorder.browser_loop import BrowserLoop
from mmina.recorder.chromium import (
    DISABLE_FEATURES,
    LOCAL_NETWORK_FEATURES,
    MMINA_DISABLED_FEATURES,
    PLAYWRIGHT_DISABLED_FEATURES,
    QUIET_ARGS,
    UNSHOWN_UI_FEATURES,
    find_chromium,
    is_headless_shell,
    launch_args,
    launch_chromium,
    launch_failure,
    shut_down,
)
from mmina.recorder.episode_browser import ContextAbandoned, EpisodeBrowser
from mmina.recorder.freezing import FREEZE_AFTER_S
from mmina.recorder.seeding import Seeding, seed_random
from mmina.recorder.settling import (
    ACTION_DEADLINE_S,
    CLOSE_DEADLINE_S,
    GRACE_S,
    LAUNCH_DEADLINE_S,
    LIVENESS_S,
    OBSERVE_DEADLINE_S,
    PROBE_DEADLINE_S,
    REDIRECT_MARK,
    DeadlinePassed,
)
from mmina.recorder.tabs import BrowserGone, Capture, Tabs, connection_closed
from mmina.store.marks import DEFAULT_QUALITY

__all__ = [
    "ACTION_DEADLINE_S",
    "DISABLE_FEATURES",
    "LOCAL_NETWORK_FEATURES",
    "MMINA_DISABLED_FEATURES",
    "OBSERVE_DEADLINE_S",
    "PLAYWRIGHT_DISABLED_FEATURES",
    "QUIET_ARGS",
    "REDIRECT_MARK",
    "UNSHOWN_UI_FEATURES",
    "ActionFailed",
    "BrowserConfig",
    "BrowserGone",
    "BrowserSession",
    "ContextAbandoned",
    "ContextHook",
    "DeadlinePassed",
    "EpisodeBrowser",
    "RestartingSession",
    "find_chromium",
    "launch_args",
]

T = TypeVar("T")
ContextHook = Callable[[BrowserContext], Awaitable[None]]
"""Run on a new context before its first page opens (on the browser's event loop)."""

PAINTERS = 2
"""Threads painting set-of-marks images, shared by the session's episodes. Long-lived on
purpose: a painting thread per episode made a worker's memory grow episode after episode
(each new thread's large image buffers landed in fresh malloc arenas; measured by
``python -m bench --only memory``)."""
DISCARD_PROXY = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Offline:
    """A context that cannot reach the network: what its routes do not answer goes to a proxy
    nobody listens on (the discard port), loopback addresses included (``<-loopback>`` removes
    Chromium's implicit bypass), except the ``reachable`` ones (``host:port``), where its router
    sends requests itself (a replay's body server, ``mmina.replayer.body_server``). Routes answer
    every request a page makes, but a ``keepalive`` request (a beacon sent as its page unloads)
    outlives the page and its routes and would otherwise reach the live site. Such a context
    takes any TLS certificate: the only TLS it can reach is the body server's, whose certificate
    the replay made itself (``mmina.replayer.loopback_tls``)."""

    reachable: tuple[str, ...] = ()

    def proxy(self) -> dict[str, str]:
        """Playwright's ``proxy`` setting for such a context."""
        return {"server": DISCARD_PROXY, "bypass": ",".join(["<-loopback>", *self.reachable])}


@dataclass(frozen=True)
class BrowserConfig:
    executable: str | None = None
    viewport_width: int = 1280
    viewport_height: int = 2048
    screenshots: bool = True
    set_of_marks: bool = True
    jpeg_quality: int = DEFAULT_QUALITY
    extra_args: tuple[str, ...] = ()
    back_forward_cache: bool = False
    """Playwright launches Chromium with ``--disable-back-forward-cache``; True keeps the cache on
    (history navigations then restore pages without loading them)."""
    allowed_schemes: tuple[str, ...] = ()
    """URL schemes beyond http, https and about:blank that tabs may go to (``mmina.actions.navigation``)."""
    freeze_after_s: float | None = FREEZE_AFTER_S
    """Freeze an episode's tabs once its agent has thought this long, until it acts (None: never;
    see ``mmina.recorder.freezing``)."""

    @property
    def capture(self) -> Capture:
        return Capture(
            self.viewport_width, self.viewport_height, self.screenshots, self.set_of_marks, self.jpeg_quality
        )


class BrowserSession:
    """One Chromium and one Playwright driver; each episode gets a fresh context. Safe to use
    from many threads at once (one episode per thread)."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._closed = False
        self._unresponsive = False
        self._painter = ThreadPoolExecutor(max_workers=PAINTERS, thread_name_prefix="marks")
        self._loop = BrowserLoop()
        try:
            self._playwright, self.browser, self._driver, self.executable = self._loop.run(
                _launch(config), time.monotonic() + LAUNCH_DEADLINE_S, "starting the browser"
            )
        except BaseException:
            self._loop.stop()
            self._painter.shutdown(wait=False)
            raise

    @property
    def version(self) -> str:
        """What ``runs.browser_version`` says: Chromium's version, and whether it is the headless shell."""
        shell = " (headless shell)" if is_headless_shell(self.executable) else ""
        return f"chromium {self.browser.version}{shell}"

    @property
    def connected(self) -> bool:
        """False once the browser process has crashed or been killed, or Playwright's driver has,
        or the driver (or the session's event loop) stopped answering."""
        return (
            not self._closed
            and not self._unresponsive
            and not self._loop.wedged
            and self.browser.is_connected()
            and not connection_closed(self._playwright)
        )

    def run(
        self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None, doing: str = "a browser call"
    ) -> T:
        """Run a coroutine on the session's event loop (where its Playwright objects live), never
        past ``deadline`` (see :meth:`BrowserLoop.run`)."""
        return self._loop.run(coroutine, deadline, doing)

    def answers(self, within: float = PROBE_DEADLINE_S) -> bool:
        """Whether the driver and the browser answer a cheap question (a DevTools session
        opened and closed) within ``within`` seconds; a session that does not is no longer
        ``connected``."""
        try:
            self.run(_probe(self.browser), time.monotonic() + within, "asking the browser a question")
            return True
        except PlaywrightError:
            return not connection_closed(self._playwright)
        except DeadlinePassed:
            self._unresponsive = True
            return False

    def episode(
        self,
        har_path: Path | None,
        prepare: ContextHook | None = None,
        offline: Offline | None = None,
        paint_marks: bool = True,
        seed: Seeding | None = None,
        options: Mapping[str, Any] | None = None,
        page_time: Callable[[], float] = time.monotonic,
    ) -> EpisodeBrowser:
        """A fresh context for one episode, recording its traffic to ``har_path`` (if given);
        ``prepare`` runs on it before the first page opens (replay uses it to route every
        request to the archive and set its clock). An ``offline`` context cannot reach the
        network at all (see :class:`Offline`). Without ``paint_marks`` (an agent not shown the
        set-of-marks image) the image is not painted, whatever the configuration says. A ``seed``
        seeds ``Math.random`` and ``crypto`` in every document (``seeding.py``). ``options`` are further
        arguments of Playwright's ``new_context`` (a task's storage state and position). ``page_time``
        is the pages' time in seconds (a replay's runs on its recording's timeline), which settling
        reads to tell a long-lived request from an answer held back."""
        capture = replace(self.config.capture, set_of_marks=self.config.set_of_marks and paint_marks)
        tabs = self.run(
            self._new_tabs(har_path, prepare, offline, capture, seed, options or {}, page_time),
            time.monotonic() + ACTION_DEADLINE_S + GRACE_S,
            "opening a browser context",
        )
        return EpisodeBrowser(self, tabs)

    async def _new_tabs(
        self,
        har_path: Path | None,
        prepare: ContextHook | None,
        offline: Offline | None,
        capture: Capture,
        seed: Seeding | None,
        options: Mapping[str, Any],
        page_time: Callable[[], float],
    ) -> Tabs:
        context = await self.browser.new_context(
            proxy=offline.proxy() if offline else None,  # type: ignore[arg-type]
            ignore_https_errors=offline is not None,
            viewport={"width": self.config.viewport_width, "height": self.config.viewport_height},
            locale="en-US",
            timezone_id="UTC",
            service_workers="block",
            record_har_path=str(har_path) if har_path else None,
            record_har_content="attach" if har_path else None,
            **options,
        )
        try:
            if seed is not None:
                await seed_random(context, seed)
            if prepare is not None:
                await prepare(context)
            return await Tabs.start(context, capture, self._painter, self.config.allowed_schemes, page_time)
        except BaseException:
            await _close_within(context)
            raise

    def close(self) -> None:
        """Stop the browser and Playwright; safe to call more than once. A driver that does not
        let itself be stopped by ``CLOSE_DEADLINE_S`` is killed (with its browser)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._unresponsive or self._loop.wedged:
                self._kill_driver()  # known not to answer: asking it to stop would wait in vain
            else:
                self._loop.run(
                    shut_down(self._playwright, self.browser),
                    time.monotonic() + CLOSE_DEADLINE_S,
                    "stopping the browser",
                )
        except DeadlinePassed:
            self._kill_driver()
        finally:
            self._loop.stop()
            self._painter.shutdown(wait=False)

    def _kill_driver(self) -> None:
        """End Playwright's driver process, which this session started (Chromium, reading its
        commands from the driver's pipe, exits when the pipe closes), and reap it on the loop
        (a process left to the garbage collector after its loop closed breaks the interpreter's
        shutdown)."""
        if self._driver is None:
            return
        try:
            self._driver.kill()
        except OSError:
            return  # already gone
        if not self._loop.wedged:
            try:
                self._loop.run(self._driver.wait(), time.monotonic() + PROBE_DEADLINE_S, "reaping the driver")
            except DeadlinePassed:
                pass


async def _close_within(context: BrowserContext) -> None:
    """Close a context that failed to start, within ``CLOSE_DEADLINE_S`` (the first error counts)."""
    try:
        await asyncio.wait_for(context.close(), CLOSE_DEADLINE_S)
    except (TimeoutError, PlaywrightError):
        pass


async def _probe(browser: Browser) -> None:
    session = await browser.new_browser_cdp_session()
    await session.detach()


class RestartingSession:
    """A session started again when its browser or driver died: the episodes in flight then end
    with an error, the next ones get a fresh browser. Safe to share between threads."""

    def __init__(self, config: BrowserConfig, session: BrowserSession | None = None) -> None:
        self.config = config
        self.session = session or BrowserSession(config)
        self._lock = threading.Lock()

    def alive(self) -> BrowserSession:
        """The session, or a new one if it died or stopped answering within ``LIVENESS_S`` (asked
        each time: a driver stuck between two episodes would otherwise hold the next one's start;
        a slow answer on a loaded machine is not a dead browser)."""
        with self._lock:
            if not self.session.connected or not self.session.answers(LIVENESS_S):
                self.session.close()
                self.session = BrowserSession(self.config)
            return self.session

    def close(self) -> None:
        self.session.close()


async def _launch(
    config: BrowserConfig,
) -> tuple[Playwright, Browser, asyncio.subprocess.Process | None, str]:
    """Playwright's driver and Chromium, the driver's process (to kill it if it stops
    answering: Playwright keeps it in a private attribute, read with care) and the executable."""
    manager = async_playwright()
    playwright = await manager.start()
    process = getattr(getattr(getattr(manager, "_client", None), "_transport", None), "_proc", None)
    executable = ""
    try:
        executable = find_chromium(config.executable, playwright)
        browser = await launch_chromium(playwright, executable, config.extra_args, config.back_forward_cache)
    except PlaywrightError as exc:
        await playwright.stop()
        raise BrowserNotFoundError(launch_failure(executable, first_line(exc))) from None
    except BaseException:
        await playwright.stop()
        raise
    return (
        playwright,
        browser,
        process if isinstance(process, asyncio.subprocess.Process) else None,
        executable,
    )
