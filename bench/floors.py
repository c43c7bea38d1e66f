"""The floor under a step: one episode's work done by Chromium alone, by Playwright, and by mmina.

An episode of the epoch bench's shape — a new context, its start page, four navigations with an
observation before each and a terminal one, the context closed — is done on the fixture web's
shop, one episode at a time, in four ways, with the CPU of every process counted
(``bench/cputree.py``):

* **Chromium, no screenshots**: the navigations alone, driven over Chromium's DevTools pipe
  with no Playwright (:class:`DevToolsPipe`) — what the pages themselves cost;
* **Chromium**: the same with the JPEG screenshot of every observation — what any harness pays
  for these pages at this viewport;
* **Playwright**: the same through Playwright, each observation with its accessibility tree
  (``aria_snapshot``, the text the agent reads) — a bare harness on Playwright;
* **mmina**: the same episode through the recorder's browser (``EpisodeBrowser``: settling,
  the images in view, titles, element ids, the network tap, the HAR, seeded randomness).

Figures are core-seconds per step (the episode's CPU over its four actions), so they compare
with the epoch's per-step figure: the distance between two rows is what the lower layer cannot
remove, and what the upper one adds.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright
from playwright.sync_api import sync_playwright

from bench.cputree import KINDS, CpuTree
from mmina.actions.grammar import parse_agent_output
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.chromium import find_chromium, launch_args, launch_chromium
from mmina.recorder.shots import CAPTURE

START = "http://shop.mmina.test/"
NAVIGATIONS = ("http://shop.mmina.test/search?q=tea", START, "http://shop.mmina.test/search?q=lamp", START)
VIEWPORT = {"width": 1280, "height": 2048}
JPEG = {**CAPTURE, "quality": 80}
"""The recorder's own capture (``mmina.recorder.shots``: from the view), so the floors differ from
mmina by what it adds, not by how it captures."""
LOAD_TIMEOUT_S = 30.0

Episode = Callable[[], None]
Floor = dict[str, float]
"""Core-seconds per step by process kind, and ``total``."""


class DevToolsPipe:
    """Chromium driven over ``--remote-debugging-pipe`` (file descriptors 3 and 4), no Playwright:
    commands are JSON messages ended by a NUL byte, events come in between their answers."""

    def __init__(self, executable: str, args: list[str]) -> None:
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()
        self._folder = tempfile.TemporaryDirectory(prefix="mmina-floor-")
        self._process = subprocess.Popen(
            [
                executable,
                *args,
                "--headless",
                "--no-sandbox",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._folder.name}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=lambda: (os.dup2(to_browser, 3), os.dup2(from_browser, 4)),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next = b"", 0
        self._events: list[dict[str, Any]] = []
        self.send("Browser.getVersion")

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """The answer to one command (events received meanwhile are kept for :meth:`wait_for`)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while (reply := self._receive()).get("id") != self._next:
            self._events.append(reply)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply["result"])

    def wait_for(self, method: str, session: str) -> None:
        """Until the event ``method`` of ``session`` (kept or still to come)."""
        for index, event in enumerate(self._events):
            if (event.get("method"), event.get("sessionId")) == (method, session):
                del self._events[index]
                return
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            event = self._receive()
            if (event.get("method"), event.get("sessionId")) == (method, session):
                return
        raise TimeoutError(f"no {method} within {LOAD_TIMEOUT_S:g} s")

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        os.close(self._write)
        os.close(self._read)
        self._folder.cleanup()


def chromium_episode(pipe: DevToolsPipe, screenshots: bool) -> None:
    """One episode over the pipe: a context, a page at the viewport, the navigations, the screenshots."""
    context = pipe.send("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
    target = pipe.send("Target.createTarget", {"url": "about:blank", "browserContextId": context})["targetId"]
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    pipe.send("Page.enable", session=session)
    pipe.send(
        "Emulation.setDeviceMetricsOverride",
        {**VIEWPORT, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    for url in (START, *NAVIGATIONS):
        pipe.send("Page.navigate", {"url": url}, session=session)
        pipe.wait_for("Page.loadEventFired", session)
        if screenshots:
            pipe.send("Page.captureScreenshot", JPEG, session=session)
    pipe.send("Target.disposeBrowserContext", {"browserContextId": context})


async def playwright_episode(browser: Any) -> None:
    """One episode through Playwright: each observation its accessibility tree and its screenshot."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    devtools = await context.new_cdp_session(page)
    await page.goto(START)
    for url in (*NAVIGATIONS, None):
        await playwright_observation(page, devtools)
        if url:
            await page.goto(url)
    await context.close()


async def playwright_observation(page: Any, devtools: Any) -> str:
    """What a bare Playwright harness observes: the accessibility tree the agent reads (returned:
    each element with its ``[ref=…]`` and ``[box=x,y,width,height]``) and the JPEG screenshot
    (over the page's DevTools session, as the recorder captures it)."""
    tree: str = await page.aria_snapshot(mode="ai", boxes=True)
    await devtools.send("Page.captureScreenshot", JPEG)
    return tree


def mmina_episode(session: BrowserSession, folder: Path) -> None:
    """One episode through the recorder's browser, its HAR written as a recording's is."""
    browser = session.episode(folder / "episode.har.zip", paint_marks=False)
    browser.open((START,))
    for index, url in enumerate(NAVIGATIONS):
        browser.observe(index, "floor")
        browser.execute(parse_agent_output(f"```goto [{url}]```"))
    browser.observe(len(NAVIGATIONS), "floor")
    browser.close()


def measured(episode: Episode, episodes: int) -> Floor:
    """Core-seconds per step of ``episode`` (after one unmeasured episode to warm up)."""
    episode()
    tree = CpuTree()
    with tree.sampling():
        for _ in range(episodes):
            episode()
    steps = episodes * len(NAVIGATIONS)
    return {**{k: tree.split.seconds.get(k, 0.0) / steps for k in KINDS}, "total": tree.split.side() / steps}


@contextmanager
def ways(web_args: tuple[str, ...]) -> Iterator[dict[str, Episode]]:
    """The four ways of doing the episode, each on a browser of its own (started once)."""
    config = BrowserConfig(extra_args=web_args)
    executable = find_executable()
    pipe = DevToolsPipe(executable, launch_args(web_args))
    session = BrowserSession(config)
    folder = Path(tempfile.mkdtemp(prefix="mmina-floor-har-"))
    try:
        bare = session.run(bare_browser(executable, web_args))
        yield {
            "Chromium, no screenshots": lambda: chromium_episode(pipe, False),
            "Chromium": lambda: chromium_episode(pipe, True),
            "Playwright": lambda: session.run(playwright_episode(bare[1])),
            "mmina": lambda: mmina_episode(session, folder),
        }
        session.run(stop_browser(*bare))
    finally:
        session.close()
        pipe.close()


def find_executable() -> str:
    """The Chromium mmina would run (``find_chromium``: the headless shell where installed)."""
    with sync_playwright() as playwright:
        return find_chromium(None, playwright)


async def bare_browser(executable: str, web_args: tuple[str, ...]) -> tuple[Any, Any]:
    """Playwright's driver and a Chromium of its own with mmina's arguments, on the session's loop."""
    playwright = await async_playwright().start()
    return playwright, await launch_chromium(playwright, executable, web_args, back_forward_cache=False)


async def stop_browser(playwright: Any, browser: Any) -> None:
    await browser.close()
    await playwright.stop()


def floors(web_args: tuple[str, ...], episodes: int, rounds: int) -> dict[str, Floor]:
    """Each way's core-seconds per step, the ways taken in turn ``rounds`` times (the machine's
    drift spread over all of them), averaged."""
    found: dict[str, list[Floor]] = {}
    with ways(web_args) as episode_ways:
        for _ in range(rounds):
            for name, episode in episode_ways.items():
                found.setdefault(name, []).append(measured(episode, episodes))
    return {name: {k: sum(f[k] for f in runs) / len(runs) for k in runs[0]} for name, runs in found.items()}
