"""A replay's clock in Web Workers: ``Date`` and ``performance.now()`` of every worker, dedicated or
shared, read the page's time — the recording's timeline τ (``mmina.replayer.timeline``) — as the
documents' clock does (``mmina.replayer.page_clock``).

Playwright's clock covers documents only, so a worker gets :data:`WORKER_CLOCK` before its own code
(``mmina.recorder.web_workers``): its time starts where the page's is at that moment, runs with
real time up to the cap the worker knows, and stands still there until news comes. News is sent
to every worker whenever the timeline changes (looked at every ``POLL_S``); a worker does not ask
for it. Its timers (``setTimeout``, ``setInterval``) run on that time as the documents' do on
Playwright's clock: a timer fires when the worker's time reaches its due moment, so one due past
the cap waits for news that lets time on (a worker polling every second polls as often on τ as
it did in the recording, however long τ stands still); each is armed with a wall-clock timer for
what is left of it, and armed again at every news. Where the cap is the recorded moment of a
request not asked for yet, a timer due at most ``GRACE_S`` past it runs (the worker's time goes on
to its due moment), as a document's does: it may be what asks. A worker's ``requestAnimationFrame`` (of an
``OffscreenCanvas``) stays the browser's.

A replay without a timeline (a new agent on the archive) gives workers the time of its page clock,
the recorded start plus the time since the clock was installed, running with real time.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime

from playwright.async_api import BrowserContext

from mmina.recorder.web_workers import WorkerScripts, worker_scripts
from mmina.replayer.page_clock import News, PageClock
from mmina.replayer.timeline import GRACE_S

POLL_S = 0.02
"""How often the workers' news is looked at (a change is sent once)."""
WORKER_CLOCK = """(() => {
  if (globalThis.__mminaTimeline) return;
  const NativeDate = globalThis.Date, perf = performance, real = perf.now.bind(perf);
  const state = {time: %(at)d, cap: %(cap)s, version: %(version)d, asks: %(asks)s, last: real()};
  const GRACE = %(grace)d;
  const sync = () => {
    const at = real(), since = at - state.last;
    state.last = at;
    if (since > 0) state.time = Math.max(state.time, Math.min(state.time + since, state.cap));
  };
  const timers = new Map();
  let lastId = 0, nativeSet = null, nativeClear = null;
  // the cap is a request not asked for yet: a timer due just past it may be what asks, so it runs
  const graced = (timer) => state.asks && state.time >= state.cap && timer.at <= state.cap + GRACE;
  const arm = (timer) => {
    natives();
    if (timer.native !== null) nativeClear(timer.native);
    sync();
    timer.native = state.time >= state.cap && timer.at > state.time && !graced(timer)
      ? null : nativeSet(ring, Math.max(0, Math.ceil(timer.at - state.time)), timer);
  };
  const ring = (timer) => {
    timer.native = null;
    if (timers.get(timer.id) !== timer) return;
    sync();
    if (timer.at > state.time && !graced(timer)) return arm(timer);
    state.time = Math.max(state.time, timer.at);
    if (timer.every === null) timers.delete(timer.id);
    else { timer.at = state.time + timer.every; arm(timer); }
    timer.run();
  };
  const add = (handler, ms, args, every) => {
    const delay = Math.max(0, Number(ms) || 0);
    const run = typeof handler === 'function'
      ? () => handler.apply(globalThis, args) : () => (0, eval)(String(handler));
    sync();
    const timer = {id: ++lastId, run, at: state.time + delay, every: every ? Math.max(delay, 1) : null, native: null};
    timers.set(timer.id, timer);
    arm(timer);
    return timer.id;
  };
  const clear = (id) => {
    const timer = timers.get(id);
    if (timer === undefined) return;
    timers.delete(id);
    if (timer.native !== null) nativeClear(timer.native);
  };
  state.news = (at, cap, version, asks) => {
    if (version < state.version) return;
    sync();
    state.version = version;
    state.cap = cap === null ? Infinity : cap;
    state.asks = !!asks;
    if (at > state.time) state.time = at;
    timers.forEach(arm);
  };
  const current = () => { sync(); return Math.floor(state.time); };
  const origin = state.time - real();
  const ClockDate = function Date(...args) {
    if (!new.target) return new NativeDate(current()).toString();
    return Reflect.construct(NativeDate, args.length ? args : [current()], new.target);
  };
  ClockDate.prototype = NativeDate.prototype;
  Object.defineProperties(ClockDate, {
    now: {value: function now() { return current(); }, writable: true, configurable: true},
    parse: {value: NativeDate.parse, writable: true, configurable: true},
    UTC: {value: NativeDate.UTC, writable: true, configurable: true},
  });
  globalThis.Date = ClockDate;
  perf.now = function now() { sync(); return state.time - origin; };
  const browsers = (name) => {  // the browser's own, under ours: a held worker gets it after this script
    const ours = globalThis[name];
    delete globalThis[name];
    const theirs = globalThis[name];
    globalThis[name] = ours;
    return theirs.bind(globalThis);
  };
  const natives = () => {
    if (nativeSet === null) [nativeSet, nativeClear] = [browsers('setTimeout'), browsers('clearTimeout')];
  };
  globalThis.setTimeout = function setTimeout(handler, ms, ...args) { return add(handler, ms, args, false); };
  globalThis.setInterval = function setInterval(handler, ms, ...args) { return add(handler, ms, args, true); };
  globalThis.clearTimeout = function clearTimeout(id) { clear(id); };
  globalThis.clearInterval = function clearInterval(id) { clear(id); };
  Object.defineProperty(globalThis, '__mminaTimeline', {value: state});
})();"""
"""Makes a worker's ``Date``, ``performance.now()`` and timers follow the news it is given (see the module)."""
NEWS = "globalThis.__mminaTimeline && __mminaTimeline.news(%d, %s, %d, %s)"


def clock_in_workers(context: BrowserContext, clock: PageClock | None, starts_at: datetime) -> WorkerScripts:
    """Every worker of ``context`` reads the page's time (``clock``'s timeline; without one, the
    recorded start plus real time since now, as Playwright's clock installed now reads); the
    context's worker scripts."""
    scripts = worker_scripts(context)
    if clock is None:
        installed, start_ms = time.monotonic(), starts_at.timestamp() * 1e3
        scripts.add(
            lambda _start: _script(math.floor(start_ms + (time.monotonic() - installed) * 1e3), None, 0)
        )
        return scripts
    scripts.add(lambda _start: _told(clock.news()))
    teller = _Teller(scripts, clock)
    teller.start()
    context.on("close", lambda _context: teller.stop())
    return scripts


def _told(news: News) -> str:
    return _script(news.at, news.cap, news.version, news.asks is not None)


def _script(at: int, cap: int | None, version: int, asks: bool = False) -> str:
    return WORKER_CLOCK % {
        "at": at,
        "cap": "Infinity" if cap is None else cap,
        "version": version,
        "asks": _js_bool(asks),
        "grace": round(GRACE_S * 1e3),
    }


def _js_bool(value: bool) -> str:
    return "true" if value else "false"


class _Teller:
    """Sends the timeline's news to the context's workers whenever it changes."""

    def __init__(self, scripts: WorkerScripts, clock: PageClock) -> None:
        self.scripts, self.clock = scripts, clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tell())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _tell(self) -> None:
        told = -1
        await self.scripts.scripted.wait()
        while True:
            await asyncio.sleep(POLL_S)
            if not self.scripts.channels or self.clock.timeline.state()[2] == told:
                continue  # state(), not version: it ends a cap whose limit passed (news a worker waits for)
            news = self.clock.news()
            told = news.version
            cap = "null" if news.cap is None else news.cap
            await self.scripts.tell(NEWS % (news.at, cap, told, _js_bool(news.asks is not None)))
