"""The tabs of one episode, on Playwright's async API: open, settle, observe, act.

Every method here runs on the browser's event loop (see ``mmina.recorder.browser``), which
many episodes share: a wait is an ``await``, never a blocking call, so one episode waiting on
its page never holds up another.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from playwright.async_api import BrowserContext, Error as PlaywrightError, Frame, Locator, Page

from mmina.actions import Action, ActionKind
from mmina.errors import MminaError, StartPageError
from mmina.observation import Element, ElementIds, Observation, PageImage, Tab, flatten_snapshot
from mmina.recorder.shots import Screenshots
from mmina.recorder.streams import EventStreams
from mmina.store.marks import paint

T = TypeVar("T")
ACTION_TIMEOUT_MS = 5_000
NAVIGATION_TIMEOUT_MS = 20_000
"""Until a navigation commits (its response arrived); its load is then settle's to wait for."""
LOAD_MAX_S = 10.0
"""At most this long for the page to finish loading after an action."""
SETTLE_MAX_S = 3.0
SETTLE_QUIET_S = 0.05
SETTLE_POLL_S = 0.01
ACTION_DEADLINE_S = NAVIGATION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's action and the settling after it end within this (a failed action included)."""
OBSERVE_DEADLINE_S = 4 * ACTION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's observation ends within this (its one retry after a failed read included)."""
REDIRECT_MARK = "mmina-redirect"
"""A page with ``<meta name="mmina-redirect">`` is a replayed redirect about to replace itself
(see ``mmina.replayer.router``): not a page to observe, so settling waits past it."""
READY = ("() => document.readyState === 'complete' && !document.querySelector('meta[name=\"%s\"]')"
         % REDIRECT_MARK)
IMAGES_IN_VIEW = """() => Array.from(document.images)
  .filter(i => i.complete && i.naturalWidth > 0)
  .map(i => { const r = i.getBoundingClientRect();
              return {src: i.currentSrc || i.src, alt: i.alt || "", x: r.x, y: r.y, width: r.width, height: r.height}; })
  .filter(b => b.width > 0 && b.height > 0 && b.x < innerWidth && b.y < innerHeight && b.x + b.width > 0 && b.y + b.height > 0)"""


@dataclass(frozen=True)
class Capture:
    """What an observation captures, from the run's browser settings."""

    viewport_width: int
    viewport_height: int
    screenshots: bool
    set_of_marks: bool
    jpeg_quality: int


class ActionFailed(MminaError):
    """An action could not be executed; recorded on the step, the episode goes on."""


class BrowserGone(MminaError):
    """Chromium or Playwright's driver went away: nothing more can happen in this episode."""


def connection_closed(api_object: object) -> bool:
    """Whether the connection to Playwright's driver behind a Playwright object has closed
    (``Browser.is_connected`` does not notice a killed driver; the connection records it)."""
    connection = getattr(getattr(api_object, "_impl_obj", None), "_connection", None)
    return getattr(connection, "_closed_error", None) is not None


class _Timer:
    """Times the parts of an observation, in milliseconds."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.timings: dict[str, float] = {}

    async def time(self, name: str, part: Awaitable[T]) -> T:
        start = time.perf_counter()
        result = await part
        self.timings[name] = (time.perf_counter() - start) * 1e3
        return result

    def done(self, total: str) -> dict[str, float]:
        return {**self.timings, total: (time.perf_counter() - self.started) * 1e3}


class Tabs:
    """The tabs of one episode's context: observe the active one, execute actions on it."""

    def __init__(self, context: BrowserContext, capture: Capture, streams: EventStreams, painter: Executor) -> None:
        self.context, self.capture, self.streams, self._painter = context, capture, streams, painter
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self._in_flight = 0
        self._last_activity = time.monotonic()
        for event, delta in (("request", 1), ("requestfinished", -1), ("requestfailed", -1)):
            context.on(event, lambda _r, d=delta: self._count(d))
        context.on("page", self._on_page)
        self.pages: list[Page] = []
        self.active = 0
        self.secrets: list[str] = []
        self.ids = ElementIds()
        self.observe_error: str | None = None
        self._shots = Screenshots(context, capture.jpeg_quality)

    @classmethod
    async def start(cls, context: BrowserContext, capture: Capture, painter: Executor) -> "Tabs":
        """The tabs of a new context; ``painter`` paints set-of-marks images (the session's threads)."""
        return cls(context, capture, await EventStreams.attach(context), painter)

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

    async def open(self, urls: tuple[str, ...]) -> None:
        """Open the task's start URLs, one tab each, the first one active; one that cannot be
        reached or answers with a server error raises :class:`StartPageError` (the episode
        errors, the run goes on)."""
        deadline = time.monotonic() + ACTION_DEADLINE_S
        for url in urls or ("about:blank",):
            page = await self.context.new_page()
            try:
                response = await page.goto(url, wait_until="commit")
            except PlaywrightError as exc:
                raise StartPageError(f"cannot open the start page {url}: {_reason(exc)}") from None
            if response is not None and response.status >= 500:
                await _wait_for_dom(page)
                raise StartPageError(f"cannot open the start page {url}: HTTP {response.status} ({await _title(page)})")
        self.active = 0
        await self.page.bring_to_front()
        await self.settle(deadline)

    async def settle(self, deadline: float | None = None) -> None:
        """Wait until the page has loaded and the network has been quiet briefly (XHR content),
        never past ``deadline`` (``time.monotonic()``; default: the longest load and settle).

        "Loaded" is read from the document (``readyState`` complete, and not a replayed redirect
        that is about to replace itself), not from Playwright's load event: a page restored from
        the back-forward cache is complete without firing load again.
        """
        now = time.monotonic()
        deadline = min(deadline or now + LOAD_MAX_S + SETTLE_MAX_S, now + LOAD_MAX_S + SETTLE_MAX_S)
        ready = self._last_activity if await self._wait_ready(min(deadline, now + LOAD_MAX_S)) else None
        await self._idle_work(SETTLE_QUIET_S)  # let events of requests just started arrive first
        quiet_until = min(deadline, time.monotonic() + SETTLE_MAX_S)
        while time.monotonic() < quiet_until:
            if self._in_flight == 0 and time.monotonic() - self._last_activity >= SETTLE_QUIET_S:
                if ready == self._last_activity:  # no request since the page was ready: still is
                    return
                activity = self._last_activity
                if not await self._wait_ready(min(deadline, time.monotonic() + LOAD_MAX_S)):
                    return
                if self._last_activity == activity:
                    return
                # requests began meanwhile (e.g. the page a replayed redirect replaced itself by): wait for them too
            await asyncio.sleep(SETTLE_POLL_S)

    async def _wait_ready(self, until: float) -> bool:
        """Wait until the document is ready (see :meth:`settle`) or ``until``; whether it is."""
        remaining_ms = (until - time.monotonic()) * 1e3
        try:
            await self.page.wait_for_function(READY, timeout=max(1.0, remaining_ms), polling=20)
            return True
        except PlaywrightError:
            return False

    async def _idle_work(self, seconds: float) -> None:
        """Wait ``seconds``, using the time to load Playwright's script into a new document
        (~25 ms after each navigation) so the accessibility tree is then read at once."""
        started = time.monotonic()
        try:
            await self.page.locator("body").count()
        except PlaywrightError:
            pass
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))

    async def observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
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
            return await self._observe(step_index, intent)
        except PlaywrightError as exc:
            self._raise_if_gone(exc)
            first = str(exc).splitlines()[0]
        await self.settle()
        try:
            return await self._observe(step_index, intent)
        except PlaywrightError as exc:
            self._raise_if_gone(exc)
            self.observe_error = f"observation failed: {first}; again: {str(exc).splitlines()[0]}"
        observation = Observation(step_index, self.page.url, "", [Tab(p.url, "") for p in self.pages], self.active,
                                  "", [], None, intent)
        return observation, {"observe_ms": (time.perf_counter() - started) * 1e3}

    async def tree(self) -> tuple[str, list[Element]]:
        """The active tab's accessibility tree as the agent sees it, and its elements."""
        return flatten_snapshot(await self.page.aria_snapshot(mode="ai", boxes=True), self.ids)

    async def _observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        """The parts are read side by side: the tree and images are script in the renderer, the
        screenshot mostly raster and encoding elsewhere, so the critical path is about the slowest."""
        timer = _Timer()
        (tree_text, elements), images, screenshot, titles = await _side_by_side(
            timer.time("tree_ms", self.tree()), timer.time("images_ms", self._images()),
            timer.time("screenshot_ms", self._screenshot()), asyncio.gather(*(_title(p) for p in self.pages)))
        tabs = [Tab(p.url, title) for p, title in zip(self.pages, titles)]
        observation = Observation(step_index, self.page.url, tabs[self.active].title, tabs, self.active,
                                  tree_text, elements, screenshot, intent, images=images)
        timings = timer.done("observe_ms")
        if screenshot is not None and self.capture.set_of_marks:
            painting = self._painter.submit(self._marks, screenshot, elements, timings)
            observation.pending_marks = painting.result
        return observation, timings

    async def _images(self) -> list[PageImage]:
        """The images in view in the page and in every frame of it, boxes in the page's viewport."""
        found: list[PageImage] = []
        for frame in self.page.frames:
            offset = await _frame_offset(self.page, frame)
            try:
                images = await frame.evaluate(IMAGES_IN_VIEW) if offset is not None else []
            except PlaywrightError:  # the frame went away while we looked
                continue
            found += [PageImage(**{**i, "x": i["x"] + offset[0], "y": i["y"] + offset[1]}) for i in images]
        width, height = self.capture.viewport_width, self.capture.viewport_height
        return [i for i in found if i.x < width and i.y < height and i.x + i.width > 0 and i.y + i.height > 0]

    async def _screenshot(self) -> bytes | None:
        """The viewport as JPEG (see ``mmina.recorder.shots``)."""
        if not self.capture.screenshots:
            return None
        return await self._shots.take(self.page)

    def _marks(self, screenshot: bytes, elements: list[Element], timings: dict[str, float]) -> bytes:
        started = time.perf_counter()
        viewport = (self.capture.viewport_width, self.capture.viewport_height)
        painted = paint(screenshot, elements, *viewport, self.capture.jpeg_quality)
        timings["som_ms"] = (time.perf_counter() - started) * 1e3
        return painted

    async def execute(self, action: Action) -> None:
        """Run one action on the browser and let the page settle, within ``ACTION_DEADLINE_S``;
        raises :class:`ActionFailed` with a one-line reason (after settling: a navigation the
        action started may still be under way, and the next observation should see its end)."""
        deadline = time.monotonic() + ACTION_DEADLINE_S
        try:
            await _EXECUTORS[action.kind](self, action)
        except PlaywrightError as exc:
            self._raise_if_gone(exc)
            await self.settle(deadline)
            raise ActionFailed(str(exc).splitlines()[0]) from None
        await self.settle(deadline)

    def _raise_if_gone(self, exc: PlaywrightError) -> None:
        """Raise :class:`BrowserGone` if the browser or Playwright's driver is gone."""
        browser = self.context.browser
        if connection_closed(self.context) or (browser is not None and not browser.is_connected()):
            raise BrowserGone(f"the browser's connection closed: {str(exc).splitlines()[0]}") from None

    async def locate(self, element: str | None) -> Locator:
        if element is None:
            raise ActionFailed("the action names no element")
        ref = self.ids.ref_for(element)
        locator = self.page.locator(f"aria-ref={ref}") if ref else None
        if locator is None or await locator.count() == 0:
            raise ActionFailed(f"element [{element}] is not on the current page")
        return locator

    async def close(self) -> None:
        """Close the context (this also writes the HAR file)."""
        await self.context.close()


async def _frame_offset(page: Page, frame: Frame) -> tuple[float, float] | None:
    """Where a frame's content starts in the page's viewport (None for a frame not shown)."""
    if frame is page.main_frame:
        return 0.0, 0.0
    try:
        element = await frame.frame_element()
    except PlaywrightError:
        return None
    try:
        box = await element.bounding_box()
    except PlaywrightError:
        box = None
    finally:
        try:
            await element.dispose()
        except PlaywrightError:
            pass
    return (box["x"], box["y"]) if box else None


def _reason(exc: PlaywrightError) -> str:
    """A Playwright error's first line without its ``Page.goto:`` prefix."""
    return str(exc).splitlines()[0].partition(": ")[2] or str(exc).splitlines()[0]


async def _wait_for_dom(page: Page) -> None:
    """Until the page's document is parsed (its title readable), at most one action timeout."""
    try:
        await page.wait_for_load_state("domcontentloaded", timeout=ACTION_TIMEOUT_MS)
    except PlaywrightError:
        pass


async def _side_by_side(*parts: Awaitable[Any]) -> list[Any]:
    """Await every part together; when some fail, raise the first failure once all have ended
    (so no part is left running, and no failure goes unretrieved)."""
    results = await asyncio.gather(*parts, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return results


async def _title(page: Page) -> str:
    try:
        return await page.title()
    except PlaywrightError:
        return ""


async def _click(tabs: Tabs, action: Action) -> None:
    await (await tabs.locate(action.element_id)).click()


async def _hover(tabs: Tabs, action: Action) -> None:
    await (await tabs.locate(action.element_id)).hover()


async def _type(tabs: Tabs, action: Action) -> None:
    locator = await tabs.locate(action.element_id)
    text = action.text or ""
    if await locator.evaluate("e => e.tagName") == "SELECT":
        await locator.select_option(label=text)
        return
    if await locator.evaluate("e => e.type") == "password":
        tabs.secrets.append(text)
    await locator.fill(text)
    if action.press_enter:
        await locator.press("Enter")


async def _press(tabs: Tabs, action: Action) -> None:
    await tabs.page.keyboard.press(action.key or "")


async def _scroll(tabs: Tabs, action: Action) -> None:
    sign = -1 if action.direction == "up" else 1
    await tabs.page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight)")


async def _tab_focus(tabs: Tabs, action: Action) -> None:
    index = action.tab_index or 0
    if not 0 <= index < len(tabs.pages):
        raise ActionFailed(f"there is no tab {index} (open tabs: {len(tabs.pages)})")
    tabs.active = index
    await tabs.page.bring_to_front()


async def _close_tab(tabs: Tabs, action: Action) -> None:
    if len(tabs.pages) == 1:
        raise ActionFailed("cannot close the last tab")
    await tabs.pages.pop(tabs.active).close()
    tabs.active = len(tabs.pages) - 1
    await tabs.page.bring_to_front()


async def _new_tab(tabs: Tabs, action: Action) -> None:
    await tabs.context.new_page()


# Navigations wait for their commit only; settle then waits for the load. Playwright's own
# wait for "load" never ends for a page the back-forward cache restores (no load event).
async def _goto(tabs: Tabs, action: Action) -> None:
    await tabs.page.goto(action.url or "about:blank", wait_until="commit")


async def _go_back(tabs: Tabs, action: Action) -> None:
    await tabs.page.go_back(wait_until="commit")


async def _go_forward(tabs: Tabs, action: Action) -> None:
    await tabs.page.go_forward(wait_until="commit")


async def _stop(tabs: Tabs, action: Action) -> None:
    return None


_EXECUTORS: dict[ActionKind, Callable[[Tabs, Action], Awaitable[None]]] = {
    ActionKind.CLICK: _click,
    ActionKind.HOVER: _hover,
    ActionKind.TYPE: _type,
    ActionKind.PRESS: _press,
    ActionKind.SCROLL: _scroll,
    ActionKind.NEW_TAB: _new_tab,
    ActionKind.TAB_FOCUS: _tab_focus,
    ActionKind.CLOSE_TAB: _close_tab,
    ActionKind.GOTO: _goto,
    ActionKind.GO_BACK: _go_back,
    ActionKind.GO_FORWARD: _go_forward,
    ActionKind.STOP: _stop,
}
