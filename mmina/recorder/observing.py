"""Observing the active tab: its accessibility tree, the images in view, the screenshot and
the tabs' titles, read side by side, with the set-of-marks image painted on another thread.

What mmina asks of the active page's document itself — its images in view, its title and
whether anything animates (which decides what a freeze does, ``freezing.py``) — is one script
over the page's DevTools session (:data:`PAGE_FACTS`): each call into the browser costs ~2
core-milliseconds one episode at a time whatever it asks (mmina's Python, Playwright's driver,
the browser). The screenshot's own question (may a caret show? ``shots.py``) stays a call of its
own, side by side with it, so the capture never waits for the images' layout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page

from mmina.observations.observation import Element, Observation, PageImage, Tab, flatten_snapshot
from mmina.recorder.devtools import call, evaluate
from mmina.recorder.freezing import ANIMATING
from mmina.recorder.tabs import Capture, Tabs, title_of
from mmina.store.marks import paint

T = TypeVar("T")
IMAGES_IN_VIEW = """() => Array.from(document.images)
  .filter(i => i.complete && i.naturalWidth > 0)
  .map(i => { const r = i.getBoundingClientRect();
              return {src: i.currentSrc || i.src, alt: i.alt || "", x: r.x, y: r.y, \
width: r.width, height: r.height}; })
  .filter(b => b.width > 0 && b.height > 0 && b.x < innerWidth && b.y < innerHeight && \
b.x + b.width > 0 && b.y + b.height > 0)"""
PAGE_FACTS = f"""({{images: ({IMAGES_IN_VIEW})(), title: document.title, animating: ({ANIMATING})()}})"""
"""The active page's main document, asked in one call: its images in view, its title and
whether an animation runs in it."""


@dataclass(frozen=True)
class PageFacts:
    """What :data:`PAGE_FACTS` found; where it could not be asked, what is safe to assume
    (animations may run, no images, the title asked of Playwright)."""

    images: list[dict[str, Any]] = field(default_factory=list)
    title: str | None = None
    animating: bool = True

    @classmethod
    def read(cls, value: Any) -> PageFacts:
        """The facts from the script's value (nothing known from a value of another shape: a
        page whose own script changed what the builtins return)."""
        if not isinstance(value, dict) or not isinstance(value.get("images"), list):
            return cls()
        title = value.get("title")
        return cls(
            value["images"], title if isinstance(title, str) else None, value.get("animating") is not False
        )


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


async def observe(tabs: Tabs, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
    """Capture the observation of the active tab, timing each part in milliseconds.

    The set-of-marks screenshot is painted on a worker thread while the agent chooses its
    action (``Observation.resolve_marks`` waits for it); ``som_ms`` is that thread's time
    and is not part of ``observe_ms``.

    A read that fails (a page still navigating, a renderer that does not answer) is tried
    once more after the page settled; if it fails again the step gets an empty observation
    and ``tabs.observe_error`` says why, so the episode goes on. A closed browser is raised.
    """
    started = time.perf_counter()
    tabs.observe_error = None
    try:
        return await _observe(tabs, step_index, intent)
    except PlaywrightError as exc:
        tabs.raise_if_gone(exc)
        first = str(exc).splitlines()[0]
    await tabs.settle()
    try:
        return await _observe(tabs, step_index, intent)
    except PlaywrightError as exc:
        tabs.raise_if_gone(exc)
        tabs.observe_error = f"observation failed: {first}; again: {str(exc).splitlines()[0]}"
    observation = Observation(
        step_index=step_index,
        url=tabs.page.url,
        title="",
        tabs=[Tab(p.url, "") for p in tabs.pages],
        active_tab=tabs.active,
        tree_text="",
        elements=[],
        screenshot=None,
        intent=intent,
    )
    return observation, {"observe_ms": (time.perf_counter() - started) * 1e3}


async def read_tree(tabs: Tabs) -> tuple[str, list[Element]]:
    """The active tab's accessibility tree as the agent sees it, and its elements (whose ids
    the next action resolves)."""
    text, elements = flatten_snapshot(await tabs.page.aria_snapshot(mode="ai", boxes=True))
    tabs.ids.show(elements)
    return text, elements


async def _observe(tabs: Tabs, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
    """The parts are read side by side: the tree and the page's facts are script in the
    renderer, the screenshot mostly raster and encoding elsewhere, so the critical path is about
    the slowest."""
    timer = _Timer()
    facts = asyncio.ensure_future(page_facts(tabs))
    try:
        (tree_text, elements), images, screenshot, titles = await _side_by_side(
            timer.time("tree_ms", read_tree(tabs)),
            timer.time("images_ms", _images(tabs, facts)),
            timer.time("screenshot_ms", _screenshot(tabs)),
            _titles(tabs, facts),
        )
    finally:
        facts.cancel()  # when the caller's deadline cancelled the parts before it ended
    if (known := facts.result()) is not None:
        tabs.freezing.saw(tabs.page, known.animating)
    tab_list = [Tab(p.url, title) for p, title in zip(tabs.pages, titles)]
    observation = Observation(
        step_index=step_index,
        url=tabs.page.url,
        title=tab_list[tabs.active].title,
        tabs=tab_list,
        active_tab=tabs.active,
        tree_text=tree_text,
        elements=elements,
        screenshot=screenshot,
        intent=intent,
        images=images,
    )
    timings = timer.done("observe_ms")
    if screenshot is not None and tabs.capture.set_of_marks:
        painting = tabs.painter.submit(_marks, tabs.capture, screenshot, elements, timings)
        observation.pending_marks = painting.result
    return observation, timings


async def page_facts(tabs: Tabs) -> PageFacts | None:
    """The active page's :data:`PAGE_FACTS` over its DevTools session; None when it has none
    (each part is then asked of Playwright), nothing known when the script failed (a document
    being replaced, a renderer that does not answer: it is not asked again)."""
    session = await tabs.sessions.get(tabs.page)
    if session is None:
        return None
    try:
        return PageFacts.read(await evaluate(session, PAGE_FACTS))
    except (TimeoutError, PlaywrightError):
        return PageFacts()


async def _images(tabs: Tabs, facts: Awaitable[PageFacts | None]) -> list[PageImage]:
    known = await facts
    return await images_in_view(tabs, known.images if known is not None else None)


async def _titles(tabs: Tabs, facts: Awaitable[PageFacts | None]) -> list[str]:
    """Every tab's title: the active one's from its facts, when they were read."""
    known, active = await facts, tabs.page
    title = known.title if known is not None else None
    return await asyncio.gather(
        *(_known(title) if title is not None and page is active else title_of(page) for page in tabs.pages)
    )


async def _known(value: T) -> T:
    return value


async def images_in_view(tabs: Tabs, main: list[dict[str, Any]] | None = None) -> list[PageImage]:
    """The images in view in the page and in every frame of it, boxes in the page's viewport;
    ``main``: the main frame's, when already read (:data:`PAGE_FACTS`)."""
    found: list[PageImage] = []
    for frame in tabs.page.frames:
        offset = await _frame_offset(tabs.page, frame)
        if offset is None:
            continue
        try:
            images = (
                main if main is not None and frame is tabs.page.main_frame else await _images_of(tabs, frame)
            )
        except (TimeoutError, PlaywrightError):  # the frame went away while we looked
            continue
        found += [image for i in images if (image := page_image(i, offset)) is not None]
    width, height = tabs.capture.viewport_width, tabs.capture.viewport_height
    return [i for i in found if i.x < width and i.y < height and i.x + i.width > 0 and i.y + i.height > 0]


def page_image(value: Any, offset: tuple[float, float]) -> PageImage | None:
    """An image the script listed, its box moved by the frame's ``offset``; None for a value of
    another shape (a page whose own script replaced the builtins the listing uses)."""
    try:
        src, alt, x, y, width, height = (value[k] for k in ("src", "alt", "x", "y", "width", "height"))
    except (TypeError, KeyError):
        return None
    numbers = (x, y, width, height)
    if (
        not isinstance(src, str)
        or not isinstance(alt, str)
        or not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers)
    ):
        return None
    return PageImage(src=src, alt=alt, x=x + offset[0], y=y + offset[1], width=width, height=height)


async def _images_of(tabs: Tabs, frame: Frame) -> list[dict[str, Any]]:
    """One frame's images in view: the main frame's over the page's DevTools session (no
    Playwright script installed into the page for it, ``devtools.py``), another frame's through
    Playwright (which finds its document, in this process or another)."""
    session = await tabs.sessions.get(tabs.page) if frame is tabs.page.main_frame else None
    if session is None:
        return await frame.evaluate(IMAGES_IN_VIEW)
    return await evaluate(session, call(IMAGES_IN_VIEW))


async def _screenshot(tabs: Tabs) -> bytes | None:
    """The viewport as JPEG (see ``mmina.recorder.shots``)."""
    if not tabs.capture.screenshots:
        return None
    return await tabs.shots.take(tabs.page)


def _marks(capture: Capture, screenshot: bytes, elements: list[Element], timings: dict[str, float]) -> bytes:
    started = time.perf_counter()
    painted = paint(
        screenshot, elements, capture.viewport_width, capture.viewport_height, capture.jpeg_quality
    )
    timings["som_ms"] = (time.perf_counter() - started) * 1e3
    return painted


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


async def _side_by_side(*parts: Awaitable[Any]) -> list[Any]:
    """Await every part together; when some fail, raise the first failure once all have ended
    (so no part is left running, and no failure goes unretrieved)."""
    results = await asyncio.gather(*parts, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return results
