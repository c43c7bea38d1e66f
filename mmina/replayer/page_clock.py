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
  sent to every frame at once;
* where the cap is the recorded moment of a request the page has not asked for yet, a page at it
  is told so at once (``_asked``), and a timer of the page's due at most ``TIMER_GRACE_S`` past it
  runs (the timer may be what asks: set a few milliseconds later on τ than the recording's, it
  would never run while time stood at the cap, until the cap ran out);
* a page's own data whose cap held τ (a fetch or XHR answer) is handed over only once every frame
  has heard that time goes on from its arrival (``ArchiveRouter._resume``): the page works on it
  with its clock running, as the recording's did; so is one that comes while τ stands at an
  action's input (its hold is lifted with it), or while a frame may still go by a cap lifted since
  it heard of it (:meth:`PageClock.behind`: every news sent is kept until a push every frame heard).

News carries τ too: a page behind it (it waited for an answer) jumps forward, never back; and
when it was sent (this machine's wall clock, which the page reads as well), so the page adds the
time the news took, up to the cap. Where the cap is the recorded moment of a request the page
has not asked for yet, news name that request's endpoint and the cap after it: the page's own
``fetch``/XHR to that endpoint lifts the cap as it asks, before the router hears of it.

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
import json
import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from mmina.replayer.timeline import GRACE_S, Timeline

ASK_WAIT_S = 0.5
"""A page at its cap is answered once the cap moved, or after this (it then asks again)."""
CHANGE_POLL_S = 0.05
"""A page's question also looks at the timeline this often (a cap that ran out of its limit says nothing)."""
TIMER_GRACE_S = GRACE_S
"""Where the cap is the recorded moment of a request the page has not asked for yet, a timer of the
page due at most this long past it still runs (see the module)."""
FOLLOW = """(() => {
  const GRACE = %GRACE%;
  const pw = globalThis.__pwClock, c = pw && pw.controller;
  if (!c || globalThis.__mminaTimeline || typeof c._syncRealTime !== 'function' || typeof c._advanceNow !== 'function'
      || !c._now || !c._embedder || !pw.builtins || !pw.builtins.Date) return;
  const state = {cap: Infinity, version: -1, asking: false};
  const jump = at => { if (at > c._now.time) c._advanceNow(c._now.ticks + (at - c._now.time)); };
  // news was sent at `sent` (wall-clock ms, this machine's): τ ran since, up to the cap
  const since = sent => sent ? Math.max(0, pw.builtins.Date.now() - sent) : 0;
  // the cap is a request this page has not asked for yet: a timer due just past it (by at most
  // GRACE ms) may be what asks for it, so it runs (held at the cap, it would never ask)
  const timerRoom = () => {
    if (!state.asks || typeof c._firstTimer !== 'function') return 0;
    const timer = c._firstTimer();
    if (!timer) return 0;
    const due = c._now.time + (timer.callAt - c._now.ticks);
    return due <= state.cap + GRACE ? due - c._now.time : 0;
  };
  const step = asking => {
    if (!c._realTime) return;
    const now = c._embedder.performanceNow();
    const elapsed = now - c._realTime.lastSyncTicks;
    if (elapsed <= 0) return;
    const room = Math.max(0, state.cap - c._now.time, timerRoom());
    c._advanceNow(c._now.ticks + Math.min(elapsed, room));
    c._realTime.lastSyncTicks = now;
    if (asking && elapsed >= room) ask();
  };
  state.news = (at, cap, version, sent, asks, then) => {
    if (version < state.version) return;
    step(false);  // up to now under the cap it knew: the time it stood stays stood
    state.version = version;
    state.cap = cap === null ? Infinity : cap;
    state.asks = asks ? {endpoint: asks, cap: then === null ? Infinity : then} : null;
    jump(Math.min(state.cap, at + Math.floor(since(sent))));
  };
  // the cap is where the recording's page asked for a request this page has not asked for yet:
  // asking for it (its endpoint) lifts it here and now, as the router will on hearing of it
  const asking = url => {
    const next = state.asks;
    if (!next) return;
    let endpoint = null;
    try { const u = new URL(url, location.href); endpoint = u.protocol + '//' + u.host.toLowerCase() + u.pathname; }
    catch (e) { return; }
    if (endpoint !== next.endpoint) return;
    step(false);
    state.asks = null;
    state.cap = Math.max(state.cap, next.cap);
  };
  const fetch = globalThis.fetch;
  if (typeof fetch === 'function') {
    globalThis.fetch = function (input, init) {
      try { asking(input && input.url ? input.url : String(input)); } catch (e) {}
      return fetch.apply(this, arguments);
    };
  }
  const XHR = globalThis.XMLHttpRequest && globalThis.XMLHttpRequest.prototype;
  if (XHR) {
    const open = XHR.open, send = XHR.send;
    XHR.open = function (method, url) { this.__mminaAsks = url; return open.apply(this, arguments); };
    XHR.send = function () {
      try { asking(String(this.__mminaAsks)); } catch (e) {}
      return send.apply(this, arguments);
    };
  }
  state.capped = () => c._now.time >= state.cap;
  const ask = () => {
    if (state.asking || typeof globalThis.__mminaClock !== 'function') return;
    state.asking = true;
    globalThis.__mminaClock(state.version, !!state.asks).then(
      n => { state.asking = false; state.news(n.at, n.cap, n.version, n.sent, n.asks, n.then); },
      () => { state.asking = false; });
  };
  c._syncRealTime = () => step(true);
  c.now();  // Playwright's clock sets itself up on its first read: before the time is set below
  const entry = pw.builtins.performance.getEntriesByType('navigation')[0];
  const timing = {};
  for (const t of (entry && entry.serverTiming) || []) timing[t.name] = t.duration;
  let parent = null;
  try { parent = window.parent !== window && window.parent.__mminaTimeline ? window.parent : null; } catch (e) {}
  if ('mmina-at' in timing) {
    state.cap = 'mmina-cap' in timing ? timing['mmina-cap'] : Infinity;
    state.version = timing['mmina-version'] || 0;
    c._now.time = Math.min(state.cap, timing['mmina-at'] + Math.floor(since(timing['mmina-sent'])));
  } else if (parent) {
    c._now.time = parent.__pwClock.controller.now();
    state.cap = parent.__mminaTimeline.cap;
    state.version = parent.__mminaTimeline.version;
  } else {
    ask();
  }
  Object.defineProperty(globalThis, '__mminaTimeline', {value: state});
})();""".replace("%GRACE%", str(round(TIMER_GRACE_S * 1e3)))
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
        self._change: asyncio.Future[None] | None = None
        """Resolved (and replaced) when the timeline changed: the pages asking hear of it at once."""
        self._heard: dict[int, float] = {}
        """The news a frame may still go by, version: cap as sent (``math.inf``: none) — from the newest news
        every frame has heard (:meth:`_tell`) on: what :meth:`behind` looks at."""

    async def prepare(self, context: BrowserContext) -> None:
        """After ``context.clock.install``: every document's clock follows the timeline."""
        self._context, self._loop = context, asyncio.get_running_loop()
        await context.add_init_script(FOLLOW)
        await context.expose_binding("__mminaClock", self._asked)
        self.timeline.on_lowered(lambda: self._on_loop(self.tell_soon))
        self.timeline.on_changed(lambda: self._on_loop(self._changed))

    def news(self, state: tuple[float, float, int, tuple[Hashable, float] | None] | None = None) -> News:
        """What a page's clock is told: τ and the cap as a page reads them (whole epoch milliseconds,
        as a page's clock counts; no cap: None), the version, when it was sent (wall-clock epoch
        milliseconds of this machine, which the page reads too: it adds the time the news took), and
        where the cap is a request's recorded moment, the request's endpoint and the cap once asked.
        ``state``: the timeline's once a cap is lifted (:meth:`Timeline.lifted_state`), τ standing
        until the page has it (sent: None, nothing to add); by default the timeline's now."""
        at, cap, version, asked = state or (*self.timeline.state(), self.timeline.asked_next())
        return News(
            math.floor(self._start_ms + at * 1e3),
            self._ms(cap),
            version,
            None if state else math.floor(time.time() * 1e3),
            str(asked[0]) if asked else None,
            self._ms(asked[1]) if asked else None,
        )

    def behind(self) -> bool:
        """Whether a frame may still go by a cap below the timeline's: one lifted since the frame
        heard of it (an action's input that ended, a response handed over), at which the frame's
        clock stands when it gets there, until its next question is answered — which a page
        working on data it was just handed cannot ask before its work is done."""
        known = min(self._heard.values(), default=math.inf)
        cap = self._ms(self.timeline.cap())
        return known < (math.inf if cap is None else cap)

    def _sent(self, news: News) -> News:
        """``news`` goes to a frame, which may go by it from now on."""
        cap = math.inf if news.cap is None else news.cap
        self._heard[news.version] = min(cap, self._heard.get(news.version, math.inf))
        return news

    def _ms(self, at: float) -> int | None:
        """A moment on the timeline as a page's clock reads it (whole epoch ms; never: None)."""
        return None if math.isinf(at) else math.floor(self._start_ms + at * 1e3)

    def document_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """A document response's headers with the timeline's news for its clock (``Server-Timing``)."""
        news = self._sent(self.news())
        parts = [
            f"mmina-at;dur={news.at}",
            f"mmina-version;dur={news.version}",
            f"mmina-sent;dur={news.sent}",
        ]
        if news.cap is not None:
            parts.append(f"mmina-cap;dur={news.cap}")
        ours = ", ".join(parts)
        recorded = headers.get("server-timing")
        return {**headers, "server-timing": f"{recorded}, {ours}" if recorded else ours}

    async def resume(self, *keys: Hashable) -> None:
        """Tell every frame, τ standing still, that time goes on once ``keys``' caps are lifted, and
        return once they have heard it: a response whose cap held τ (its page's clock stands there
        too), or that comes while τ stands at an action's input or while a frame may still go by a
        cap lifted since (:meth:`behind`), is then handed over and the caps lifted, so the page's
        time runs as the response reaches it and the page works on it, as the recording's page's did
        (not only once its next question is answered; see ``ArchiveRouter._resume``)."""
        await self._tell(self.news(self.timeline.lifted_state(*keys)))

    async def _asked(self, _source: Any, version: int, knows_asks: bool = False) -> dict[str, Any]:
        """A page at its cap asks for news: answered as soon as there is some (a lift, a request
        asked for), or after ``ASK_WAIT_S``; at once where the cap is a request's recorded moment
        and the page does not know it yet (``knows_asks``: it knows of one), so that its own
        asking lifts the cap and its timers due just past it run (see the module)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + ASK_WAIT_S
        if not knows_asks and self.timeline.asked_next() is not None:
            return self.news().page()
        while self.timeline.version <= version and (left := until - loop.time()) > 0:
            if self._change is None or self._change.done():
                self._change = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._change), min(left, CHANGE_POLL_S))
            except TimeoutError:
                pass  # a cap that ran out of its limit changes nothing until read: look again
        return self._sent(self.news()).page()

    def _changed(self) -> None:
        if self._change is not None and not self._change.done():
            self._change.set_result(None)

    def _on_loop(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the context's event loop (from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if asyncio.get_running_loop() is loop:
                call()
                return
        except RuntimeError:
            pass  # another thread
        try:
            loop.call_soon_threadsafe(call)
        except RuntimeError:
            pass  # the loop closed meanwhile: no page is left to tell

    def tell_soon(self) -> None:
        """Every frame hears the news at once, not waited for (the cap came down, a document's
        cap was lifted); on the context's event loop."""
        task = asyncio.get_running_loop().create_task(self._tell())
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _tell(self, news: News | None = None) -> None:
        if self._context is None:
            return
        news = self._sent(news or self.news())
        script = (
            f"globalThis.__mminaTimeline && __mminaTimeline.news({news.at}, "
            f"{json.dumps(news.cap)}, {news.version}, {json.dumps(news.sent)}, {json.dumps(news.asks)}, "
            f"{json.dumps(news.then)})"
        )
        frames = [frame for page in self._context.pages for frame in page.frames]
        got = await asyncio.gather(*(_quietly(frame.evaluate(script)) for frame in frames))
        if all(got):  # every frame has heard news this new
            self._heard = {version: cap for version, cap in self._heard.items() if version >= news.version}


@dataclass(frozen=True)
class News:
    """The timeline as a page's clock is told it (see :meth:`PageClock.news`)."""

    at: int
    cap: int | None
    version: int
    sent: int | None
    asks: str | None = None
    """Where the cap is a request's recorded moment: its endpoint, which the page's asking for lifts..."""
    then: int | None = None
    """... to this cap (None: none)."""

    def page(self) -> dict[str, Any]:
        return asdict(self)


async def _quietly(call: Any) -> bool:
    """Whether the frame heard it."""
    try:
        await call
    except PlaywrightError:
        return False  # a frame going away or navigating: its next document reads its own news
    return True
