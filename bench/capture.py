"""Before and after, in one run: an observation's parts read one after another with
Playwright's screenshot (as mmina did until the parts were read side by side, the screenshot
over DevTools) against the recorder's own observation, on the same freshly opened fixture
pages, the two ways interleaved so the machine's noise falls on both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from bench.results import Section, Target, ratio
from mmina.fixtures.web import FixtureWeb
from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser
from mmina.recorder.observing import images_in_view
from mmina.tasks.taskcheck import load_suite

Way = Callable[[BrowserSession, EpisodeBrowser], float]


def one_after_another(session: BrowserSession, browser: EpisodeBrowser) -> float:
    """Milliseconds for tree, images, Playwright's screenshot and titles, each awaited before
    the next (the recorder's observation until it read them side by side over DevTools)."""
    tabs, started = browser.tabs, time.perf_counter()
    browser.tree()
    session.run(images_in_view(tabs))
    session.run(tabs.page.screenshot(type="jpeg", quality=session.config.jpeg_quality))
    for page in tabs.pages:
        session.run(page.title())
    return (time.perf_counter() - started) * 1e3


def side_by_side(session: BrowserSession, browser: EpisodeBrowser) -> float:
    """Milliseconds of the recorder's observation on the critical path (``observe_ms``)."""
    return browser.observe(0, "")[1]["observe_ms"]


def start_pages(limit: int) -> list[str]:
    urls: list[str] = []
    for task in load_suite().tasks:
        urls += [u for u in task.start_urls if u not in urls]
    return urls[:limit]


def _sample(session: BrowserSession, url: str, way: Way) -> float:
    browser = session.episode(None)
    try:
        browser.open((url,))
        return way(session, browser)
    finally:
        browser.close()


def capture_ab_section(pages: int, rounds: int) -> Section:
    section = Section("capture A/B")
    times: dict[str, list[float]] = {"one after another": [], "side by side": []}
    ways: dict[str, Way] = {"one after another": one_after_another, "side by side": side_by_side}
    with FixtureWeb() as web:
        session = BrowserSession(BrowserConfig(set_of_marks=False, extra_args=tuple(web.chromium_args())))
        try:
            for round_ in range(rounds):
                for url in start_pages(pages):
                    order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
                    for name in order:
                        times[name].append(_sample(session, url, ways[name]))
        finally:
            session.close()
    before, after = (statistics.median(times[n]) for n in ways)
    for name, values in times.items():
        section.add(
            f"{name}, p50",
            round(statistics.median(values), 1),
            "ms",
            note=f"{len(values)} observations of freshly opened pages",
        )
    section.add(
        "side by side / one after another",
        round(ratio(after, before), 2),
        "×",
        Target(1.0),
        note="the observation's critical path, same pages, interleaved",
    )
    return section
