"""The browser: finding Chromium, one context per episode, observing and acting.

This module and ``har.py`` are the only recorder modules that touch Playwright.
"""
from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from pathlib import Path

from playwright.sync_api import (Browser, BrowserContext, Error as PlaywrightError, Frame, Page, Playwright,
                                sync_playwright)

from mmina.actions import Action, ActionKind
from mmina.errors import BrowserNotFoundError, MminaError, StartPageError
from mmina.observation import Element, ElementIds, Observation, PageImage, Tab, flatten_snapshot
from mmina.recorder.streams import EventStreams
from mmina.recorder.marks import draw_marks, marked

T = TypeVar("T")
ContextHook = Callable[[BrowserContext], None]
BROWSER_ENV = "MMINA_CHROMIUM"
SYSTEM_CHROMIUMS = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
SYSTEM_COMMANDS = ("chromium", "chromium-browser", "google-chrome")
QUIET_ARGS = ["--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"]
ACTION_TIMEOUT_MS = 5_000
NAVIGATION_TIMEOUT_MS = 20_000
"""Until a navigation commits (its response arrived); its load is then settle's to wait for."""
LOAD_MAX_S = 10.0
"""At most this long for the page to finish loading after an action."""
SETTLE_MAX_S = 3.0
SETTLE_QUIET_S = 0.05
ACTION_DEADLINE_S = NAVIGATION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's action and the settling after it end within this (a failed action included)."""
OBSERVE_DEADLINE_S = 4 * ACTION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's observation ends within this (its one retry after a failed read included)."""
OFFLINE_PROXY = {"server": "http://127.0.0.1:9", "bypass": "<-loopback>"}
"""A replay's context sends what its routes do not answer to a proxy nobody listens on (the
discard port), loopback addresses included (``<-loopback>`` removes Chromium's implicit
bypass). Routes answer every request a page makes, but a ``keepalive`` request (a beacon sent
as its page unloads) outlives the page and its routes and would otherwise reach the live site."""
REDIRECT_MARK = "mmina-redirect"
"""A page with ``<meta name="mmina-redirect">`` is a replayed redirect about to replace itself
(see ``mmina.replayer.router``): not a page to observe, so settling waits past it."""
READY = ("() => document.readyState === 'complete' && !document.querySelector('meta[name=\"%s\"]')"
         % REDIRECT_MARK)


@dataclass(frozen=True)
class BrowserConfig:
    executable: str | None = None
    viewport_width: int = 1280
    viewport_height: int = 2048
    screenshots: bool = True
    set_of_marks: bool = True
    jpeg_quality: int = 80
    extra_args: tuple[str, ...] = ()
    back_forward_cache: bool = False
    """Playwright launches Chromium with ``--disable-back-forward-cache``; True keeps the cache on
    (history navigations then restore pages without loading them)."""


def find_chromium(explicit: str | None, playwright: Playwright) -> str:
    """An explicit setting, else Playwright's own browser, else the system's Chromium."""
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


class BrowserSession:
    """One Chromium process for a run; each episode gets a fresh context."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._closed = False
        self._playwright = sync_playwright().start()
        try:
            executable = find_chromium(config.executable, self._playwright)
            self.browser: Browser = self._playwright.chromium.launch(
                executable_path=executable, args=[*QUIET_ARGS, *config.extra_args],
                ignore_default_args=["--disable-back-forward-cache"] if config.back_forward_cache else None,
            )
        except PlaywrightError as exc:
            self._playwright.stop()
            raise BrowserNotFoundError(f"cannot start Chromium: {str(exc).splitlines()[0]}") from None
        except BaseException:
            self._playwright.stop()
            raise

    @property
    def version(self) -> str:
        return f"chromium {self.browser.version}"

    @property
    def connected(self) -> bool:
        """False once the browser process has crashed or been killed, or Playwright's driver has
        (``Browser.is_connected`` does not notice that: the sync API's dispatcher, which runs the
        driver connection, has then ended)."""
        fiber = getattr(self.browser, "_dispatcher_fiber", None)
        return self.browser.is_connected() and not getattr(fiber, "dead", False)

    def episode(self, har_path: Path, prepare: ContextHook | None = None, offline: bool = False) -> "EpisodeBrowser":
        """A fresh context for one episode; ``prepare`` runs on it before the first page opens
        (replay uses it to route every request to the archive and freeze the clock). An
        ``offline`` context cannot reach the network at all (see ``OFFLINE_PROXY``)."""
        context = self.browser.new_context(
            proxy=OFFLINE_PROXY if offline else None,
            viewport={"width": self.config.viewport_width, "height": self.config.viewport_height},
            locale="en-US",
            timezone_id="UTC",
            service_workers="block",
            record_har_path=str(har_path),
            record_har_content="attach",
        )
        if prepare is not None:
            try:
                prepare(context)
            except BaseException:
                context.close()
                raise
        return EpisodeBrowser(context, self.config)

    def close(self) -> None:
        """Stop the browser and Playwright; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.browser.is_connected():
                self.browser.close()
        except PlaywrightError:
            pass  # the browser or Playwright's driver died: nothing left to close
        finally:
            self._playwright.stop()


IMAGES_IN_VIEW = """() => Array.from(document.images)
  .filter(i => i.complete && i.naturalWidth > 0)
  .map(i => { const r = i.getBoundingClientRect();
              return {src: i.currentSrc || i.src, alt: i.alt || "", x: r.x, y: r.y, width: r.width, height: r.height}; })
  .filter(b => b.width > 0 && b.height > 0 && b.x < innerWidth && b.y < innerHeight && b.x + b.width > 0 && b.y + b.height > 0)"""


class _Timer:
    """Times the parts of an observation, in milliseconds."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.timings: dict[str, float] = {}

    def time(self, name: str, part: Callable[[], T]) -> T:
        start = time.perf_counter()
        result = part()
        self.timings[name] = (time.perf_counter() - start) * 1e3
        return result

    def done(self, total: str) -> dict[str, float]:
        return {**self.timings, total: (time.perf_counter() - self.started) * 1e3}


class ActionFailed(MminaError):
    """An action could not be executed; recorded on the step, the episode goes on."""


class EpisodeBrowser:
    """The tabs of one episode: observe the active one, execute actions on it."""

    def __init__(self, context: BrowserContext, config: BrowserConfig) -> None:
        self.context, self.config = context, config
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self._in_flight = 0
        self._last_activity = time.monotonic()
        for event, delta in (("request", 1), ("requestfinished", -1), ("requestfailed", -1)):
            context.on(event, lambda _r, d=delta: self._count(d))
        self.streams = EventStreams(context)
        context.on("page", self._on_page)
        self.pages: list[Page] = []
        self.active = 0
        self.secrets: list[str] = []
        self.ids = ElementIds()
        self.observe_error: str | None = None
        self._painter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marks")

    def _count(self, delta: int) -> None:
        self._in_flight = max(0, self._in_flight + delta)
        self._last_activity = time.monotonic()

    def _on_page(self, page: Page) -> None:
        """New tabs (``new_tab`` or a link opening one) become the active tab."""
        self.pages.append(page)
        self.active = len(self.pages) - 1

    @property
    def page(self) -> Page:
        return self.pages[self.active]

    def open(self, urls: tuple[str, ...]) -> None:
        """Open the task's start URLs, one tab each, the first one active; one that cannot be
        reached or answers with a server error raises :class:`StartPageError` (the episode
        errors, the run goes on)."""
        deadline = time.monotonic() + ACTION_DEADLINE_S
        for url in urls or ("about:blank",):
            page = self.context.new_page()
            try:
                response = page.goto(url, wait_until="commit")
            except PlaywrightError as exc:
                raise StartPageError(f"cannot open the start page {url}: {_reason(exc)}") from None
            if response is not None and response.status >= 500:
                _wait_for_dom(page)
                raise StartPageError(f"cannot open the start page {url}: HTTP {response.status} ({_title(page)})")
        self.active = 0
        self.page.bring_to_front()
        self.settle(deadline)

    def settle(self, deadline: float | None = None) -> None:
        """Wait until the page has loaded and the network has been quiet briefly (XHR content),
        never past ``deadline`` (``time.monotonic()``; default: the longest load and settle).

        "Loaded" is read from the document (``readyState`` complete, and not a replayed redirect
        that is about to replace itself), not from Playwright's load event: a page restored from
        the back-forward cache is complete without firing load again.
        """
        now = time.monotonic()
        deadline = min(deadline or now + LOAD_MAX_S + SETTLE_MAX_S, now + LOAD_MAX_S + SETTLE_MAX_S)
        ready = self._last_activity if self._wait_ready(min(deadline, now + LOAD_MAX_S)) else None
        self._idle_work(SETTLE_QUIET_S)  # let events of requests just started arrive first
        quiet_until = min(deadline, time.monotonic() + SETTLE_MAX_S)
        while time.monotonic() < quiet_until:
            if self._in_flight == 0 and time.monotonic() - self._last_activity >= SETTLE_QUIET_S:
                if ready == self._last_activity:  # no request since the page was ready: still is
                    return
                activity = self._last_activity
                if not self._wait_ready(min(deadline, time.monotonic() + LOAD_MAX_S)):
                    return
                if self._last_activity == activity:
                    return
                # requests began meanwhile (e.g. the page a replayed redirect replaced itself by): wait for them too
            self._wait(10)

    def _wait_ready(self, until: float) -> bool:
        """Wait until the document is ready (see :meth:`settle`) or ``until``; whether it is."""
        remaining_ms = (until - time.monotonic()) * 1e3
        try:
            self.page.wait_for_function(READY, timeout=max(1.0, remaining_ms), polling=20)
            return True
        except PlaywrightError:
            return False

    def _wait(self, milliseconds: float) -> None:
        try:
            self.page.wait_for_timeout(milliseconds)
        except PlaywrightError:
            time.sleep(milliseconds / 1e3)

    def _idle_work(self, seconds: float) -> None:
        """Wait ``seconds``, using the time to load Playwright's script into a new document
        (~25 ms after each navigation) so the accessibility tree is then read at once."""
        started = time.monotonic()
        try:
            self.page.locator("body").count()
        except PlaywrightError:
            pass
        remaining = seconds - (time.monotonic() - started)
        if remaining > 0:
            self._wait(remaining * 1e3)

    def observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        """Capture the observation of the active tab, timing each part in milliseconds.

        The set-of-marks screenshot is painted on a worker thread while the agent chooses its
        action (``Observation.resolve_marks`` waits for it); ``som_ms`` is that thread's time
        and is not part of ``observe_ms``.

        A read that fails (a page still navigating, a renderer that does not answer) is tried
        once more after the page settled; if it fails again the step gets an empty observation
        and ``observe_error`` says why, so the episode goes on. A closed browser is raised.
        """
        started = time.perf_counter()
        self.observe_error = None
        try:
            return self._observe(step_index, intent)
        except PlaywrightError as exc:
            if self._gone(exc):
                raise
            first = str(exc).splitlines()[0]
        self.settle()
        try:
            return self._observe(step_index, intent)
        except PlaywrightError as exc:
            if self._gone(exc):
                raise
            self.observe_error = f"observation failed: {first}; again: {str(exc).splitlines()[0]}"
        url = self.page.url
        observation = Observation(step_index, url, "", [Tab(p.url, "") for p in self.pages], self.active, "", [],
                                  None, intent)
        return observation, {"observe_ms": (time.perf_counter() - started) * 1e3}

    def _observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        timer = _Timer()
        snapshot = timer.time("tree_ms", lambda: self.page.aria_snapshot(mode="ai", boxes=True))
        tree_text, elements = flatten_snapshot(snapshot, self.ids)
        images = timer.time("images_ms", self._images)
        screenshot = timer.time("screenshot_ms", self._screenshot)
        tabs = [Tab(p.url, _title(p)) for p in self.pages]
        observation = Observation(step_index, self.page.url, tabs[self.active].title, tabs, self.active,
                                  tree_text, elements, screenshot, intent, images=images)
        timings = timer.done("observe_ms")
        if screenshot is not None and self.config.set_of_marks:
            painting = self._painter.submit(self._marks, screenshot, elements, timings)
            observation.pending_marks = painting.result
        return observation, timings

    def _images(self) -> list[PageImage]:
        """The images in view in the page and in every frame of it, boxes in the page's viewport."""
        found: list[PageImage] = []
        for frame in self.page.frames:
            offset = _frame_offset(self.page, frame)
            try:
                images = frame.evaluate(IMAGES_IN_VIEW) if offset is not None else []
            except PlaywrightError:  # the frame went away while we looked
                continue
            found += [PageImage(**{**i, "x": i["x"] + offset[0], "y": i["y"] + offset[1]}) for i in images]
        width, height = self.config.viewport_width, self.config.viewport_height
        return [i for i in found if i.x < width and i.y < height and i.x + i.width > 0 and i.y + i.height > 0]

    def _screenshot(self) -> bytes | None:
        """The viewport as JPEG. Playwright waits for fonts and a fresh frame first; a bare
        DevTools capture measured no faster here and raced with painting under load."""
        if not self.config.screenshots:
            return None
        return self.page.screenshot(type="jpeg", quality=self.config.jpeg_quality)

    def _marks(self, screenshot: bytes, elements: list[Element], timings: dict[str, float]) -> bytes:
        started = time.perf_counter()
        viewport = (self.config.viewport_width, self.config.viewport_height)
        painted = draw_marks(screenshot, marked(elements, *viewport), self.config.jpeg_quality)
        timings["som_ms"] = (time.perf_counter() - started) * 1e3
        return painted

    def execute(self, action: Action) -> None:
        """Run one action on the browser and let the page settle, within ``ACTION_DEADLINE_S``;
        raises :class:`ActionFailed` with a one-line reason (after settling: a navigation the
        action started may still be under way, and the next observation should see its end)."""
        deadline = time.monotonic() + ACTION_DEADLINE_S
        try:
            _EXECUTORS[action.kind](self, action)
        except PlaywrightError as exc:
            if self._gone(exc):
                raise
            self.settle(deadline)
            raise ActionFailed(str(exc).splitlines()[0]) from None
        self.settle(deadline)

    def _gone(self, exc: PlaywrightError) -> bool:
        """The browser or Playwright's driver is gone: nothing more can happen in this episode."""
        browser = self.context.browser
        return "connection closed" in str(exc) or (browser is not None and not browser.is_connected())

    def locate(self, element: str | None):
        if element is None:
            raise ActionFailed("the action names no element")
        ref = self.ids.ref_for(element)
        locator = self.page.locator(f"aria-ref={ref}") if ref else None
        if locator is None or locator.count() == 0:
            raise ActionFailed(f"element [{element}] is not on the current page")
        return locator

    def close(self) -> None:
        """Close the context (this also writes the HAR file) and the painting thread."""
        try:
            self.context.close()
        finally:
            self._painter.shutdown(wait=True)


def _frame_offset(page: Page, frame: Frame) -> tuple[float, float] | None:
    """Where a frame's content starts in the page's viewport (None for a frame not shown)."""
    if frame is page.main_frame:
        return 0.0, 0.0
    try:
        element = frame.frame_element()
    except PlaywrightError:
        return None
    try:
        box = element.bounding_box()
    except PlaywrightError:
        box = None
    finally:
        element.dispose()
    return (box["x"], box["y"]) if box else None


def _reason(exc: PlaywrightError) -> str:
    """A Playwright error's first line without its ``Page.goto:`` prefix."""
    return str(exc).splitlines()[0].partition(": ")[2] or str(exc).splitlines()[0]


def _wait_for_dom(page: Page) -> None:
    """Until the page's document is parsed (its title readable), at most one action timeout."""
    try:
        page.wait_for_load_state("domcontentloaded", timeout=ACTION_TIMEOUT_MS)
    except PlaywrightError:
        pass


def _title(page: Page) -> str:
    try:
        return page.title()
    except PlaywrightError:
        return ""


def _type(browser: EpisodeBrowser, action: Action) -> None:
    locator = browser.locate(action.element_id)
    text = action.text or ""
    if locator.evaluate("e => e.tagName") == "SELECT":
        locator.select_option(label=text)
        return
    if locator.evaluate("e => e.type") == "password":
        browser.secrets.append(text)
    locator.fill(text)
    if action.press_enter:
        locator.press("Enter")


def _scroll(browser: EpisodeBrowser, action: Action) -> None:
    sign = -1 if action.direction == "up" else 1
    browser.page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight)")


def _tab_focus(browser: EpisodeBrowser, action: Action) -> None:
    index = action.tab_index or 0
    if not 0 <= index < len(browser.pages):
        raise ActionFailed(f"there is no tab {index} (open tabs: {len(browser.pages)})")
    browser.active = index
    browser.page.bring_to_front()


def _close_tab(browser: EpisodeBrowser, action: Action) -> None:
    if len(browser.pages) == 1:
        raise ActionFailed("cannot close the last tab")
    browser.pages.pop(browser.active).close()
    browser.active = len(browser.pages) - 1
    browser.page.bring_to_front()


def _new_tab(browser: EpisodeBrowser, action: Action) -> None:
    browser.context.new_page()


_EXECUTORS = {
    ActionKind.CLICK: lambda b, a: b.locate(a.element_id).click(),
    ActionKind.HOVER: lambda b, a: b.locate(a.element_id).hover(),
    ActionKind.TYPE: _type,
    ActionKind.PRESS: lambda b, a: b.page.keyboard.press(a.key or ""),
    ActionKind.SCROLL: _scroll,
    ActionKind.NEW_TAB: _new_tab,
    ActionKind.TAB_FOCUS: _tab_focus,
    ActionKind.CLOSE_TAB: _close_tab,
    # Navigations wait for their commit only; settle then waits for the load. Playwright's own
    # wait for "load" never ends for a page the back-forward cache restores (no load event).
    ActionKind.GOTO: lambda b, a: b.page.goto(a.url or "about:blank", wait_until="commit"),
    ActionKind.GO_BACK: lambda b, a: b.page.go_back(wait_until="commit"),
    ActionKind.GO_FORWARD: lambda b, a: b.page.go_forward(wait_until="commit"),
    ActionKind.STOP: lambda b, a: None,
}
