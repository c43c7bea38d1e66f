"""Each page's window, which headless Chromium never shows, kept small (``mmina.recorder.window``):
the page keeps its viewport and its screenshots byte for byte, a tab the page opens gets a
small window too, and Chromium's GPU process composites far less while a page animates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser
from mmina.recorder.window import WINDOW_HEIGHT, size_window
from tests.agents_for_tests import chromium_ticks
from tests.local_site import LocalSite, pages_handler
from tests.polling import wait_until

WIDTH, HEIGHT = 1280, 2048
PAGES = {
    "/": "<!doctype html><title>Tall</title><h1>Top of the page</h1><p>" + "words to wrap " * 400 + "</p>"
    "<p style='position: fixed; bottom: 0; margin: 0'>fixed to the viewport's bottom</p>",
    "/next": "<!doctype html><title>Next</title><h1>A tab the page opened</h1>",
    "/animated": "<!doctype html><title>Animated</title><style>body { margin: 0; height: 100vh; "
    "animation: glow 1s linear infinite alternate } @keyframes glow { to { background: gold } }</style>"
    "<script>window.frames_seen = 0; (function count() { frames_seen++; requestAnimationFrame(count); })();</script>",
}
SEEN = """() => ({inner: [innerWidth, innerHeight], outer: [outerWidth, outerHeight], \
screen: [screen.width, screen.height],
  tall: matchMedia('(min-height: 2000px)').matches, \
bottom: document.querySelector('p[style]')?.getBoundingClientRect().bottom})"""
"""What a page reads of its viewport, screen and window."""
MEASURED_FRAMES = 240
"""The frames whose compositing is measured in each window (4 s at 60 frames a second)."""
FRAMES_S = 120.0
"""The bound of a wait for frames (a loaded machine draws fewer a second)."""


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with LocalSite(pages_handler(PAGES)) as served:
        yield served.url


@pytest.fixture(scope="module")
def session() -> Iterator[BrowserSession]:
    session = BrowserSession(BrowserConfig(viewport_width=WIDTH, viewport_height=HEIGHT))
    yield session
    session.close()


def _seen(browser: EpisodeBrowser, page: Any) -> dict[str, Any]:
    return dict(browser.session.run(page.evaluate(SEEN)))


def _window_as_playwright_left_it(browser: EpisodeBrowser) -> None:
    """The active page's window back at the viewport's size, its viewport emulated again."""

    async def grow() -> None:
        devtools = await browser.tabs.sessions.get(browser.tabs.page)
        assert devtools is not None
        await size_window(devtools, WIDTH, HEIGHT, HEIGHT)

    browser.session.run(grow())


def test_a_pages_window_is_small_and_what_the_page_and_its_screenshot_show_is_not(
    session: BrowserSession, site: str
) -> None:
    browser = session.episode(None, paint_marks=False)
    try:
        browser.open((site,))
        small, _ = browser.observe(0, "look")
        seen_small = _seen(browser, browser.tabs.page)
        _window_as_playwright_left_it(browser)
        large, _ = browser.observe(1, "look")
        seen_large = _seen(browser, browser.tabs.page)
    finally:
        browser.close()
    assert seen_small == {
        "inner": [WIDTH, HEIGHT],
        "outer": [WIDTH, WINDOW_HEIGHT],
        "screen": [WIDTH, HEIGHT],
        "tall": True,
        "bottom": HEIGHT,
    }
    assert seen_large == {**seen_small, "outer": [WIDTH, HEIGHT]}
    assert small.screenshot is not None and small.screenshot == large.screenshot
    assert small.tree_text == large.tree_text and small.elements == large.elements


def test_a_tab_the_page_opens_gets_a_small_window_too(session: BrowserSession, site: str) -> None:
    browser = session.episode(None, paint_marks=False)
    try:
        browser.open((site,))
        browser.session.run(browser.tabs.page.evaluate("window.open('/next')"))
        wait_until(lambda: len(browser.tabs.pages) >= 2, 30, "the tab the page opened")
        opened = browser.tabs.pages[-1]
        browser.session.run(browser.tabs.sessions.get(opened))
        browser.settle()
        seen = _seen(browser, opened)
        observation, _ = browser.observe(0, "look")
    finally:
        browser.close()
    assert (seen["inner"], seen["outer"]) == ([WIDTH, HEIGHT], [WIDTH, WINDOW_HEIGHT])
    assert observation.title == "Next"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU counters from /proc (Linux)")
def test_an_animated_page_in_a_small_window_costs_the_gpu_process_a_fraction(
    session: BrowserSession, site: str
) -> None:
    """A page repainting its whole viewport every frame, 240 frames (4 s on an idle machine) in its
    small window, then as many in a window of its viewport's size (as Playwright leaves it): the
    GPU process, compositing the window every frame, must spend a third less a frame on the small
    one at least (measured: a half to a third as much on an idle machine, a quarter beside three
    busy processes; as much in a window of either size). A frame, not a second: a loaded machine
    draws fewer frames, so the measure is a count of frames, however long they take."""
    browser = session.episode(None, paint_marks=False)
    try:
        browser.open((site + "animated",))
        costs = []
        for grow in (False, True):
            if grow:
                _window_as_playwright_left_it(browser)
            _more_frames(browser, 20)  # the page drawing in its (resized) window
            ticks, frames = chromium_ticks("gpu"), _frames(browser)
            _more_frames(browser, MEASURED_FRAMES)
            ticks, frames = chromium_ticks("gpu") - ticks, _frames(browser) - frames
            costs.append(ticks / frames)
    finally:
        browser.close()
    small, large = costs
    assert small * 1.5 < large, f"{small:.3f} ticks a frame in the small window, {large:.3f} in the large"


def _more_frames(browser: EpisodeBrowser, count: int) -> None:
    """Wait until the page has drawn ``count`` frames more than now."""
    drawn = _frames(browser)
    wait_until(lambda: _frames(browser) >= drawn + count, FRAMES_S, f"{count} frames drawn", every_s=0.1)


def _frames(browser: EpisodeBrowser) -> int:
    return int(browser.session.run(browser.tabs.page.evaluate("window.frames_seen")))
