"""The Chromium command line mmina launches: one ``--disable-features`` switch that keeps every
feature Playwright turns off, adds the browser UI a headless window never shows, and the user's
own; and what that saves: one renderer process per context (its page's), not three."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from mmina.recorder.browser import (
    DISABLE_FEATURES,
    MMINA_DISABLED_FEATURES,
    PLAYWRIGHT_DISABLED_FEATURES,
    BrowserConfig,
    BrowserSession,
    find_chromium,
    launch_args,
)
from tests.agents_for_tests import descendants

CONTEXTS = 3


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


MARK = f"--mmina-test-launch={uuid.uuid4().hex}"
"""A switch Chromium ignores, given to the browsers these tests launch: another browser started
meanwhile by this test process (a thread an earlier test file left running) is not theirs."""


def new_browser_processes(launch: Callable[[], Any]) -> tuple[Any, list[list[str]]]:
    """What ``launch`` returns, and the command lines of the browser processes it started with
    ``MARK`` (not their helpers: those carry ``--type=``, and a helper caught between Chromium's
    ``fork`` and its ``exec`` still shows the browser's command line: it is the browser's child)."""
    before = set(descendants(os.getpid()))
    launched = launch()
    started = {pid: _command_line_if_alive(pid) for pid in set(descendants(os.getpid())) - before}
    marked = {
        pid: c
        for pid, c in started.items()
        if "--remote-debugging-pipe" in c and MARK in c and not any(a.startswith("--type=") for a in c)
    }
    return launched, [c for pid, c in marked.items() if _parent(pid) not in marked]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def disabled_features(args: list[str]) -> list[list[str]]:
    """The value of each ``--disable-features`` switch, split into feature names."""
    return [a[len(DISABLE_FEATURES) :].split(",") for a in args if a.startswith(DISABLE_FEATURES)]


def test_playwright_defaults_are_the_ones_mmina_keeps() -> None:
    """If Playwright changes its list, mmina's copy (and the default it replaces) must follow."""
    with sync_playwright() as playwright:
        browser, [args] = new_browser_processes(
            lambda: playwright.chromium.launch(executable_path=find_chromium(None, playwright), args=[MARK])
        )
        browser.close()
    assert disabled_features(args) == [list(PLAYWRIGHT_DISABLED_FEATURES)]


def test_one_switch_keeps_playwrights_features_mmina_s_and_the_users() -> None:
    session, [args] = new_browser_processes(
        lambda: BrowserSession(
            BrowserConfig(extra_args=("--disable-features=Translate,MediaRouter", "--lang=de", MARK))
        )
    )
    session.close()
    [features] = disabled_features(args)
    assert set(features) == {*PLAYWRIGHT_DISABLED_FEATURES, *MMINA_DISABLED_FEATURES, "Translate"}
    assert len(features) == len(set(features))
    assert "--lang=de" in args


@pytest.mark.parametrize("extra_args", [(), (DISABLE_FEATURES,)])
def test_launch_args_without_user_features(extra_args: tuple[str, ...]) -> None:
    assert disabled_features(launch_args(extra_args)) == [
        [*PLAYWRIGHT_DISABLED_FEATURES, *MMINA_DISABLED_FEATURES]
    ]


def test_a_context_costs_one_renderer() -> None:
    """Each context's window loads no address-bar popups: its only renderer is its page's."""
    session = BrowserSession(BrowserConfig())
    try:
        before = renderers()
        session.run(_open_contexts(session, CONTEXTS))
        targets = session.run(_targets(session))
        assert [t["url"] for t in targets if t["type"] != "page"] == []
        assert len(renderers() - before) <= CONTEXTS + 1  # + Chromium's spare renderer
    finally:
        session.close()


def renderers() -> set[int]:
    return {p for p in descendants(os.getpid()) if _is_renderer(p)}


def _is_renderer(pid: int) -> bool:
    return "--type=renderer" in _command_line_if_alive(pid)


def _command_line_if_alive(pid: int) -> list[str]:
    """``pid``'s command line, or nothing if it ended meanwhile."""
    try:
        return command_line(pid)
    except OSError:
        return []


async def _open_contexts(session: BrowserSession, count: int) -> None:
    for _ in range(count):
        context = await session.browser.new_context()
        await (await context.new_page()).goto("data:text/html,<h1>a page</h1>")


async def _targets(session: BrowserSession) -> list[dict[str, Any]]:
    cdp = await session.browser.new_browser_cdp_session()
    return (await cdp.send("Target.getTargets"))["targetInfos"]
