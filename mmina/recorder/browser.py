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
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import Browser, BrowserContext, Error as PlaywrightError, Playwright, async_playwright

from mmina.actions import Action
from mmina.errors import BrowserNotFoundError, MminaError
from mmina.observation import Element, ElementIds, Observation
from mmina.recorder.streams import EventStreams
from mmina.recorder.acting import ActionFailed
from mmina.recorder.observing import Capture
from mmina.recorder.seeding import seed_random
from mmina.recorder.settling import (ACTION_DEADLINE_S, CALL_DEADLINE_S, CLOSE_DEADLINE_S, GRACE_S,
                                     LAUNCH_DEADLINE_S, LOAD_MAX_S, OBSERVE_DEADLINE_S, SETTLE_MAX_S, PROBE_DEADLINE_S, REDIRECT_MARK,
                                     DeadlinePassed)
from mmina.recorder.tabs import BrowserGone, Tabs, connection_closed
from mmina.store.marks import DEFAULT_QUALITY

__all__ = ["ACTION_DEADLINE_S", "OBSERVE_DEADLINE_S", "REDIRECT_MARK", "ActionFailed", "BrowserConfig",
           "BrowserGone", "BrowserSession", "ContextAbandoned", "ContextHook", "DeadlinePassed", "EpisodeBrowser",
           "RestartingSession", "find_chromium"]

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
LOCAL_NETWORK_FEATURES = ("LocalNetworkAccessChecks",)
"""Chromium's Local Network Access checks, off: a page a replay served (from the archive, so
from no address, which Chromium counts as public) that goes on live after a hand-over (``record
--prefix-run``) must reach the sites it came from, which here are local (the fixture web, an
application on 127.0.0.1): with the checks on, Chromium blocks them ("The connection is blocked
because it was initiated by a public page to connect to devices or servers on your local
network"; the kiwix viewer's search frame after a hand-over)."""
MMINA_DISABLED_FEATURES = (*UNSHOWN_UI_FEATURES, *LOCAL_NETWORK_FEATURES)
"""The features mmina turns off besides Playwright's."""
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
    """An asyncio event loop on a daemon thread; :meth:`run` waits for a coroutine run there,
    never past its deadline."""

    def __init__(self) -> None:
        self.loop = _OwnSessionLoop()
        self.loop.set_exception_handler(_report_unless_driver_gone)
        self.wedged = False
        """True once the loop itself stopped answering (a blocking call on its thread)."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="mmina-browser", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None, doing: str = "a browser call") -> T:
        """The coroutine's result, waited for until ``deadline`` (``time.monotonic()``; default
        ``CALL_DEADLINE_S`` from now). Past it the coroutine is cancelled and
        :class:`DeadlinePassed` says what was ``doing`` and where it waited."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("the browser's loop cannot wait for itself")
        started = time.monotonic()
        deadline = deadline if deadline is not None else started + CALL_DEADLINE_S
        task_box: list[asyncio.Task[Any]] = []
        future = asyncio.run_coroutine_threadsafe(_tracked(coroutine, task_box), self.loop)
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            pass
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
            return asyncio.run_coroutine_threadsafe(_describe(task_box[0]), self.loop).result(timeout=PROBE_DEADLINE_S)
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
        module = (awaited.cr_frame.f_globals.get("__name__", "") if awaited.cr_frame else "")
        name = f"{module}.{awaited.cr_code.co_qualname}"
        if module.startswith("playwright.async_api"):
            playwright_call = awaited.cr_code.co_qualname
        elif module.startswith("mmina."):
            mmina_function = name
        awaited = awaited.cr_await
    if not (playwright_call or mmina_function):
        return "(it had finished or not started)"
    parts = [f"waiting for {playwright_call}" if playwright_call else "waiting",
             f"in {mmina_function}" if mmina_function else ""]
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


class BrowserSession:
    """One Chromium and one Playwright driver; each episode gets a fresh context. Safe to use
    from many threads at once (one episode per thread)."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._closed = False
        self._unresponsive = False
        self._painter = ThreadPoolExecutor(max_workers=PAINTERS, thread_name_prefix="marks")
        self._loop = _Loop()
        try:
            self._playwright, self.browser, self._driver = self._loop.run(
                _launch(config), time.monotonic() + LAUNCH_DEADLINE_S, "starting the browser")
        except BaseException:
            self._loop.stop()
            self._painter.shutdown(wait=False)
            raise

    @property
    def version(self) -> str:
        return f"chromium {self.browser.version}"

    @property
    def connected(self) -> bool:
        """False once the browser process has crashed or been killed, or Playwright's driver has,
        or the driver (or the session's event loop) stopped answering."""
        return (not self._closed and not self._unresponsive and not self._loop.wedged
                and self.browser.is_connected() and not connection_closed(self._playwright))

    def run(self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None,
            doing: str = "a browser call") -> T:
        """Run a coroutine on the session's event loop (where its Playwright objects live), never
        past ``deadline`` (see :meth:`_Loop.run`)."""
        return self._loop.run(coroutine, deadline, doing)

    def answers(self) -> bool:
        """Whether the driver and the browser answer a cheap question (a DevTools session
        opened and closed) within ``PROBE_DEADLINE_S``; a session that does not is no longer
        ``connected``."""
        try:
            self.run(_probe(self.browser), time.monotonic() + PROBE_DEADLINE_S, "asking the browser a question")
            return True
        except PlaywrightError:
            return not connection_closed(self._playwright)
        except DeadlinePassed:
            self._unresponsive = True
            return False

    def episode(self, har_path: Path | None, prepare: ContextHook | None = None,
                offline: bool = False, paint_marks: bool = True, seed: int | None = None,
                options: Mapping[str, Any] | None = None) -> "EpisodeBrowser":
        """A fresh context for one episode, recording its traffic to ``har_path`` (if given);
        ``prepare`` runs on it before the first page opens (replay uses it to route every
        request to the archive and set its clock). An ``offline`` context cannot reach the
        network at all (see ``OFFLINE_PROXY``). Without ``paint_marks`` (an agent not shown the
        set-of-marks image) the image is not painted, whatever the configuration says. A ``seed``
        seeds ``Math.random`` in every document (``seeding.py``). ``options`` are further
        arguments of Playwright's ``new_context`` (a task's storage state and position)."""
        capture = replace(self.config.capture, set_of_marks=self.config.set_of_marks and paint_marks)
        tabs = self.run(self._new_tabs(har_path, prepare, offline, capture, seed, options or {}),
                        time.monotonic() + ACTION_DEADLINE_S + GRACE_S, "opening a browser context")
        return EpisodeBrowser(self, tabs)

    async def _new_tabs(self, har_path: Path | None, prepare: ContextHook | None, offline: bool,
                        capture: Capture, seed: int | None, options: Mapping[str, Any]) -> Tabs:
        har = {"record_har_path": str(har_path), "record_har_content": "attach"} if har_path else {}
        context = await self.browser.new_context(
            proxy=OFFLINE_PROXY if offline else None,  # type: ignore[arg-type]
            viewport={"width": self.config.viewport_width, "height": self.config.viewport_height},
            locale="en-US", timezone_id="UTC", service_workers="block", **har, **options)
        try:
            if seed is not None:
                await seed_random(context, seed)
            if prepare is not None:
                await prepare(context)
            return await Tabs.start(context, capture, self._painter, self.config.allowed_schemes)
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
                self._loop.run(_shut_down(self._playwright, self.browser), time.monotonic() + CLOSE_DEADLINE_S,
                               "stopping the browser")
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
    except (PlaywrightError, asyncio.TimeoutError):
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
        """The session, or a new one if it died or stopped answering (asked each time: a driver
        stuck between two episodes would otherwise hold the next one's start)."""
        with self._lock:
            if not self.session.connected or not self.session.answers():
                self.session.close()
                self.session = BrowserSession(self.config)
            return self.session

    def close(self) -> None:
        self.session.close()


async def _launch(config: BrowserConfig) -> tuple[Playwright, Browser, asyncio.subprocess.Process | None]:
    """Playwright's driver and Chromium, and the driver's process (to kill it if it stops
    answering: Playwright keeps it in a private attribute, read with care)."""
    manager = async_playwright()
    playwright = await manager.start()
    process = getattr(getattr(getattr(manager, "_client", None), "_transport", None), "_proc", None)
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
    return playwright, browser, process if isinstance(process, asyncio.subprocess.Process) else None


def launch_args(extra_args: tuple[str, ...]) -> list[str]:
    """Chromium's arguments beyond Playwright's: quiet ones, the user's, and one
    ``--disable-features`` switch that takes Playwright's features, ``MMINA_DISABLED_FEATURES``
    and the user's own ``--disable-features`` together (in place of Playwright's, see ``_launch``)."""
    features = [*PLAYWRIGHT_DISABLED_FEATURES, *MMINA_DISABLED_FEATURES]
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


class ContextAbandoned(MminaError):
    """An episode's context could not be closed by its deadline and was left behind: its HAR
    (written when a context closes) is lost, and with it the episode's network trace."""


class EpisodeBrowser:
    """The tabs of one episode, for the episode's own thread (see the module).

    Every method bounds its call into the browser on the caller's side with the deadline of
    its part of a step (``settling.py``) plus ``GRACE_S``: a stuck driver, route handler or
    page costs that call :class:`DeadlinePassed`, never the thread. After a call passed its
    deadline, the next one first checks that the browser still answers at all
    (:meth:`BrowserSession.answers`; if not, :class:`BrowserGone` ends the episode) and that
    the page does (if not, the call fails at once instead of waiting for its deadline again)."""

    def __init__(self, session: BrowserSession, tabs: Tabs) -> None:
        self.session, self.tabs = session, tabs
        self.stuck: str | None = None
        """Why the last call that passed its deadline did (None once the browser answered again)."""

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

    def _call(self, coroutine: Coroutine[Any, Any, T], seconds: float, doing: str) -> T:
        """Run one call within ``seconds`` plus ``GRACE_S`` (see the class)."""
        if self.stuck is not None:
            if not self.session.answers():
                coroutine.close()
                raise BrowserGone(f"the browser stopped answering: {self.stuck}")
            if not self._page_answers():
                coroutine.close()
                raise DeadlinePassed(f"the page stopped answering: {self.stuck}")
            self.stuck = None
        try:
            return self.session.run(coroutine, time.monotonic() + seconds + GRACE_S, doing)
        except DeadlinePassed as exc:
            self.stuck = str(exc)
            raise

    def _page_answers(self) -> bool:
        """Whether the active page runs a trivial script within ``PROBE_DEADLINE_S`` (a renderer
        stuck in a script loop does not; a page navigating or gone is left to the call)."""
        try:
            self.session.run(self.tabs.page.evaluate("1"), time.monotonic() + PROBE_DEADLINE_S, "asking the page")
        except DeadlinePassed:
            return False
        except PlaywrightError:
            pass
        return True

    def open(self, urls: tuple[str, ...]) -> None:
        self._call(self.tabs.open(urls), ACTION_DEADLINE_S, "opening the start page")

    def settle(self, deadline: float | None = None) -> None:
        seconds = (deadline - time.monotonic()) if deadline is not None else LOAD_MAX_S + SETTLE_MAX_S
        self._call(self.tabs.settle(deadline), max(0.0, seconds), "waiting for the page to settle")

    def observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        return self._call(self.tabs.observe(step_index, intent), OBSERVE_DEADLINE_S, "observing the page")

    def tree(self) -> tuple[str, list[Element]]:
        return self._call(self.tabs.tree(), OBSERVE_DEADLINE_S, "reading the accessibility tree")

    def execute(self, action: Action) -> None:
        self._call(self.tabs.execute(action), ACTION_DEADLINE_S, f"the action {action.render()}")

    def close(self) -> None:
        """Close the context (this also writes the HAR file); one that cannot be closed by
        ``CLOSE_DEADLINE_S`` is abandoned (:class:`ContextAbandoned`)."""
        if self.stuck is not None and not self.session.answers():
            raise ContextAbandoned(f"the browser stopped answering ({self.stuck}); the context was abandoned "
                                   "and its network trace (HAR) is lost")
        try:
            self.session.run(self.tabs.close(), time.monotonic() + CLOSE_DEADLINE_S, "closing the context")
        except DeadlinePassed as exc:
            raise ContextAbandoned(f"{exc}; the context was abandoned and its network trace (HAR) is lost") from None
