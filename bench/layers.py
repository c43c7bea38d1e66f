"""The layers of a step at 32 in flight: the epoch's own episodes done again with less of mmina.

After the epoch's run at 32 in flight on the MMInA-length tasks, its episodes (each step's URL
and action, read from the store) are done again at the same number in flight, each step
waiting as long as the model did, in four ways, with the CPU of every process counted
(``bench/cputree.py``):

* **a bare Playwright harness**: a context per episode, a ``goto`` whenever the next step's URL
  differs, each observation its accessibility tree (``aria_snapshot``) and its JPEG screenshot —
  the cheapest harness that takes the same observations of the same pages;
* **a bare Playwright harness, the episodes' actions**: the same harness acting as a Playwright
  agent harness does (the target found in the observed tree by the recorded target's box and
  acted on by its ``aria-ref`` locator, typed with ``keyboard.type`` and Enter as ``"\\n"`` as
  MMInA's harness types, ``scrollBy`` a viewport, the history), each observation once the page
  the recording observed next has loaded — the floor of any Playwright harness that acts,
  recording nothing;
* **mmina's recorder, gotos**: the same through the recorder's browser (``EpisodeBrowser``:
  settling, the page's facts, element ids, the network tap, the HAR, seeding, freezing while
  the agent thinks) — what the recorder adds to a bare harness;
* **mmina's recorder, the episodes' actions**: the recorded actions (typing, clicking,
  scrolling, going) in place of the gotos — what acting adds to going to the same pages.

The epoch's run itself is the last layer: the agent and its model calls, the store, the
traffic's capture and redaction, the verdicts. Every way observes each step's page and the
terminal page, as an episode does, and the figures are core-seconds per step of the run (its
steps), so all of them compare: the distance between two is what the upper one adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import operator
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError

from bench.cputree import CpuSplit, CpuTree
from bench.floors import VIEWPORT, bare_browser, find_executable, playwright_observation, stop_browser
from mmina.actions.grammar import ActionKind, parse_agent_output
from mmina.errors import MminaError
from mmina.executors.pool import in_flight as in_flight_on_threads
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode_browser import EpisodeBrowser
from mmina.recorder.seeding import RECORDED_SEEDING, Seeding
from mmina.store import Store
from mmina.store.sql import run_query

Box = dict[str, float]
Step = tuple[str, str, Box | None]
"""A step as recorded: the URL its page was observed at, its action (as rendered) and the box of
the element the action targeted (``steps.target_box``)."""
Episode = list[Step]

BARE, BARE_ACTIONS = "a bare Playwright harness", "a bare Playwright harness, the episodes' actions"
GOTOS, ACTIONS = "mmina's recorder, gotos", "mmina's recorder, the episodes' actions"
BARE_RUN_S = 1_800.0
"""The bound on the bare harness's whole run (~130 s for the epoch's 128 episodes at 32 in flight)."""
BARE_CALL_S = 15.0
"""The bound on one call of the bare harness (an action, an observation): a page that never
answers costs an episode this long, not the run."""
LOAD_S = 10.0
"""How long the bare harness waits, after an action, for the page the recording observed next
(its URL, loaded) before observing the page as it is: an observation taken at once could read
the page a submission is leaving (a harness that acts must wait for what its action started)."""


def recorded(store: Store, run_id: str) -> list[Episode]:
    """The run's episodes as their steps' URLs, actions and targets' boxes, in order."""
    rows = run_query(
        store,
        f"select episode_id, url, coalesce(action, ''), target_box from steps "
        f"where run_id = '{run_id}' order by episode_id, step_index",
    ).rows
    found: dict[str, Episode] = {}
    for episode_id, url, action, box in rows:
        found.setdefault(episode_id, []).append((url, action, box))
    return list(found.values())


def layers(
    episodes: list[Episode],
    web_args: tuple[str, ...],
    apart: dict[int, str],
    in_flight: int,
    think_s: float,
    folder: Path,
) -> dict[str, CpuSplit]:
    """The CPU of ``episodes`` done in each way, ``in_flight`` at a time."""
    session = BrowserSession(BrowserConfig(extra_args=web_args))
    try:
        bare = session.run(bare_browser(find_executable(), web_args))
        try:
            ways: dict[str, Callable[[], None]] = {
                BARE: lambda: _through_bare(
                    session, bare[1], episodes, in_flight, think_s, folder, acting=False
                ),
                BARE_ACTIONS: lambda: _through_bare(
                    session, bare[1], episodes, in_flight, think_s, folder, acting=True
                ),
                GOTOS: lambda: _through_recorder(session, episodes, in_flight, think_s, folder, acting=False),
                ACTIONS: lambda: _through_recorder(
                    session, episodes, in_flight, think_s, folder, acting=True
                ),
            }
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


def _through_bare(
    session: BrowserSession,
    browser: Any,
    episodes: list[Episode],
    in_flight: int,
    think_s: float,
    folder: Path,
    acting: bool,
) -> None:
    """The episodes by the bare harness; the URLs each observed, in ``folder/bare-<way>-<n>.urls``
    (as the recorder's ways leave their HARs there)."""
    observed = session.run(
        _bare_run(browser, episodes, in_flight, think_s, acting),
        time.monotonic() + BARE_RUN_S,
        "the bare harness's episodes",
    )
    way = "actions" if acting else "gotos"
    for number, urls in enumerate(observed):
        (folder / f"bare-{way}-{number}.urls").write_text("".join(f"{url}\n" for url in urls))


async def _bare_run(
    browser: Any, episodes: list[Episode], in_flight: int, think_s: float, acting: bool
) -> list[list[str]]:
    """Each episode's observed URLs, in the order of ``episodes``."""
    todo = list(enumerate(episodes))
    observed: list[list[str]] = [[] for _ in episodes]

    async def worker() -> None:
        while todo:
            number, steps = todo.pop()
            observed[number] = await _bare_episode(browser, steps, think_s, acting)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return observed


async def _bare_episode(browser: Any, steps: Episode, think_s: float, acting: bool) -> list[str]:
    """One episode by the bare harness (its actions, or gotos to its pages); the URL of each
    page it observed, the terminal one last."""
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        page = await context.new_page()
        devtools = await context.new_cdp_session(page)
        await page.goto(steps[0][0])
        observed = []
        for index, (url, action, box) in enumerate(steps):
            tree = await _bare_observation(page, devtools)
            observed.append(page.url)
            await asyncio.sleep(think_s)
            following = steps[index + 1][0] if index + 1 < len(steps) else url
            if acting:
                await _bounded(_bare_action(page, tree, action, box))
                reached = functools.partial(operator.eq, following)
                await _bounded(page.wait_for_url(reached, wait_until="load"), LOAD_S)
            elif following != url:
                await page.goto(following)
        await _bare_observation(page, devtools)  # the terminal observation
        return [*observed, page.url]
    finally:
        await context.close()


async def _bare_observation(page: Any, devtools: Any) -> str:
    """The page's tree, observed (read again once if the page navigated while it was read)."""
    for _ in range(2):
        with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
            return await asyncio.wait_for(playwright_observation(page, devtools), BARE_CALL_S)
    return ""


async def _bounded(call: Awaitable[Any], seconds: float = BARE_CALL_S) -> None:
    """``call``, within ``seconds``; an error or a timeout ends it (a bare harness goes on either way)."""
    with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
        await asyncio.wait_for(call, seconds)


async def _bare_action(page: Any, tree: str, text: str, box: Box | None) -> None:
    """``text`` done as a Playwright agent harness does it: the target is the element of the
    observed tree at the recorded target's box, acted on by its ``aria-ref`` locator (typing:
    clicked, then ``keyboard.type``, Enter as ``"\\n"``, as MMInA's harness types). Not done: a
    target the tree does not show, ``stop`` and the tab actions (the fixture tasks have none)."""
    action = parse_agent_output(f"```{text}```") if text else None
    if action is None:
        return
    if action.kind in TARGETED:
        ref = _ref_at(tree, box)
        if ref is None:
            return
        target = page.locator(f"aria-ref={ref}")
        await (target.hover() if action.kind is ActionKind.HOVER else target.click())
        if action.kind is ActionKind.TYPE:
            await page.keyboard.type((action.text or "") + ("\n" if action.press_enter else ""))
    elif action.kind is ActionKind.SCROLL:
        await page.evaluate(
            f"window.scrollBy(0, {-1 if action.direction == 'up' else 1} * window.innerHeight)"
        )
    elif action.kind is ActionKind.PRESS:
        await page.keyboard.press(action.key or "")
    elif action.kind in GOING:
        await GOING[action.kind](page, action)


def _ref_at(tree: str, box: Box | None) -> str | None:
    """The ``ref`` of the tree's element whose box is nearest ``box`` (the recorder's boxes and
    Playwright's are the same CSS pixels), if one is within a few pixels."""
    if box is None:
        return None
    wanted = (box["x"], box["y"], box["width"], box["height"])
    found = [
        (sum(abs(float(a) - b) for a, b in zip(m["box"].split(","), wanted)), m["ref"])
        for m in REF_AND_BOX.finditer(tree)
    ]
    distance, ref = min(found, default=(NEAR_PX, None))
    return ref if distance < NEAR_PX else None


REF_AND_BOX = re.compile(
    r"\[ref=(?P<ref>[^\]]+)\](?:[^\n]*?)\[box=(?P<box>[-\d.]+,[-\d.]+,[-\d.]+,[-\d.]+)\]"
)
NEAR_PX = 8.0
TARGETED = frozenset({ActionKind.CLICK, ActionKind.HOVER, ActionKind.TYPE})
GOING: dict[ActionKind, Callable[[Any, Any], Awaitable[Any]]] = {
    ActionKind.GOTO: lambda page, action: page.goto(action.url or "", wait_until="commit"),
    ActionKind.GO_BACK: lambda page, _action: page.go_back(wait_until="commit"),
    ActionKind.GO_FORWARD: lambda page, _action: page.go_forward(wait_until="commit"),
}


def _through_recorder(
    session: BrowserSession,
    episodes: list[Episode],
    in_flight: int,
    think_s: float,
    folder: Path,
    acting: bool,
) -> None:
    way = "actions" if acting else "gotos"

    def one(numbered: tuple[int, Episode]) -> None:
        number, steps = numbered
        browser = session.episode(
            folder / f"{way}-{number}.har.zip",
            paint_marks=False,
            seed=Seeding(seed=0, scheme=RECORDED_SEEDING),
        )
        try:
            _recorder_episode(browser, steps, think_s, session.config.freeze_after_s, acting)
        finally:
            browser.close()

    for _ in in_flight_on_threads(one, enumerate(episodes), in_flight):
        pass


def _recorder_episode(
    browser: EpisodeBrowser, steps: Episode, think_s: float, freeze_after: float | None, acting: bool
) -> None:
    browser.open((steps[0][0],))
    for index, (url, action, _box) in enumerate(steps):
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
