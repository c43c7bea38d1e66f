"""The browser: finding Chromium, one Chromium per session, one context per episode.

Playwright runs on its async API in an event loop on a thread of its own (:class:`_Loop`),
shared by every episode of the session: each episode's own thread calls the synchronous
methods of :class:`EpisodeBrowser`, which run on that loop (``mmina.recorder.tabs`` and the
modules beside it hold what they do). So many episodes, each in its own context, share one
Chromium and one Playwright driver, and a model call or a slow page of one never blocks the
others.

This module, ``tabs.py``, ``settling.py``, ``observing.py``, ``acting.py``, ``shots.py``,
``streams.py`` and ``har.py`` are the only recorder modules that touch Playwright.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import Browser, BrowserContext, Error as PlaywrightError, Playwright, async_playwright

from mmina.actions import Action
from mmina.errors import BrowserNotFoundError
from mmina.observation import Element, ElementIds, Observation
from mmina.recorder.streams import EventStreams
from mmina.recorder.acting import ActionFailed
from mmina.recorder.observing import Capture
from mmina.recorder.settling import ACTION_DEADLINE_S, OBSERVE_DEADLINE_S, REDIRECT_MARK
from mmina.recorder.tabs import Tabs, connection_closed
from mmina.store.marks import DEFAULT_QUALITY

__all__ = ["ACTION_DEADLINE_S", "OBSERVE_DEADLINE_S", "REDIRECT_MARK", "ActionFailed", "BrowserConfig",
           "BrowserSession", "ContextHook", "EpisodeBrowser", "RestartingSession", "find_chromium"]

T = TypeVar("T")
ContextHook = Callable[[BrowserContext], Awaitable[None]]
"""Run on a new context before its first page opens (on the browser's event loop)."""
BROWSER_ENV = "MMINA_CHROMIUM"
SYSTEM_CHROMIUMS = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
SYSTEM_COMMANDS = ("chromium", "chromium-browser", "google-chrome")
QUIET_ARGS = ["--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"]
DISABLE_FEATURES = "--disable-features="
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding", "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect", "TcpPortRandomizationWin", "OptimizationHints", "NetworkTimeServiceQuerying",
    "AimEnabled", "PreconnectToSearch", "msForceBrowserSignIn", "msEdgeUpdateLaunchServicesPreferredVersion",
)
"""The features Playwright's own ``--disable-features`` switch turns off (Playwright 1.65;
``tests/test_browser_args.py`` compares it with the installed Playwright's). Chromium keeps only
the last ``--disable-features`` on its command line, so every further feature must go into one
switch with these, never beside them."""
UNSHOWN_UI_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
"""Browser UI a headless window never shows, which Chromium loads for every context's window all
the same: the address bar's two popups are web pages of their own, two renderer processes per
context (measured: ~40 MB and ~0.5 s of CPU for every episode, more than its page costs)."""
PAINTERS = 2
"""Threads painting set-of-marks images, shared by the session's episodes. Long-lived on
purpose: a painting thread per episode made a worker's memory grow episode after episode
(each new thread's large image buffers landed in fresh malloc arenas; measured by
``python -m bench --only memory``)."""
OFFLINE_PROXY = {"server": "http://127.0.0.1:9", "bypass": "<-loopback>"}
"""A replay's context sends what its routes do not answer to a proxy nobody listens on (the
discard port), loopback addresses included (``<-loopback>`` removes Chromium's implicit
bypass). Routes answer every request a page makes, but a ``keepalive`` request (a beacon sent
as its page unloads) outlives the page and its routes and would otherwise reach the live site."""


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
    """URL schemes beyond http, https and about:blank that tabs may go to (``mmina.navigation``)."""

    @property
    def capture(self) -> Capture:
        return Capture(self.viewport_width, self.viewport_height, self.screenshots, self.set_of_marks,
                       self.jpeg_quality)


def find_chromium(explicit: str | None, playwright: Any) -> str:
    """An explicit setting, else Playwright's own browser, else the system's Chromium
    (``playwright``: Playwright's sync or async entry object)."""
    explicit = explicit or os.environ.get(BROWSER_ENV)
    if explicit:
        if not Path(explicit).is_file():
            raise BrowserNotFoundError(f"browser executable {explicit} does not exist")
        return explicit
    candidates = [playwright.chromium.executable_path, *SYSTEM_CHROMIUMS]
    candidates += [shutil.which(c) or "" for c in SYSTEM_COMMANDS]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise BrowserNotFoundError(
        "no Chromium found: install it (apt-get install -y chromium, or playwright install chromium) "
        f"or point {BROWSER_ENV} / --browser at the executable"
    )


class _OwnSessionLoop(asyncio.SelectorEventLoop):
    """An event loop whose subprocesses (Playwright's driver, which starts Chromium) run in a
    session of their own: Ctrl-C at a terminal signals the whole foreground process group, and
    a driver that died of it would fail every episode in flight, which ``--resume`` then skips.
    mmina handles Ctrl-C itself (the episodes in flight finish, or are left uncommitted)."""

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.setdefault("start_new_session", True)
        return await super().subprocess_exec(*args, **kwargs)


class _Loop:
    """An asyncio event loop on a daemon thread; :meth:`run` waits for a coroutine run there."""

    def __init__(self) -> None:
        self.loop = _OwnSessionLoop()
        self.loop.set_exception_handler(_report_unless_driver_gone)
        self._thread = threading.Thread(target=self.loop.run_forever, name="mmina-browser", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("the browser's loop cannot wait for itself")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

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


class BrowserSession:
    """One Chromium and one Playwright driver; each episode gets a fresh context. Safe to use
    from many threads at once (one episode per thread)."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._closed = False
        self._painter = ThreadPoolExecutor(max_workers=PAINTERS, thread_name_prefix="marks")
        self._loop = _Loop()
        try:
            self._playwright, self.browser = self._loop.run(_launch(config))
        except BaseException:
            self._loop.stop()
            self._painter.shutdown(wait=False)
            raise

    @property
    def version(self) -> str:
        return f"chromium {self.browser.version}"

    @property
    def connected(self) -> bool:
        """False once the browser process has crashed or been killed, or Playwright's driver has."""
        return not self._closed and self.browser.is_connected() and not connection_closed(self._playwright)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the session's event loop (where its Playwright objects live)."""
        return self._loop.run(coroutine)

    def episode(self, har_path: Path | None, prepare: ContextHook | None = None,
                offline: bool = False, paint_marks: bool = True) -> "EpisodeBrowser":
        """A fresh context for one episode, recording its traffic to ``har_path`` (if given);
        ``prepare`` runs on it before the first page opens (replay uses it to route every
        request to the archive and freeze the clock). An ``offline`` context cannot reach the
        network at all (see ``OFFLINE_PROXY``). Without ``paint_marks`` (an agent not shown the
        set-of-marks image) the image is not painted, whatever the configuration says."""
        capture = replace(self.config.capture, set_of_marks=self.config.set_of_marks and paint_marks)
        return EpisodeBrowser(self, self.run(self._new_tabs(har_path, prepare, offline, capture)))

    async def _new_tabs(self, har_path: Path | None, prepare: ContextHook | None, offline: bool,
                        capture: Capture) -> Tabs:
        har = {"record_har_path": str(har_path), "record_har_content": "attach"} if har_path else {}
        context = await self.browser.new_context(
            proxy=OFFLINE_PROXY if offline else None,  # type: ignore[arg-type]
            viewport={"width": self.config.viewport_width, "height": self.config.viewport_height},
            locale="en-US", timezone_id="UTC", service_workers="block", **har)
        try:
            if prepare is not None:
                await prepare(context)
            return await Tabs.start(context, capture, self._painter, self.config.allowed_schemes)
        except BaseException:
            await context.close()
            raise

    def close(self) -> None:
        """Stop the browser and Playwright; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(_shut_down(self._playwright, self.browser))
        finally:
            self._loop.stop()
            self._painter.shutdown(wait=False)


class RestartingSession:
    """A session started again when its browser or driver died: the episodes in flight then end
    with an error, the next ones get a fresh browser. Safe to share between threads."""

    def __init__(self, config: BrowserConfig, session: BrowserSession | None = None) -> None:
        self.config = config
        self.session = session or BrowserSession(config)
        self._lock = threading.Lock()

    def alive(self) -> BrowserSession:
        with self._lock:
            if not self.session.connected:
                self.session.close()
                self.session = BrowserSession(self.config)
            return self.session

    def close(self) -> None:
        self.session.close()


async def _launch(config: BrowserConfig) -> tuple[Playwright, Browser]:
    playwright = await async_playwright().start()
    try:
        executable = find_chromium(config.executable, playwright)
        ignored = [DISABLE_FEATURES + ",".join(PLAYWRIGHT_DISABLED_FEATURES)]
        browser = await playwright.chromium.launch(
            executable_path=executable, args=launch_args(config.extra_args),
            ignore_default_args=[*ignored, "--disable-back-forward-cache"] if config.back_forward_cache else ignored,
        )
    except PlaywrightError as exc:
        await playwright.stop()
        raise BrowserNotFoundError(f"cannot start Chromium: {str(exc).splitlines()[0]}") from None
    except BaseException:
        await playwright.stop()
        raise
    return playwright, browser


def launch_args(extra_args: tuple[str, ...]) -> list[str]:
    """Chromium's arguments beyond Playwright's: quiet ones, the user's, and one
    ``--disable-features`` switch that takes Playwright's features, ``UNSHOWN_UI_FEATURES`` and
    the user's own ``--disable-features`` together (in place of Playwright's, see ``_launch``)."""
    features = [*PLAYWRIGHT_DISABLED_FEATURES, *UNSHOWN_UI_FEATURES]
    others = []
    for arg in extra_args:
        if arg.startswith(DISABLE_FEATURES):
            features += [f for f in arg[len(DISABLE_FEATURES):].split(",") if f]
        else:
            others.append(arg)
    return [*QUIET_ARGS, *others, DISABLE_FEATURES + ",".join(dict.fromkeys(features))]


async def _shut_down(playwright: Playwright, browser: Browser) -> None:
    try:
        if browser.is_connected():
            await browser.close()
    except PlaywrightError:
        pass  # the browser or Playwright's driver died: nothing left to close
    finally:
        try:
            await playwright.stop()
        except PlaywrightError:
            pass


class EpisodeBrowser:
    """The tabs of one episode, for the episode's own thread (see the module)."""

    def __init__(self, session: BrowserSession, tabs: Tabs) -> None:
        self.session, self.tabs = session, tabs

    @property
    def context(self) -> BrowserContext:
        return self.tabs.context

    @property
    def streams(self) -> EventStreams:
        return self.tabs.streams

    @property
    def secrets(self) -> list[str]:
        return self.tabs.secrets

    @property
    def ids(self) -> ElementIds:
        return self.tabs.ids

    @property
    def observe_error(self) -> str | None:
        return self.tabs.observe_error

    @property
    def url(self) -> str:
        return self.tabs.page.url

    def open(self, urls: tuple[str, ...]) -> None:
        self.session.run(self.tabs.open(urls))

    def settle(self, deadline: float | None = None) -> None:
        self.session.run(self.tabs.settle(deadline))

    def observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        return self.session.run(self.tabs.observe(step_index, intent))

    def tree(self) -> tuple[str, list[Element]]:
        return self.session.run(self.tabs.tree())

    def execute(self, action: Action) -> None:
        self.session.run(self.tabs.execute(action))

    def close(self) -> None:
        """Close the context (this also writes the HAR file)."""
        self.session.run(self.tabs.close())
