"""Pages' animations frozen while their agent thinks, running again before it acts.

An episode spends most of its time waiting on its model (seconds per step); meanwhile its
pages go on running, and a page that animates (a spinner, a carousel's slide, a pulsing
button) is rendered 60 times a second: on such a page the wait costs more CPU than the step
itself, and many episodes in flight multiply it. So once the agent has been thinking for
``FREEZE_AFTER_S``, every tab of the episode is held still, and runs again when the agent has
chosen, before the action:

* every animation running in its documents (CSS animations and transitions, Web Animations;
  in the main frame's document and its same-origin frames' documents) gets the
  playback rate 0, and its own rate back at the thaw (:data:`HOLD`, :data:`RELEASE`, one
  script each over DevTools; what was held stays in a DevTools object group, not in the page);
* the document timeline stands still as well (``Animation.setPlaybackRate`` 0; rate 1 at the
  thaw), for what the script does not reach (animations in shadow roots, which
  ``getAnimations`` leaves out and finding would mean walking every element) and what starts
  while frozen.

Measured on the bench's animated page (a sliding banner and a pulsing line, CSS only; 8 pages,
cores per waiting page): 0.049 running, 0.019 with the timeline alone at rate 0 (its running
animations are still serviced every frame: the renderer's 0.015 goes on), 0.0000 with each
animation's own rate 0 (nothing is due: no frame is asked for). A freeze and thaw of a page
where nothing animates is two DevTools calls, the timeline's rate each way (~2 core-ms each of
mmina, Playwright's driver, the browser and the renderer): the step's observation asked the page
whether anything animates (:data:`ANIMATING`, with its other questions, in one call), and a page
seen still gets no hold script. It was three calls (~7 core-ms) with the hold script holding
nothing, and seven (~11 core-ms) while the Animation domain was turned on and off around it and
an empty hold was given back and let go. An animation that starts between the observation and
the freeze (0.5 s) on a page seen still is held by the timeline alone, as one that starts while
frozen is.

Why these (measured, ``docs/performance.md``):

* Chromium's frozen lifecycle state (``Page.setWebLifecycleState``, what it puts background
  tabs in: timers, frames and callbacks all wait) never takes effect on a page that is shown,
  and a headless page always is (Chromium 156, shell and full browser: timers kept running).
* Pausing the page's script as well (``Debugger.pause`` while frozen) cut a busy page's waiting
  CPU to about a third, but turning the debugger on and off cost ~0.04 core-seconds per step on
  every page (the renderer), more than it saved on the pages of a typical task; and a paused
  page answers nothing (a read of it waits until the thaw).
* Pausing each animation (``Animation.setPaused``, or ``pause()``) stops its frames too, but a
  CSS animation paused through its API keeps that play state for good: the page's own
  ``animation-play-state`` (a carousel that stops on hover) is ignored afterwards. Its playback
  rate does not override the page's rules.
* A style sheet of the inspector's that pauses every animation (``*`` with
  ``animation-play-state: paused``, ``CSS.createStyleSheet``) restyles the whole document at the
  freeze and at the thaw, and ``CSS.enable`` reads every style sheet: ~200 core-ms a step on a
  page of 10,000 elements and 40 style sheets.

What this does and does not change:

* What the agent sees does not change: the observation was taken before the freeze, the next
  one after the thaw, the action and settling.
* Script runs as before while the agent thinks (timers, polls, pushes, network callbacks):
  only the animations stand still, so after the thaw an animation is behind where it would have
  been by the time it was frozen (its ``animationend`` comes that much later). A script that
  reads an animation meanwhile sees its ``playbackRate`` at 0 (its ``playState`` is still
  ``running``); a rate the page sets meanwhile is kept at the thaw.
* Animations driven by script (``requestAnimationFrame``), video and animated images run on,
  and so does a focused text field's blinking caret (~0.005 cores: only a style rule stops it,
  which costs the restyle above).
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

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import send

FREEZE_AFTER_S = 0.5
"""How long an agent thinks before its pages are frozen: short follow-up work a page set itself
after settling (a debounce, a fade) gets this long; agents quicker than it never freeze."""

Sessions = Callable[[Page], Awaitable[CDPSession | None]]


class Freezing:
    """Freezes one episode's tabs after a delay and thaws them (on the browser's event loop)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions
        self._pending: asyncio.Task[None] | None = None
        self._freezing: asyncio.Future[list[None]] | None = None
        """The freeze's calls once sent: a thaw waits for them, never cancels them (a script that
        held the page's animations and whose answer was lost would leave them held for good)."""
        self._frozen: list[_Frozen] = []
        self._frozen_at: float | None = None
        self._still: set[Page] = set()
        """Pages whose latest observation saw no animation running (:meth:`saw`)."""

    def saw(self, page: Page, animating: bool) -> None:
        """What an observation of ``page`` saw (``ANIMATING``): a page seen still is frozen by
        its timeline alone, without the hold script, until the next thaw."""
        if animating:
            self._still.discard(page)
        else:
            self._still.add(page)

    async def after(self, pages: list[Page], delay: float) -> None:
        """Freeze ``pages`` ``delay`` seconds from now, unless :meth:`thaw` comes first."""
        self._pending = asyncio.ensure_future(self._freeze_after(list(pages), delay))

    async def _freeze_after(self, pages: list[Page], delay: float) -> None:
        await asyncio.sleep(delay)
        self._frozen_at = time.monotonic()
        sessions = await asyncio.gather(*(self._sessions(p) for p in pages))
        tabs = [_Frozen(s, hold=p not in self._still) for p, s in zip(pages, sessions) if s is not None]
        self._frozen += tabs
        self._freezing = asyncio.gather(*(tab.freeze() for tab in tabs))
        await asyncio.shield(self._freezing)

    async def thaw(self) -> float:
        """Cancel a freeze not yet begun, let one under way finish, and let every frozen tab run
        again; the seconds its animations were frozen (0.0 when they never were)."""
        pending, self._pending = self._pending, None
        freezing, self._freezing = self._freezing, None
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        if freezing is not None:
            await asyncio.gather(freezing, return_exceptions=True)
        frozen, self._frozen = self._frozen, []
        frozen_at, self._frozen_at = self._frozen_at, None
        self._still.clear()  # the action may start animations: the next observation tells
        await asyncio.gather(*(tab.wake() for tab in frozen))
        return time.monotonic() - frozen_at if frozen_at is not None and frozen else 0.0


FRAMES = """function* documents(frame) {
    yield frame.document;
    const count = Math.min(Number(frame.frames.length) || 0, 1000);  // a page may set a global 'length'
    for (let i = 0; i < count; i++) {
      try { frame.frames[i].document.nodeType; } catch (e) { continue; }  // cross-origin, or no such frame
      yield* documents(frame.frames[i]);
    }
  }"""
"""A generator of the documents of a window and its same-origin frames, at any depth."""


def _each_running_animation(which: str, change: str) -> str:
    """A script that does ``change`` to each running ``animation`` for which ``which`` holds, in
    the main frame's document and its same-origin frames' documents; its value: those animations,
    each with its rate before (null when there were none: nothing to hold on to)."""
    return """(() => {
  %s
  const changed = [];
  for (const document of documents(window)) {
    for (const animation of document.getAnimations()) {
      if (animation.playState === 'running' && %s) {
        changed.push([animation, animation.playbackRate]);
        %s;
      }
    }
  }
  return changed.length ? changed : null;
})()""" % (FRAMES, which, change)


ANIMATING = (
    """() => {
  %s
  for (const document of documents(window))
    if (document.getAnimations().some(a => a.playState === 'running' && a.playbackRate !== 0)) return true;
  return false;
}"""
    % FRAMES
)
"""A script: whether an animation runs (at a rate other than 0) where :data:`HOLD` would hold
it. An observation asks it (``observing.PAGE_FACTS``), so a page seen still gets no hold."""
HOLD = _each_running_animation("animation.playbackRate !== 0", "animation.playbackRate = 0")
"""Sets every running animation's playback rate to 0; the held animations with their own rates."""
RELEASE = (
    "function () { for (const [animation, rate] of this) "
    "if (animation.playbackRate === 0) animation.playbackRate = rate; }"
)
"""Gives each held animation (``this``: what :data:`HOLD` gave) its rate back, unless the page
set another meanwhile."""
RELEASE_UNKNOWN = _each_running_animation("animation.playbackRate === 0", "animation.playbackRate = 1")
"""Rate 1 for every running animation at rate 0: the thaw of a tab whose hold ran, or may have,
but whose answer was lost (a renderer that did not answer within ``devtools.SEND_TIMEOUT_S``)."""
HELD = "mmina-frozen"
"""The DevTools object group the held animations are kept in while frozen (nothing of the page's)."""

FREEZE = ("Animation.setPlaybackRate", {"playbackRate": 0})
WAKE = ("Animation.setPlaybackRate", {"playbackRate": 1})
"""The document timeline's rate: Chromium sets it without the Animation domain enabled (whose
events would then flow for every animation), and a document that replaces the frozen one starts
at rate 1."""


class _Frozen:
    """One tab held still: its DevTools session and its held animations."""

    def __init__(self, session: CDPSession, hold: bool = True) -> None:
        self.session, self.hold = session, hold
        """``hold``: run :data:`HOLD` too (not for a page its observation saw still)."""
        self.held: str | None = None
        """The DevTools object id of the held animations (None: none were, or the script failed)."""
        self.held_unknown = False
        """The hold was sent but not answered in time: what it held is not known."""
        self.answers = True
        """False once a call was not answered in time: the tab is asked nothing more until the wake."""

    async def freeze(self) -> None:
        await self._send(*FREEZE)
        if not self.hold:
            return
        answered = self.answers
        reply = await self._send("Runtime.evaluate", {"expression": HOLD, "objectGroup": HELD})
        self.held_unknown = answered and not self.answers
        if reply is not None and "exceptionDetails" not in reply:
            self.held = (reply.get("result") or {}).get("objectId")

    async def wake(self) -> None:
        """Give the held animations their rates back (their document may be gone: passed over),
        then undo :data:`FREEZE` (asked even if the freeze was not answered: the renderer may
        have come back)."""
        self.answers = True
        if self.held is not None:
            await self._send(
                "Runtime.callFunctionOn", {"objectId": self.held, "functionDeclaration": RELEASE}
            )
            await self._send("Runtime.releaseObjectGroup", {"objectGroup": HELD})
        elif self.held_unknown:
            await self._send("Runtime.evaluate", {"expression": RELEASE_UNKNOWN, "returnByValue": True})
        await self._send(*WAKE)

    async def _send(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The answer within ``devtools.SEND_TIMEOUT_S``; None when the call fails (the page closed
        or navigated away: the page is left as it is) or is not answered in time (then neither is
        any later call to this tab, so a renderer that hangs delays a thaw once, not per call)."""
        if not self.answers:
            return None
        try:
            return await send(self.session, method, params)
        except PlaywrightError:
            return None
        except TimeoutError:
            self.answers = False
            return None
