"""The layers of a step at 32 in flight: the epoch's own episodes done again with less of mmina.

After the epoch's run at 32 in flight on the MMInA-length tasks, its episodes (each step's URL
and action, read from the store) are done again at the same number in flight, each step
waiting as long as the model did, in three ways, with the CPU of every process counted
(``bench/cputree.py``):

* **a bare Playwright harness**: a context per episode, a ``goto`` whenever the next step's URL
  differs, each observation its accessibility tree (``aria_snapshot``) and its JPEG screenshot —
  the cheapest harness that takes the same observations of the same pages;
* **mmina's recorder, gotos**: the same through the recorder's browser (``EpisodeBrowser``:
  settling, the page's facts, element ids, the network tap, the HAR, seeding, freezing while
  the agent thinks) — what the recorder adds to a bare harness;
* **mmina's recorder, the episodes' actions**: the recorded actions (typing, clicking,
  scrolling, going) in place of the gotos — what acting adds to going to the same pages.

The epoch's run itself is the fourth layer: the agent and its model calls, the store, the
traffic's capture and redaction, the verdicts. Every way observes each step's page and the
terminal page, as an episode does, and the figures are core-seconds per step of the run (its
steps), so the four compare: the distance between two is what the upper one adds.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmina.actions import parse_agent_output
from mmina.errors import MminaError
from mmina.pool import in_flight as in_flight_on_threads
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode_browser import EpisodeBrowser
from mmina.store import Store
from mmina.store.sql import run_query

from bench.cputree import CpuSplit, CpuTree
from bench.floors import VIEWPORT, bare_browser, find_executable, playwright_observation, stop_browser

Step = tuple[str, str]
"""A step as recorded: the URL its page was observed at, and its action (as rendered)."""
Episode = list[Step]

BARE, GOTOS, ACTIONS = "a bare Playwright harness", "mmina's recorder, gotos", "mmina's recorder, the episodes' actions"
BARE_RUN_S = 1_800.0
"""The bound on the bare harness's whole run (~100 s for the epoch's 128 episodes at 32 in flight)."""


def recorded(store: Store, run_id: str) -> list[Episode]:
    """The run's episodes as their steps' URLs and actions, in order."""
    rows = run_query(store, f"select episode_id, url, coalesce(action, '') from steps where run_id = '{run_id}' "
                            "order by episode_id, step_index").rows
    found: dict[str, Episode] = {}
    for episode_id, url, action in rows:
        found.setdefault(episode_id, []).append((url, action))
    return list(found.values())


def layers(episodes: list[Episode], web_args: tuple[str, ...], apart: dict[int, str], in_flight: int,
           think_s: float, folder: Path) -> dict[str, CpuSplit]:
    """The CPU of ``episodes`` done in each way, ``in_flight`` at a time."""
    session = BrowserSession(BrowserConfig(extra_args=web_args))
    try:
        bare = session.run(bare_browser(find_executable(), web_args))
        try:
            ways: dict[str, Callable[[], None]] = {
                BARE: lambda: session.run(_bare_run(bare[1], episodes, in_flight, think_s),
                                          time.monotonic() + BARE_RUN_S, "the bare harness's episodes"),
                GOTOS: lambda: _through_recorder(session, episodes, in_flight, think_s, folder, acting=False),
                ACTIONS: lambda: _through_recorder(session, episodes, in_flight, think_s, folder, acting=True)}
            return {name: _counted(way, apart) for name, way in ways.items()}
        finally:
            session.run(stop_browser(*bare))
    finally:
        session.close()


def _counted(way: Callable[[], None], apart: dict[int, str]) -> CpuSplit:
    tree = CpuTree(apart)
    with tree.sampling():
        way()
    return tree.split


async def _bare_run(browser: Any, episodes: list[Episode], in_flight: int, think_s: float) -> None:
    todo = list(episodes)

    async def worker() -> None:
        while todo:
            await _bare_episode(browser, todo.pop(), think_s)

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def _bare_episode(browser: Any, steps: Episode, think_s: float) -> None:
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    devtools = await context.new_cdp_session(page)
    await page.goto(steps[0][0])
    for index, (url, _) in enumerate(steps):
        await playwright_observation(page, devtools)
        await asyncio.sleep(think_s)
        if index + 1 < len(steps) and steps[index + 1][0] != url:
            await page.goto(steps[index + 1][0])
    await playwright_observation(page, devtools)  # the terminal observation
    await context.close()


def _through_recorder(session: BrowserSession, episodes: list[Episode], in_flight: int, think_s: float,
                      folder: Path, acting: bool) -> None:
    way = "actions" if acting else "gotos"

    def one(numbered: tuple[int, Episode]) -> None:
        number, steps = numbered
        browser = session.episode(folder / f"{way}-{number}.har.zip", paint_marks=False, seed=0)
        try:
            _recorder_episode(browser, steps, think_s, session.config.freeze_after_s, acting)
        finally:
            browser.close()

    for _ in in_flight_on_threads(one, enumerate(episodes), in_flight):
        pass


def _recorder_episode(browser: EpisodeBrowser, steps: Episode, think_s: float, freeze_after: float | None,
                      acting: bool) -> None:
    browser.open((steps[0][0],))
    for index, (url, action) in enumerate(steps):
        browser.observe(index, "")
        with browser.thinking(freeze_after):
            time.sleep(think_s)
        following = steps[index + 1][0] if index + 1 < len(steps) else url
        text = action if acting else (f"goto [{following}]" if following != url else "")
        if text:
            try:
                browser.execute(parse_agent_output(f"```{text}```"))
            except MminaError:
                pass  # the episode recorded this action's failure too
    browser.observe(len(steps), "")  # the terminal observation
