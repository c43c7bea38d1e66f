"""Screenshots over DevTools: the same bytes as Playwright's, and never a blinking caret."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser
from mmina.recorder.devtools import PageSessions, evaluate
from mmina.recorder.shots import CARET_MAY_SHOW, Screenshots

PAGES = {
    "plain.html": "<h1>Plain</h1><p>Some text and a <a href='#'>link</a>.</p>",
    "input.html": "<p>Search</p><input id=q value='hello'>",
    "editable.html": "<div id=q contenteditable>edit me</div>",
    "frame.html": "<p>Outer</p><iframe src='input.html' width=400 height=100></iframe>",
    "shadow.html": "<x-field></x-field><script>customElements.define('x-field', class extends HTMLElement {"
    " constructor() { super(); this.attachShadow({mode: 'open'}).innerHTML = '<input id=q>'; } })"
    "</script>",
    "controls.html": "<select id=select><option>one</option><option>two</option></select>"
    "<input id=box type=checkbox><input id=day type=date><button id=button>Go</button>"
    "<input id=odd type=no-such-type><input id=search type=search>",
}
CLICKED = {
    "input.html": "#q",
    "editable.html": "#q",
    "frame.html": "iframe >> internal:control=enter-frame >> #q",
    "shadow.html": "#q",
}
"""What a user clicks on each page (the caret then shows in it, blinking)."""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("shots")
    for name, body in PAGES.items():
        (root / name).write_text(f"<!doctype html><html><body>{body}</body></html>")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def session() -> Iterator[BrowserSession]:
    session = BrowserSession(BrowserConfig(viewport_width=640, viewport_height=480))
    yield session
    session.close()


def _opened(session: BrowserSession, url: str) -> EpisodeBrowser:
    browser = session.episode(None)
    browser.open((url,))
    return browser


def test_a_devtools_screenshot_has_the_bytes_of_playwrights(session: BrowserSession, site: str) -> None:
    browser = _opened(session, f"{site}/plain.html")
    try:
        ours = session.run(browser.tabs.shots.take(browser.tabs.page))
        theirs = session.run(browser.tabs.page.screenshot(type="jpeg", quality=80))
    finally:
        browser.close()
    assert ours[:2] == b"\xff\xd8" and ours == theirs


@pytest.mark.parametrize("width,height", [(1280, 2048), (390, 844)])
def test_a_capture_from_the_view_has_the_bytes_of_playwrights_from_the_surface(
    site: str, width: int, height: int
) -> None:
    """mmina captures the page's view (``fromSurface`` false, which leaves no frame buffers
    behind in the GPU process), Playwright its compositor surface: the same bytes, for a tall
    and a narrow viewport, a scrolled page with a frame in it."""
    session = BrowserSession(BrowserConfig(viewport_width=width, viewport_height=height))
    try:
        browser = _opened(session, f"{site}/frame.html")
        try:
            session.run(
                browser.tabs.page.evaluate(
                    "document.body.insertAdjacentHTML('beforeend', '<p>' + 'Line of text. '.repeat(6000) + '</p>')"
                )
            )
            session.run(browser.tabs.page.mouse.wheel(0, 600))
            session.run(browser.tabs.page.wait_for_function("window.scrollY > 0"))
            ours = session.run(browser.tabs.shots.take(browser.tabs.page))
            theirs = session.run(browser.tabs.page.screenshot(type="jpeg", quality=80))
        finally:
            browser.close()
    finally:
        session.close()
    assert ours == theirs


@pytest.mark.parametrize("page", ["input.html", "editable.html", "frame.html", "shadow.html"])
def test_a_focused_caret_never_makes_two_screenshots_differ(
    session: BrowserSession, site: str, page: str
) -> None:
    """The caret blinks about twice a second: shots over 1.5 s would catch both of its states."""
    browser = _opened(session, f"{site}/{page}")
    try:
        session.run(browser.tabs.page.locator(CLICKED[page]).click())
        seen = set()
        for _ in range(12):
            seen.add(session.run(browser.tabs.shots.take(browser.tabs.page)))
            time.sleep(0.13)
    finally:
        browser.close()
    assert len(seen) == 1


@pytest.mark.parametrize(
    "focused,caret",
    [
        ("#select", False),
        ("#box", False),
        ("#day", False),
        ("#button", False),
        ("#odd", True),
        ("#search", True),
    ],
)
def test_only_a_focused_element_that_takes_text_sends_the_screenshot_to_playwright(
    session: BrowserSession, site: str, focused: str, caret: bool
) -> None:
    """A select, a checkbox, a date's fields and a button show no caret (their screenshots are
    taken over DevTools, and do not blink: see the test above); any text field does, one of a
    type Chromium does not know included."""
    browser = _opened(session, f"{site}/controls.html")
    try:
        session.run(browser.tabs.page.focus(focused))
        devtools = session.run(browser.tabs.shots.sessions.get(browser.tabs.page))
        assert devtools is not None
        assert session.run(evaluate(devtools, CARET_MAY_SHOW)) is caret
        seen = set()
        for _ in range(12):
            seen.add(session.run(browser.tabs.shots.take(browser.tabs.page)))
            time.sleep(0.13)
    finally:
        browser.close()
    assert len(seen) == 1


def test_screenshots_follow_the_pages_of_the_context(session: BrowserSession, site: str) -> None:
    """A closed tab's DevTools session is let go; a new tab gets its own, also one made
    outside the episode's knowledge (a Screenshots of its own over the context's pages)."""
    browser = _opened(session, f"{site}/plain.html")
    try:
        shots, first_page = Screenshots(PageSessions(browser.context), 80), browser.tabs.page
        first = session.run(shots.take(first_page))
        second_page = session.run(browser.context.new_page())
        session.run(second_page.goto(f"{site}/input.html"))
        other = session.run(shots.take(second_page))
        assert shots.sessions.held == 2
        session.run(second_page.close())
        again = session.run(shots.take(first_page))
        assert shots.sessions.held == 1
    finally:
        browser.close()
    assert first == again != other
