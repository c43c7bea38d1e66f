"""Playwright side of the timeline (``mmina.replayer.timeline``): the page's clock follows τ.

Playwright's clock (``context.clock.install``) replaces ``Date``, ``performance.now``, timers and
animation frames in every document with its own, which runs with real time. :data:`FOLLOW` (an
init script, after the clock's own) makes that clock run **only up to the timeline's cap**: it
wraps the clock's real-time step so that the page's time never passes the cap it knows; there the
page's time stands still, and its timers with it. The page hears of the cap three ways:

* a new document starts at τ with the cap of the moment its response was sent: the router puts
  both in the document's own ``Server-Timing`` header (``mmina-at``, ``mmina-cap``,
  ``mmina-version``), which the page reads from its navigation entry, synchronously, before
  any of its scripts runs; a document the router did not serve (``about:blank``, ``srcdoc``)
  takes its parent's time;
* a page whose time reached its cap asks for news (the ``__mminaClock`` binding, answered once
  the cap moved, or after ``ASK_WAIT_S``);
* a lower cap (a response the page now waits for, due earlier than anything it waited for) is
  sent to every frame at once.

News carries τ too: a page behind it (it waited for an answer) jumps forward, never back.

**Animation frames stay the browser's.** Playwright's clock makes ``requestAnimationFrame`` a timer of
its own, due at the next 16 ms of its time and run as a task of its own, so the browser may render
between a script's change and the frame callback that undoes it — which a live page never does (the
callbacks run in the rendering step, before style and layout). JupyterLab's theme manager hides its
shell and shows it again in the next frame: rendered hidden in between, the focused element inside
lost the focus, and Notebook 7's replayed page never focused its cell (the root ``[active]`` in 8 of 8
runs, the recorded cell never). :data:`FRAMES` (an init script, after the clock's) gives
``requestAnimationFrame`` back to the browser, as in the recording; its callbacks read the page
clock's time as their timestamp (one per frame), so while τ stands still a frame still comes, its
time standing still.

This leans on the inside of Playwright's injected clock (``__pwClock.controller`` and its
``_syncRealTime``, ``_advanceNow`` and ``_now``): where a Playwright release changed them, the
script does nothing, and the page clock runs with real time as before
(``tests/test_timeline_clock.py`` fails then).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from mmina.replayer.timeline import Timeline

ASK_WAIT_S = 0.5
"""A page at its cap is answered once the cap moved, or after this (it then asks again)."""
FOLLOW = """(() => {
  const pw = globalThis.__pwClock, c = pw && pw.controller;
  if (!c || globalThis.__mminaTimeline || typeof c._syncRealTime !== 'function' || typeof c._advanceNow !== 'function'
      || !c._now || !c._embedder) return;
  const state = {cap: Infinity, version: -1, asking: false};
  const jump = at => { if (at > c._now.time) c._advanceNow(c._now.ticks + (at - c._now.time)); };
  state.news = (at, cap, version) => {
    if (version < state.version) return;
    state.version = version;
    state.cap = cap === null ? Infinity : cap;
    jump(at);
  };
  state.capped = () => c._now.time >= state.cap;
  const ask = () => {
    if (state.asking || typeof globalThis.__mminaClock !== 'function') return;
    state.asking = true;
    globalThis.__mminaClock(state.version).then(n => { state.asking = false; state.news(n.at, n.cap, n.version); },
                                                () => { state.asking = false; });
  };
  c._syncRealTime = function () {
    if (!this._realTime) return;
    const now = this._embedder.performanceNow();
    const since = now - this._realTime.lastSyncTicks;
    if (since <= 0) return;
    const room = Math.max(0, state.cap - this._now.time);
    this._advanceNow(this._now.ticks + Math.min(since, room));
    this._realTime.lastSyncTicks = now;
    if (since >= room) ask();
  };
  c.now();  // Playwright's clock sets itself up on its first read: before the time is set below
  const entry = pw.builtins.performance.getEntriesByType('navigation')[0];
  const timing = {};
  for (const t of (entry && entry.serverTiming) || []) timing[t.name] = t.duration;
  let parent = null;
  try { parent = window.parent !== window && window.parent.__mminaTimeline ? window.parent : null; } catch (e) {}
  if ('mmina-at' in timing) {
    c._now.time = timing['mmina-at'];
    state.cap = 'mmina-cap' in timing ? timing['mmina-cap'] : Infinity;
    state.version = timing['mmina-version'] || 0;
  } else if (parent) {
    c._now.time = parent.__pwClock.controller.now();
    state.cap = parent.__mminaTimeline.cap;
    state.version = parent.__mminaTimeline.version;
  } else {
    ask();
  }
  Object.defineProperty(globalThis, '__mminaTimeline', {value: state});
})();"""
"""Makes Playwright's clock follow the timeline in every document (see the module)."""


FRAMES = """(() => {
  const real = globalThis.__pwClock && globalThis.__pwClock.builtins, clock = globalThis.performance;
  if (!real || typeof real.requestAnimationFrame !== 'function' || globalThis.__mminaFrames) return;
  let frame = null, stamp = 0;
  const at = native => { if (native !== frame) { frame = native; stamp = clock.now(); } return stamp; };
  globalThis.requestAnimationFrame = callback => real.requestAnimationFrame(native => callback(at(native)));
  globalThis.cancelAnimationFrame = id => real.cancelAnimationFrame(id);
  Object.defineProperty(globalThis, '__mminaFrames', {value: true});
})();"""
"""Gives ``requestAnimationFrame`` back to the browser under Playwright's clock (see the module)."""


class PageClock:
    """Keeps a context's page clocks on one :class:`Timeline` (see the module)."""

    def __init__(self, timeline: Timeline, starts_at: datetime) -> None:
        self.timeline = timeline
        self._start_ms = starts_at.timestamp() * 1e3
        self._context: BrowserContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._telling: set[asyncio.Task[None]] = set()
        """The pushes under way (held here: a task nobody holds may be collected)."""

    async def prepare(self, context: BrowserContext) -> None:
        """After ``context.clock.install``: every document's clock follows the timeline."""
        self._context, self._loop = context, asyncio.get_running_loop()
        await context.add_init_script(FOLLOW)
        await context.expose_binding("__mminaClock", self._asked)
        self.timeline.on_lowered(self._lowered)

    def news(self) -> tuple[int, int | None, int]:
        """(τ, cap, version) as a page reads them: whole epoch milliseconds, as a page's clock
        counts (no cap: None)."""
        at, cap, version = self.timeline.state()
        return (
            math.floor(self._start_ms + at * 1e3),
            None if math.isinf(cap) else math.floor(self._start_ms + cap * 1e3),
            version,
        )

    def document_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """A document response's headers with the timeline's news for its clock (``Server-Timing``)."""
        at, cap, version = self.news()
        parts = [f"mmina-at;dur={at}", f"mmina-version;dur={version}"]
        if cap is not None:
            parts.append(f"mmina-cap;dur={cap}")
        ours = ", ".join(parts)
        recorded = headers.get("server-timing")
        return {**headers, "server-timing": f"{recorded}, {ours}" if recorded else ours}

    async def _asked(self, _source: Any, version: int) -> dict[str, Any]:
        """A page at its cap asks for news: answered once there is some, or after ``ASK_WAIT_S``."""
        loop = asyncio.get_running_loop()
        until = loop.time() + ASK_WAIT_S
        while self.timeline.version <= version and loop.time() < until:
            await asyncio.sleep(0.01)
        at, cap, now = self.news()
        return {"at": at, "cap": cap, "version": now}

    def _lowered(self) -> None:
        """The cap came down (any thread): every frame hears it at once."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if asyncio.get_running_loop() is loop:
                self._start_telling()
                return
        except RuntimeError:
            pass  # another thread
        try:
            loop.call_soon_threadsafe(self._start_telling)
        except RuntimeError:
            pass  # the loop closed meanwhile: no page is left to tell

    def _start_telling(self) -> None:
        task = asyncio.get_running_loop().create_task(self._tell())
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _tell(self) -> None:
        if self._context is None:
            return
        at, cap, version = self.news()
        script = (
            f"globalThis.__mminaTimeline && __mminaTimeline.news({at}, "
            f"{'null' if cap is None else cap}, {version})"
        )
        frames = [frame for page in self._context.pages for frame in page.frames]
        await asyncio.gather(*(_quietly(frame.evaluate(script)) for frame in frames))


async def _quietly(call: Any) -> None:
    try:
        await call
    except PlaywrightError:
        pass  # a frame going away or navigating: its next document reads its own news
