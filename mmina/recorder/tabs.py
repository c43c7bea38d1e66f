"""The tabs of one episode, on Playwright's async API: open them, and the state an episode's
steps share (pages, the active one, element ids, secrets typed, the event streams).

What is done with the tabs lives beside this module, one module a concern: waiting for a
page (``settling.py``), observing it (``observing.py``) and acting on it (``acting.py``).
Every method here runs on the browser's event loop (see ``mmina.recorder.browser``), which
many episodes share: a wait is an ``await``, never a blocking call, so one episode waiting on
its page never holds up another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from playwright.async_api import BrowserContext, CDPSession, Frame, Page
from playwright.async_api import Error as PlaywrightError

from mmina.actions.navigation import BLANK, PAGE_SCHEMES, refusal
from mmina.errors import MminaError, StartPageError
from mmina.observations.observation import ElementIds
from mmina.recorder.devtools import PageSessions
from mmina.recorder.freezing import Freezing
from mmina.recorder.settling import ACTION_DEADLINE_S, ACTION_TIMEOUT_MS, NAVIGATION_TIMEOUT_MS, Settling
from mmina.recorder.shots import Screenshots
from mmina.recorder.streams import EventStreams
from mmina.recorder.web_workers import watch_page
from mmina.recorder.window import keep_window_small


class BrowserGone(MminaError):
    """Chromium or Playwright's driver went away: nothing more can happen in this episode."""

    infrastructure = True


def connection_closed(api_object: object) -> bool:
    """Whether the connection to Playwright's driver behind a Playwright object has closed
    (``Browser.is_connected`` does not notice a killed driver; the connection records it)."""
    connection = getattr(getattr(api_object, "_impl_obj", None), "_connection", None)
    return getattr(connection, "_closed_error", None) is not None


@dataclass(frozen=True)
class Capture:
    """What an observation captures, from the run's browser settings."""

    viewport_width: int
    viewport_height: int
    screenshots: bool
    set_of_marks: bool
    jpeg_quality: int


async def title_of(page: Page) -> str:
    try:
        return await page.title()
    except PlaywrightError:
        return ""


class Tabs:
    """The tabs of one episode's context (observed by ``observing.py``, acted on by ``acting.py``)."""

    def __init__(
        self,
        context: BrowserContext,
        capture: Capture,
        streams: EventStreams,
        painter: Executor,
        allowed_schemes: tuple[str, ...] = (),
        page_time: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context, self.capture, self.streams, self.painter = context, capture, streams, painter
        self.allowed_schemes = allowed_schemes
        """URL schemes the user allows beyond the web (``mmina.actions.navigation``)."""
        self._blanking: set[asyncio.Task[None]] = set()
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self.sessions = PageSessions(context, self._listen)
        """Each page's DevTools session of mmina's own, tapping its network and shrinking its
        window as it opens (``devtools.py``, ``window.py``)."""
        self._settling = Settling(context, lambda: self.page, self.sessions, page_time)
        context.on("page", self._on_page)
        self.pages: list[Page] = []
        self.active = 0
        self.secrets: list[str] = []
        self.ids = ElementIds()
        self.observe_error: str | None = None
        self.shots = Screenshots(self.sessions, capture.jpeg_quality)
        self.freezing = Freezing(self.sessions.get)
        """Freezes the tabs while the agent thinks (see ``freezing.py``)."""

    @classmethod
    async def start(
        cls,
        context: BrowserContext,
        capture: Capture,
        painter: Executor,
        allowed_schemes: tuple[str, ...] = (),
        page_time: Callable[[], float] = time.monotonic,
    ) -> Tabs:
        """The tabs of a new context; ``painter`` paints set-of-marks images (the session's threads);
        ``page_time`` is the pages' time in seconds (a replay's: its recording's timeline)."""
        await Settling.prepare(context)
        return cls(context, capture, await EventStreams.attach(context), painter, allowed_schemes, page_time)

    async def _listen(self, session: CDPSession) -> None:
        await self.streams.listen(session)
        await keep_window_small(session, self.capture.viewport_width, self.capture.viewport_height)
        await watch_page(self.context, session)  # its workers get the context's worker scripts

    def _on_page(self, page: Page) -> None:
        """New tabs (``new_tab`` or a link opening one) become the active tab; their DevTools
        session opens at once, tapping their network for the bodies the HAR would lose (see
        ``streams.BodyTaps``)."""
        page.on("framenavigated", lambda frame: self._check_landing(page, frame))
        self.pages.append(page)
        self.active = len(self.pages) - 1
        self.sessions.open(page)

    @property
    def page(self) -> Page:
        return self.pages[self.active]

    async def open(self, urls: tuple[str, ...]) -> None:
        """Open the task's start URLs, one tab each, the first one active; one that cannot be
        reached or answers with a server error raises :class:`StartPageError` (the episode
        errors, the run goes on)."""
        deadline = time.monotonic() + ACTION_DEADLINE_S
        for url in urls or (BLANK,):
            refused = refusal(url, self.allowed_schemes)
            if refused:
                raise StartPageError(f"cannot open the start page: {refused}")
            page = await self.context.new_page()
            await self.sessions.get(page)  # the tap listens before the page loads anything
            try:
                response = await page.goto(url, wait_until="commit")
            except PlaywrightError as exc:
                raise StartPageError(
                    f"cannot open the start page {url}: {_reason(exc)}", url, error=_reason(exc)
                ) from None
            if response is not None and response.status >= 500:
                await _wait_for_dom(page)
                raise StartPageError(
                    f"cannot open the start page {url}: HTTP {response.status} ({await title_of(page)})",
                    url,
                    response.status,
                )
        self.active = 0
        await self.page.bring_to_front()
        await self.settle(deadline)

    def _check_landing(self, page: Page, frame: Frame) -> None:
        """A tab whose page lands off the web (see ``mmina.actions.navigation``) is sent to about:blank at
        once: Chromium already keeps pages from opening local files, and this holds whatever it
        lets through (a flag, a browser-initiated navigation). Settling waits for it."""
        if frame.parent_frame is not None or refusal(frame.url, self.allowed_schemes, PAGE_SCHEMES) is None:
            return
        task = asyncio.get_running_loop().create_task(_to_blank(page))
        self._blanking.add(task)
        task.add_done_callback(self._blanking.discard)

    @property
    def loading(self) -> bool:
        """Requests of the episode's context are in flight (see ``Settling.loading``)."""
        return self._settling.loading

    async def settle(self, deadline: float | None = None) -> None:
        """Wait for the active page to settle (see :class:`Settling`), after any tab sent off the
        web was brought back."""
        if self._blanking:
            await asyncio.gather(*self._blanking, return_exceptions=True)
        await self._settling.settle(deadline)

    def raise_if_gone(self, exc: PlaywrightError) -> None:
        """Raise :class:`BrowserGone` if the browser or Playwright's driver is gone."""
        browser = self.context.browser
        if connection_closed(self.context) or (browser is not None and not browser.is_connected()):
            raise BrowserGone(f"the browser's connection closed: {str(exc).splitlines()[0]}") from None

    async def close(self) -> None:
        """Close the context (this also writes the HAR file)."""
        await self.context.close()


async def _to_blank(page: Page) -> None:
    try:
        await page.goto(BLANK, wait_until="commit")
    except PlaywrightError:
        pass  # the tab closed meanwhile, or another navigation replaced it (and is checked in turn)


def _reason(exc: PlaywrightError) -> str:
    """A Playwright error's first line without its ``Page.goto:`` prefix."""
    return str(exc).splitlines()[0].partition(": ")[2] or str(exc).splitlines()[0]


async def _wait_for_dom(page: Page) -> None:
    """Until the page's document is parsed (its title readable), at most one action timeout."""
    try:
        await page.wait_for_load_state("domcontentloaded", timeout=ACTION_TIMEOUT_MS)
    except PlaywrightError:
        pass
