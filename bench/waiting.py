"""What an episode costs while it waits on its model, by process kind.

``in_flight`` episodes' contexts are opened on pages and observed as a step observes them;
then every episode "thinks" for ``wait_s`` seconds (:meth:`EpisodeBrowser.thinking`, as the
recorder wraps the agent's call, so animations freeze after ``FREEZE_AFTER_S`` as they do when
recording), and the CPU of the run's processes is sampled from the moment the thinking starts
until every page has been thawed: the page's own work in the first moments, before the freeze,
and the freeze and thaw themselves count. The result is core-seconds per second of waiting per
episode: on the fixture web's pages (which do not animate), and on
an animated page with its animations frozen and left running (what the freeze saves where
pages animate, as much of the real web does).
"""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from bench.cputree import CpuSplit, CpuTree
from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser
from mmina.recorder.freezing import FREEZE_AFTER_S

ANIMATED = (
    "data:text/html,<!doctype html><title>Offers</title><h1>Today's offers</h1>"
    "<div style='width:320px;height:200px;background:linear-gradient(90deg,gold,tomato);"
    "animation:slide 3s ease-in-out infinite alternate'>Sale</div>"
    "<p style='animation:pulse 1s infinite'>Book now</p>"
    "<style>@keyframes slide{to{transform:translateX(600px)}}@keyframes pulse{50%{opacity:.3}}</style>"
)
"""A page that animates as shop pages do: a sliding banner and a pulsing line (CSS only)."""


def waiting_split(
    config: BrowserConfig,
    urls: list[str],
    in_flight: int,
    wait_s: float,
    apart: dict[int, str],
    freeze: bool = True,
) -> CpuSplit:
    """Core-seconds by kind while ``in_flight`` episodes on ``urls`` (cycled) wait ``wait_s``."""
    session = BrowserSession(replace(config, allowed_schemes=("data",)))
    folder = Path(tempfile.mkdtemp(prefix="mmina-waiting-"))
    try:
        browsers = [
            _observed(session, folder / f"{i}.har.zip", urls[i % len(urls)]) for i in range(in_flight)
        ]
        tree = CpuTree(apart)
        with tree.sampling(), ExitStack() as thinking:
            for browser in browsers:
                thinking.enter_context(browser.thinking(FREEZE_AFTER_S if freeze else None))
            time.sleep(wait_s)
        for browser in browsers:
            browser.close()
    finally:
        session.close()
    return tree.split


def _observed(session: BrowserSession, har: Path, url: str) -> EpisodeBrowser:
    browser = session.episode(har, paint_marks=False)
    browser.open((url,))
    browser.observe(0, "wait")
    return browser


def per_episode_second(
    split: CpuSplit, in_flight: int, wait_s: float, kinds: tuple[str, ...]
) -> dict[str, float]:
    """Cores per waiting episode, by kind, and in all (``total``)."""
    shares = {k: split.seconds.get(k, 0.0) / in_flight / wait_s for k in kinds}
    return {**shares, "total": split.side() / in_flight / wait_s}
