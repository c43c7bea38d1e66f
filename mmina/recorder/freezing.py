"""Pages' animations frozen while their agent thinks, running again before it acts.

An episode spends most of its time waiting on its model (seconds per step); meanwhile its
pages go on running, and a page that animates (a spinner, a carousel's slide, a pulsing
button) is rendered 60 times a second: on such a page the wait costs more CPU than the step
itself, and many episodes in flight multiply it. So once the agent has been thinking for
``FREEZE_AFTER_S``, the CSS and Web animations of every tab of the episode stand still
(``Animation.setPlaybackRate`` 0 over DevTools), and run again (rate 1) when the agent has
chosen, before the action.

Why only animations (measured, ``docs/performance.md``):

* Chromium's frozen lifecycle state (``Page.setWebLifecycleState``, what it puts background
  tabs in: timers, frames and callbacks all wait) never takes effect on a page that is shown,
  and a headless page always is (Chromium 156, shell and full browser: timers kept running).
* Pausing the page's script as well (``Debugger.pause`` while frozen) cut a busy page's waiting
  CPU to about a third, but turning the debugger on and off cost ~0.04 core-seconds per step on
  every page (the renderer), more than it saved on the pages of a typical task; and a paused
  page answers nothing (a read of it waits until the thaw).

What this does and does not change:

* What the agent sees does not change: the observation was taken before the freeze, the next
  one after the thaw, the action and settling.
* Script runs as before while the agent thinks (timers, polls, pushes, network callbacks):
  only the animations' own clocks stop, so after the thaw an animation is behind where it would
  have been by the time it was frozen (its ``animationend`` comes that much later).
* Agents that answer within ``FREEZE_AFTER_S`` (the oracle, stored actions, scripted agents)
  never freeze a page: what they record and replay is exactly as before.
* ``steps.frozen_ms`` records how long the animations were frozen on each step, so a replay
  that keeps the recorded pace between steps can freeze them for as long (it does so by itself
  when its agent waits inside ``act`` as long as the recorded one did).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import CDPSession, Error as PlaywrightError, Page

from mmina.recorder.devtools import send

FREEZE_AFTER_S = 0.5
"""How long an agent thinks before its pages are frozen: short follow-up work a page set itself
after settling (a debounce, a fade) gets this long; agents quicker than it never freeze."""

Sessions = Callable[[Page], Awaitable[CDPSession | None]]


class Freezing:
    """Freezes one episode's tabs' animations after a delay and thaws them (on the browser's event loop)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions
        self._pending: asyncio.Task[None] | None = None
        self._frozen: list[CDPSession] = []
        self._frozen_at: float | None = None

    async def after(self, pages: list[Page], delay: float) -> None:
        """Freeze ``pages`` ``delay`` seconds from now, unless :meth:`thaw` comes first."""
        self._pending = asyncio.ensure_future(self._freeze_after(list(pages), delay))

    async def _freeze_after(self, pages: list[Page], delay: float) -> None:
        await asyncio.sleep(delay)
        self._frozen_at = time.monotonic()
        sessions = [s for s in await asyncio.gather(*(self._sessions(p) for p in pages)) if s is not None]
        self._frozen += sessions  # before the calls: a thaw that cancels them midway still wakes the page
        await asyncio.gather(*(_send_all(s, FREEZE) for s in sessions))

    async def thaw(self) -> float:
        """Cancel a freeze not yet done and let every frozen tab's animations run again; the
        seconds they were frozen (0.0 when they never were)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        frozen, self._frozen = self._frozen, []
        frozen_at, self._frozen_at = self._frozen_at, None
        await asyncio.gather(*(_send_all(s, WAKE) for s in frozen))
        return time.monotonic() - frozen_at if frozen_at is not None and frozen else 0.0


Calls = tuple[tuple[str, dict[str, Any]], ...]
FREEZE: Calls = (("Animation.enable", {}), ("Animation.setPlaybackRate", {"playbackRate": 0}))
WAKE: Calls = (("Animation.setPlaybackRate", {"playbackRate": 1}), ("Animation.disable", {}))


async def _send_all(session: CDPSession, calls: Calls) -> None:
    """The calls in order, each within ``devtools.SEND_TIMEOUT_S``; one that fails (the page closed or
    navigated away) or is not answered in time is passed over: the page is left as it is."""
    for method, params in calls:
        try:
            await send(session, method, params)
        except (PlaywrightError, asyncio.TimeoutError):
            continue
