"""What settling's wait for a main thread free of long tasks would cost a step (issue 56; off by
default, ``settling.LONG_TASK_QUIET_MS``), and what its wait for a new page that fetched past the
network bound to be still costs (on by default, ``settling.BUILD_STILL_MS``).

The oracle's episodes of a few fixture-web tasks are acted out (no capture, no store), each step's
action and the settling after it timed, with the wait on (a ``QUIET_MS`` window) and off, in
alternating rounds so both see the same machine; then ``tests/busy_site.py``'s pages are opened
the same way: one that builds its interface in long tasks after ``load`` (is it observed built?),
one whose long tasks and animation never end (it costs the bound, ``LONG_TASK_MAX_S``), a plain one.
The build wait the same way (:func:`add_build_wait`): the fixture web's steps with it and without,
then a plain page, one held to the network bound by a long-poll and otherwise still (the wait must
cost it nothing), one whose clock ticks for good (it costs the wait's bound, ``BUILD_MAX_S``) and
one that builds its interface with the CPU after fetching past the bound (is it observed built?).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from bench.recording import oracle_episode, try_action
from bench.results import Section, Target
from mmina.actions.grammar import Action
from mmina.fixtures.web import FixtureWeb
from mmina.recorder import settling
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.episode_browser import EpisodeBrowser
from mmina.tasks.task import Task
from mmina.tasks.taskcheck import load_suite
from tests.busy_site import BUILT, BUILT_PARTS, BusySite

TASKS = ("normal/1", "normal/2", "shopping/6", "compare/1", "multi567/1", "wikipedia/1")
ROUNDS = 3
PAGE_ROUNDS = 3
QUIET_MS = 250
"""The quiet window measured (``settling.LONG_TASK_QUIET_MS``, off by default)."""
MODES = {"on": QUIET_MS, "off": 0}
BUILD_MODES = {"on": settling.BUILD_STILL_MS, "off": 0}
"""The build wait as it is by default, and off."""


@contextmanager
def _setting(name: str, ms: int) -> Iterator[None]:
    """Settling with its ``name`` (``LONG_TASK_QUIET_MS``, ``BUILD_STILL_MS``) set to ``ms``."""
    kept = getattr(settling, name)
    setattr(settling, name, ms)
    try:
        yield
    finally:
        setattr(settling, name, kept)


def quiet(ms: int) -> AbstractContextManager[None]:
    """Settling with a quiet window of ``ms`` (0: no wait for long tasks)."""
    return _setting("LONG_TASK_QUIET_MS", ms)


def building(ms: int) -> AbstractContextManager[None]:
    """Settling with the build wait's stillness of ``ms`` (0: off)."""
    return _setting("BUILD_STILL_MS", ms)


def _fixture_steps(
    log: Callable[[str], None],
    modes: dict[str, int],
    switch: Callable[[int], AbstractContextManager[None]],
    what: str,
    rounds: int,
) -> dict[str, list[float]]:
    """The fixture-web tasks' step times under each of ``modes`` (``switch`` sets one), in
    alternating rounds so every mode sees the same machine."""
    tasks = [t for t in load_suite().tasks if t.task_id in TASKS]
    steps: dict[str, list[float]] = {mode: [] for mode in modes}
    with FixtureWeb() as web:
        session = BrowserSession(
            BrowserConfig(screenshots=False, set_of_marks=False, extra_args=tuple(web.chromium_args()))
        )
        try:
            for round_ in range(rounds):
                for mode, ms in modes.items():
                    log(f"fixture-web steps, {what} {mode} (round {round_ + 1})")
                    with switch(ms):
                        for task in tasks:
                            steps[mode] += _step_times(session, task)
        finally:
            session.close()
    return steps


def quiet_section(log: Callable[[str], None], quick: bool = False) -> Section:
    section = Section("quiet")
    steps = _fixture_steps(log, MODES, quiet, "long-task wait", 1 if quick else ROUNDS)
    on, off = statistics.mean(steps["on"]), statistics.mean(steps["off"])
    section.add(
        "fixture-web step (action + settling), wait off",
        round(off * 1e3),
        "ms",
        note=f"{len(steps['off'])} steps, median {statistics.median(steps['off']) * 1e3:.0f} ms",
    )
    section.add(
        "fixture-web step (action + settling), wait on",
        round(on * 1e3),
        "ms",
        note=f"{len(steps['on'])} steps, median {statistics.median(steps['on']) * 1e3:.0f} ms,"
        f" slowest {max(steps['on']) * 1e3:.0f} ms",
    )
    section.add(
        "fixture-web step: on / off", round(on / off, 3), "", note="no target: the wait is off by default"
    )
    _add_openings(section, log, 1 if quick else PAGE_ROUNDS, LONG_TASK_OPENINGS)
    add_build_wait(section, log, quick)
    return section


def add_build_wait(section: Section, log: Callable[[str], None], quick: bool = False) -> None:
    """The build wait on and off: fixture-web steps, then the busy site's pages."""
    steps = _fixture_steps(log, BUILD_MODES, building, "build wait", 1 if quick else ROUNDS)
    on, off = statistics.mean(steps["on"]), statistics.mean(steps["off"])
    for mode, mean in (("off", off), ("on", on)):
        section.add(
            f"fixture-web step (action + settling), build wait {mode}",
            round(mean * 1e3),
            "ms",
            note=f"{len(steps[mode])} steps, median {statistics.median(steps[mode]) * 1e3:.0f} ms,"
            f" slowest {max(steps[mode]) * 1e3:.0f} ms",
        )
    section.add("fixture-web step: build wait on / off", round(on / off, 3), "", Target(1.05))
    _add_openings(section, log, 1 if quick else PAGE_ROUNDS, BUILD_OPENINGS)


def _step_times(session: BrowserSession, task: Task) -> list[float]:
    """Each step's action and settling (the start page's opening first), in seconds."""
    browser = session.episode(None)
    started = time.perf_counter()
    try:
        browser.open(task.start_urls)
        times = [time.perf_counter() - started]

        def timed(page: EpisodeBrowser, action: Action) -> None:
            begun = time.perf_counter()
            try_action(page, action)
            times.append(time.perf_counter() - begun)

        oracle_episode(browser, task, timed)
        return times
    finally:
        browser.close()


@dataclass(frozen=True)
class Openings:
    """The busy site's pages opened under each of a settling wait's modes."""

    pages: tuple[str, ...]
    modes: dict[str, int]
    switch: Callable[[int], AbstractContextManager[None]]
    wait: str
    """The wait's name in the figures (``{page} page opened and settled, {wait} {mode}``)."""
    said: str
    """Its name in the log."""
    built: str
    """What the tree of a page observed built holds."""
    building: str
    """The page whose openings say how many were observed built."""
    bounded: str
    """The page that costs the wait's bound (its figure's target: ``bound`` seconds)."""
    bound: float


LONG_TASK_OPENINGS = Openings(
    pages=("plain", "build", "busy"),
    modes=MODES,
    switch=quiet,
    wait="wait",
    said="long-task wait",
    built=BUILT,
    building="build",
    bounded="busy",
    bound=settling.LONG_TASK_MAX_S + 2.0,
)
BUILD_OPENINGS = Openings(
    pages=("plain", "polling", "ticking", "compiling"),
    modes=BUILD_MODES,
    switch=building,
    wait="build wait",
    said="build wait",
    built=f"Part {BUILT_PARTS}",
    building="compiling",
    bounded="ticking",
    bound=settling.SETTLE_MAX_S + settling.BUILD_MAX_S + 2.0,
)


def _add_openings(section: Section, log: Callable[[str], None], rounds: int, openings: Openings) -> None:
    """Each of ``openings``' pages opened ``rounds`` times under each mode: the mean time to open and
    settle, the page that builds noting how often it was observed built."""
    with BusySite() as site:
        session = BrowserSession(BrowserConfig(screenshots=False, set_of_marks=False))
        try:
            for page in openings.pages:
                for mode, ms in openings.modes.items():
                    log(f"the {page} page, {openings.said} {mode}")
                    with openings.switch(ms):
                        opened = [_open(session, site.url + page, openings.built) for _ in range(rounds)]
                    seconds = [s for s, _built in opened]
                    note = f"{rounds} opening(s), {min(seconds):.2f}–{max(seconds):.2f} s"
                    if page == openings.building:
                        note += f"; observed built in {sum(b for _s, b in opened)} of {rounds}"
                    section.add(
                        f"{page} page opened and settled, {openings.wait} {mode}",
                        round(statistics.mean(seconds), 2),
                        "s",
                        Target(openings.bound) if page == openings.bounded else None,
                        note,
                    )
        finally:
            session.close()


def _open(session: BrowserSession, url: str, built: str = BUILT) -> tuple[float, bool]:
    browser = session.episode(None, paint_marks=False)
    try:
        started = time.perf_counter()
        browser.open((url,))
        seconds = time.perf_counter() - started
        return seconds, built in browser.tree()[0]
    finally:
        browser.close()
