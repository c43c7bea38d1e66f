"""Waiting for a page: the deadlines of a step's parts, and settling after an action.

A page has settled when its document is ready, the network has been quiet briefly (XHR
content arrived), and the page has run the work it set itself to do right after (timers due
within ``SOON_MS``, two animation frames and a macrotask turn) without asking for more; and a new
document whose network was still busy at settling's bound, once it has been still a moment
(``BUILD_STILL_MS``: a client building its interface is observed when only answers and timers,
which a replay reproduces on its timeline, can change it next). Every wait here ends by a
deadline, so a page that never settles costs a step at most ``ACTION_DEADLINE_S``.

Those waits run on the browser's event loop and lean on Playwright's own timeouts, which the
driver enforces: a driver that stops answering, or a call Playwright gives no timeout
(``evaluate`` on a renderer stuck in a script loop), would still wait forever. So the caller
bounds every call as well (``mmina.recorder.browser``): a step's part gets its deadline here
plus ``GRACE_S``, and past it the call is cancelled and :class:`DeadlinePassed` raised.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from playwright.async_api import BrowserContext, Frame, Page, Request, WebSocket
from playwright.async_api import Error as PlaywrightError

from mmina.errors import MminaError
from mmina.recorder.devtools import PageSessions, between_documents, call, evaluate

ACTION_TIMEOUT_MS = 5_000
NAVIGATION_TIMEOUT_MS = 20_000
"""Until a navigation commits (its response arrived); its load is then settle's to wait for."""
LOAD_MAX_S = 10.0
"""At most this long for the page to finish loading after an action."""
SETTLE_MAX_S = 3.0
SETTLE_QUIET_S = 0.05
SETTLE_POLL_S = 0.01
ACTION_DEADLINE_S = NAVIGATION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's action and the settling after it end within this (a failed action included)."""
OBSERVE_DEADLINE_S = 4 * ACTION_TIMEOUT_MS / 1e3 + LOAD_MAX_S + SETTLE_MAX_S + 2.0
"""A step's observation ends within this (its one retry after a failed read included)."""
GRACE_S = 5.0
"""The caller's bound on a call is its part's deadline plus this: the waits inside end first
whenever the driver answers, so the caller's bound fires only for a call that is truly stuck."""
CLOSE_DEADLINE_S = 30.0
"""Closing a context (Chromium then writes its HAR); past it the context is abandoned."""
LAUNCH_DEADLINE_S = 60.0
"""Starting Playwright's driver and Chromium."""
PROBE_DEADLINE_S = 5.0
"""After a call passed its deadline: how long the driver may take to answer a cheap question
(the context's cookies) before the episode's browser counts as gone."""
LIVENESS_S = 30.0
"""Before an episode: how long a session may take to answer that cheap question before it is
started again. Lenient, since a restart ends every episode in flight on the session and a loaded
machine (other browsers, a test run) can take seconds to open a DevTools session; a driver that
is truly stuck still costs at most this."""
CALL_DEADLINE_S = 120.0
"""Any other call into the browser (a caller that names no deadline still gets one)."""
REDIRECT_MARK = "mmina-redirect"
"""A page with ``<meta name="mmina-redirect">`` is a replayed redirect about to replace itself
(see ``mmina.replayer.router``): not a page to observe, so settling waits past it."""
SOON_MS = 500
"""A timer a page sets for at most this long is work the page is about to do: settling waits
for it (a debounced search, a ``setTimeout(0)`` follow-up), up to ``SOON_MAX_S``."""
SOON_MAX_S = 1.5
LONG_TASK_QUIET_MS = 0
"""With more than 0, settling also waits until the page's main thread has run no long task (50 ms
or more) for this long, up to ``LONG_TASK_MAX_S``, in the recording and in the replay alike, so a
client that builds its interface with the CPU after ``load`` is observed built. Off: measured with
250 ms (``python -m bench --only quiet``, docs/recording.md) it cost a fixture-web step 15–27 % under
load and changed no real application's fidelity (Notebook 7's build pauses ~1 s for its kernel)."""
LONG_TASK_MAX_S = 3.0
LONG_TASK_GAP_MS = 100
"""A turn of settling's own loop (two frames and a macrotask, ~35 ms) that took this long means the
main thread may have been held by a long task the page's ``PerformanceObserver`` has not reported
yet: one more turn lets it (a machine under load stretches turns too, so a held turn alone does
not count as a long task)."""
BUILD_STILL_MS = 500
"""A new document whose requests never paused for ``SETTLE_QUIET_S`` before settling's network
bound (``SETTLE_MAX_S`` after it was ready: a client still building its interface, fetching as it
goes) is then waited on until it has been still this long — no request started or ended, no
change to its DOM, no long task, no turn of its main thread held, no font loading — at most
``BUILD_MAX_S`` more, in the recording and the replay alike. Still is what both can reproduce: a
page that changes next only when a response arrives or one of its timers fires changes on the
replay's timeline as it did when recorded, whereas one still computing its interface is wherever
its CPU got to (the replay's, given the time τ stood still, further on). Counted from when this
settling began watching the page (``WATCH``), so a page already still at the bound waits nothing
more; 0: off (settling ends at the bound, as before issue 56's build rule)."""
BUILD_MAX_S = 6.0
PENDING_TIMERS = """(() => {
  if (window.__mminaSoon) return;
  const soon = new Set();
  Object.defineProperty(window, '__mminaSoon', {value: soon});
  const tasks = {last: 0};
  Object.defineProperty(window, '__mminaLongTasks', {value: tasks});
  try {
    new PerformanceObserver(list => {
      for (const entry of list.getEntries()) tasks.last = Math.max(tasks.last, entry.startTime + entry.duration);
    }).observe({type: 'longtask', buffered: true});
  } catch (e) {}
  for (const [set, clear] of [['setTimeout', 'clearTimeout'], ['setInterval', 'clearInterval']]) {
    const native = window[set], nativeClear = window[clear];
    window[set] = function (handler, delay, ...rest) {
      if (typeof handler !== 'function' || !(Number(delay || 0) <= %(soon)d)) \
return native.call(this, handler, delay, ...rest);
      const id = native.call(this, function (...args) { soon.delete(id); \
return handler.apply(this, args); }, delay, ...rest);
      soon.add(id);
      return id;
    };
    window[clear] = function (id) { soon.delete(id); return nativeClear.call(this, id); };
  }
  const real = (globalThis.__pwClock && globalThis.__pwClock.builtins) || globalThis;
  const endpoint = url => { try { return new URL(url, location.href).href.split(/[?#]/)[0]; } \
catch (e) { return ''; } };
  const since = url => ({at: real.performance.now(), url: endpoint(url)});
  const nativeFetch = window.fetch;
  if (nativeFetch) {
    window.fetch = function fetch(...args) {
      const asked = args[0] && typeof args[0] === 'object' && 'url' in args[0] ? args[0].url : String(args[0]);
      const token = since(asked), done = () => soon.delete(token);
      soon.add(token);
      const answer = nativeFetch.apply(this, args);
      answer.then(done, done);
      return answer;
    };
  }
  const open = XMLHttpRequest.prototype.open, send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.open = function (...args) { this.__mminaUrl = String(args[1]); \
return open.apply(this, args); };
  XMLHttpRequest.prototype.send = function (...args) {
    const token = since(this.__mminaUrl);
    soon.add(token);
    this.addEventListener('loadend', () => soon.delete(token));
    return send.apply(this, args);
  };
})();""" % {"soon": SOON_MS}
"""Counts, in every document of every context (recording and replay alike, so both settle the
same way), the work a page is about to see done: timers due soon (an interval only until it
first fires), and its ``fetch`` and XHR requests until they are answered — seen from the page,
so a request whose browser event reaches mmina late (a loaded machine, a routed request) still
holds settling."""
REAL_TIMERS = "const real = (globalThis.__pwClock && globalThis.__pwClock.builtins) || globalThis;"
"""The browser's own timers and ``performance``, not the replay clock's (which may stand still:
``mmina.replayer.page_clock``): mmina's waits in a page count real time."""
PAGE_TURN = """(soonLimit, streamLimit, longLived, taskQuiet, taskLimit) => new Promise(done => {
  %s
  const started = real.performance.now(), timeline = window.__mminaTimeline;
  const tasks = window.__mminaLongTasks || {last: 0};
  let turned = started;
  const working = now => taskQuiet > 0 && now - tasks.last < taskQuiet && now - started < taskLimit;
  const stopped = () => !!(timeline && timeline.capped());
  const standing = token => token.at < started - soonLimit || longLived.includes(token.url);
  const waiting = () => [...(window.__mminaSoon || [])].some(token => !standing(token));
  const busy = () => (waiting() && !stopped() && real.performance.now() - started < soonLimit)
    || ((window.__mminaStreams || new Set()).size > 0 && real.performance.now() - started < streamLimit);
  const turn = () => real.requestAnimationFrame(() => real.requestAnimationFrame(() => real.setTimeout(check, 0)));
  const check = () => {
    const now = real.performance.now(), held = now - turned > %d;
    turned = now;
    busy() || working(now) || (held && taskQuiet > 0 && now - started < taskLimit) ? turn() : done();
  };
  real.setTimeout(done, Math.max(soonLimit, streamLimit, taskLimit) + 200);
  turn();
})""" % (REAL_TIMERS, LONG_TASK_GAP_MS)
"""Resolves once the page has painted twice and run a macrotask with no timer due soon left
(for at most ``soonLimit`` ms: a page polling every 100 ms never runs out of timers; none while
the replay clock stands still, when no page timer can fire) and no replayed stream still flowing
(at most ``streamLimit`` ms; see ``mmina.replayer.router``). A fetch or XHR unanswered for longer
than ``soonLimit`` already (a long-poll, a stream), or to one of the ``longLived`` endpoints (URLs
without their query), is *standing*: it holds no later settling. And (for at most ``taskLimit``
ms) until the main thread has run no long task for ``taskQuiet`` ms (``LONG_TASK_QUIET_MS``): the
page's ``PerformanceObserver`` entries (after a turn held ``LONG_TASK_GAP_MS``, one more turn)."""
WATCH_S = LOAD_MAX_S + SETTLE_MAX_S + BUILD_MAX_S + 1.0
"""How long a new document's DOM changes are watched after a settling first looks at it (``WATCH``):
as long as that settling can last."""
WATCH = """if (watch && (!window.__mminaMoved || !window.__mminaMoved.watching)) {
    const moved = {last: real.performance.now(), watching: true};
    try { Object.defineProperty(window, '__mminaMoved', {value: moved, configurable: true}); } catch (e) {}
    try {
      const observer = new MutationObserver(() => { moved.last = real.performance.now(); });
      observer.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
      real.setTimeout(() => { observer.disconnect(); moved.watching = false; }, %d);
    } catch (e) { moved.watching = false; }
  }""" % (WATCH_S * 1e3)
"""When the page's DOM last changed (``window.__mminaMoved.last``, real ms), watched for ``WATCH_S``
from the first settling that looks at a new document: what ``STILL`` counts from, so a page already
still at the network bound waits no more (an older document is not watched: the rule is for new
ones)."""
READY = """(limit, watch) => new Promise(done => {
  %s
  %s
  const ready = () => document.readyState === 'complete' && !document.querySelector('meta[name="%s"]');
  const started = real.performance.now();
  const check = () => ready() ? done(true) : \
real.performance.now() - started > limit ? done(false) : real.setTimeout(check, 20);
  check();
})""" % (REAL_TIMERS, WATCH, REDIRECT_MARK)
"""Resolves true once the document is ready (checked every 20 ms), false after ``limit`` ms; with
``watch``, starts watching the document's DOM changes (``WATCH``)."""
STILL = (
    """(quiet, limit, gap) => new Promise(done => {
  %s
  const tasks = window.__mminaLongTasks || {last: 0}, started = real.performance.now();
  const watched = window.__mminaMoved && window.__mminaMoved.watching ? window.__mminaMoved : null;
  let moved = watched ? watched.last : started, turned = started;
  const observer = new MutationObserver(() => { moved = real.performance.now(); });
  observer.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  const asked = () => Math.max(0, ...[...(window.__mminaSoon || [])].map(token => (token && token.at) || 0));
  const fonts = () => !!(document.fonts && document.fonts.status === 'loading');
  const check = () => {
    const now = real.performance.now();
    if (now - turned > 50 + gap || fonts()) moved = now;
    turned = now;
    const since = Math.max(moved, tasks.last, asked());
    if (now - since >= quiet || now - started >= limit) {
      observer.disconnect();
      done(now - since);
    } else real.setTimeout(check, 50);
  };
  check();
})"""
    % REAL_TIMERS
)
"""Resolves once the page has been still for ``quiet`` ms — no DOM change (since ``WATCH`` began,
else since the call), long task, fetch/XHR started or font loading, and no turn of its checks
(every 50 ms) held ``gap`` ms more (a main thread busy in a task not reported yet) — or after
``limit`` ms; with how long it has been still (ms)."""


LONG_LIVED_S = SETTLE_MAX_S - 0.5
"""A request still in flight this long when a settling ended outlived its network-quiet deadline:
its endpoint is a long-lived one (see ``Settling._long_lived``)."""
NEVER_AWAITED_TYPES = frozenset({"eventsource", "websocket", "ping", "manifest"})
"""Requests a page never waits on to show itself: event streams and sockets (open for good),
beacons (``sendBeacon``), the web app manifest."""


def _endpoint(request: Request) -> tuple[str, str]:
    return request.method, request.url.partition("?")[0].partition("#")[0]


class DeadlinePassed(MminaError):
    """A call into the browser did not finish by its deadline; the message says what was
    being done and where it waited. The call was cancelled; an action that passes its deadline
    is recorded on its step (the episode goes on), an observation or a start page ends the
    episode with this as its error."""


class Settling:
    """Counts a context's requests in flight and waits for its active page to settle."""

    def __init__(
        self,
        context: BrowserContext,
        page: Callable[[], Page],
        sessions: PageSessions,
        page_time: Callable[[], float] = time.monotonic,
    ) -> None:
        self._page, self._sessions = page, sessions
        self._page_time = page_time
        """The page's time in seconds, which says how long a request stood (a replay's runs on its
        recording's timeline: an answer the replay holds to its recorded moment while that time
        stands still has not stood long, however long the wait was)."""
        self._lock = threading.Lock()
        """``loading`` is read from the episode's thread while the loop's events change the sets."""
        self._in_flight: dict[Request, float] = {}
        """Requests in flight, with when they started (on ``page_time``)."""
        self._standing: set[Request] = set()
        """Requests already in flight when the last settling ended: a long-poll, a stream, a
        beacon — none of them holds a later settling."""
        self._long_lived: set[tuple[str, str]] = set()
        """Endpoints (method, URL without its query) of requests that stood ``LONG_LIVED_S`` or more
        when a settling ended (a long-poll's, a shared worker's script, whose response Chromium
        reports to the worker only): a later request to one holds no settling either (the next
        page polls again)."""
        self._last_activity = time.monotonic()
        self._asked_at: float | None = None
        """When a page sent a WebSocket message still without an answer (see ``_quiet``)."""
        context.on("request", self._started)
        context.on("requestfinished", self._ended)
        context.on("requestfailed", self._ended)
        context.on("page", self._watch)
        self._new_documents: set[Page] = set()
        """Pages whose main frame navigated since their last settling (see :meth:`_idle_work`)."""
        self._watched: tuple[Page, bool, int] | None = None
        """The page this settling is for, whether it was a new document then, and its navigations."""
        self._navigations: dict[Page, int] = {}
        """How often each page's main frame navigated: a document that commits while a settling
        waits is a new one too (``BUILD_STILL_MS``)."""

    def _watch(self, page: Page) -> None:
        page.on("websocket", self._socket)
        page.on("framenavigated", lambda frame: self._navigated(page, frame))
        self._new_documents.add(page)

    def _navigated(self, page: Page, frame: Frame) -> None:
        if frame.parent_frame is None:
            self._new_documents.add(page)
            self._navigations[page] = self._navigations.get(page, 0) + 1

    def _socket(self, socket: WebSocket) -> None:
        """A message the page sends over a WebSocket is work under way until a message comes
        back (a dashboard's rerun, a chat's reply), as a request is until its response."""
        socket.on("framesent", lambda _frame: self._asked())
        socket.on("framereceived", lambda _frame: self._answered())

    def _asked(self) -> None:
        self._asked_at = self._asked_at or time.monotonic()
        self._last_activity = time.monotonic()

    def _answered(self) -> None:
        self._asked_at = None
        self._last_activity = time.monotonic()

    @property
    def loading(self) -> bool:
        """Requests of the context are in flight now, standing ones aside (read from any thread)."""
        return bool(self._waited())

    def _waited(self) -> set[Request]:
        with self._lock:
            return set(self._in_flight) - self._standing

    def _quiet(self) -> bool:
        """No request in flight, no socket message unanswered (for at most ``SOON_MAX_S``: a
        heartbeat gets no answer), and nothing for ``SETTLE_QUIET_S``."""
        now = time.monotonic()
        waiting = self._asked_at is not None and now - self._asked_at < SOON_MAX_S
        return not self._waited() and not waiting and now - self._last_activity >= SETTLE_QUIET_S

    @staticmethod
    async def prepare(context: BrowserContext) -> None:
        """Count every document's timers due soon (before any page opens)."""
        await context.add_init_script(PENDING_TIMERS)

    def _started(self, request: Request) -> None:
        if request.resource_type in NEVER_AWAITED_TYPES:
            return
        with self._lock:
            self._in_flight[request] = self._page_time()
            if _endpoint(request) in self._long_lived:
                self._standing.add(request)
        self._last_activity = time.monotonic()

    def _ended(self, request: Request) -> None:
        with self._lock:
            self._in_flight.pop(request, None)
            self._standing.discard(request)
        self._last_activity = time.monotonic()

    async def settle(self, deadline: float | None = None) -> None:
        """Wait until the page has loaded and the network has been quiet briefly (XHR content),
        never past ``deadline`` (``time.monotonic()``; default: the longest load and settle).

        "Loaded" is read from the document (``readyState`` complete, and not a replayed redirect
        that is about to replace itself), not from Playwright's load event: a page restored from
        the back-forward cache is complete without firing load again. What is still in flight
        when it ends is *standing* (a long-poll): it holds no later settling, nor does a later
        request to the same endpoint (the poll of the next page), so a step on such a page costs
        no more than on one without (only the first load that started one waits for it, as for
        any request). Event streams, sockets and beacons hold none at all.
        """
        try:
            await self._settle(deadline)
        finally:
            now = self._page_time()
            with self._lock:
                self._standing = set(self._in_flight)
                self._long_lived |= {
                    _endpoint(r)
                    for r, started in self._in_flight.items()
                    if r.resource_type != "document" and now - started >= LONG_LIVED_S
                }

    async def _settle(self, deadline: float | None) -> None:
        now = time.monotonic()
        outer = deadline or now + LOAD_MAX_S + SETTLE_MAX_S + BUILD_MAX_S
        deadline = min(deadline or now + LOAD_MAX_S + SETTLE_MAX_S, now + LOAD_MAX_S + SETTLE_MAX_S)
        new_document = self._page() in self._new_documents
        navigations = self._navigations.get(self._page(), 0)
        self._watched = (self._page(), new_document, navigations)
        ready = self._last_activity if await self._wait_ready(min(deadline, now + LOAD_MAX_S)) else None
        await self._idle_work(SETTLE_QUIET_S, deadline)  # let events of requests just started arrive first
        quiet_until = min(deadline, time.monotonic() + SETTLE_MAX_S)
        while time.monotonic() < quiet_until:
            if self._quiet():
                if ready == self._last_activity:
                    if await self._page_turned(ready, deadline):
                        return  # no request since the page was ready, nor from its work due soon
                else:  # requests since (e.g. the page a replayed redirect replaced itself by): ready again?
                    activity = self._last_activity
                    if not await self._wait_ready(min(deadline, time.monotonic() + LOAD_MAX_S)):
                        return
                    ready = activity if self._last_activity == activity else ready
            await asyncio.sleep(SETTLE_POLL_S)
        if self._watching():
            await self._still(min(outer, time.monotonic() + BUILD_MAX_S))

    def _watching(self) -> bool:
        """Whether this settling is for a new document (one that committed before it began, or
        since), which the build rule (``BUILD_STILL_MS``) applies to."""
        if BUILD_STILL_MS <= 0 or self._watched is None:
            return False
        page, new_document, navigations = self._watched
        return page is self._page() and (new_document or self._navigations.get(page, 0) != navigations)

    async def _still(self, until: float) -> None:
        """A new document that reached the network bound: until it has been still for
        ``BUILD_STILL_MS`` (``STILL``, and no request started or ended, no socket message, for as
        long) or ``until``."""
        quiet = BUILD_STILL_MS / 1e3
        while (left := until - time.monotonic()) > 0:
            network = quiet - (time.monotonic() - self._last_activity)
            if network > 0:  # a request or a socket message just now: still for that long first
                await asyncio.sleep(min(network, left))
                continue
            try:
                await self._run(call(STILL, BUILD_STILL_MS, left * 1e3, LONG_TASK_GAP_MS), left + 1.0)
            except (TimeoutError, PlaywrightError):
                return  # navigating away, or a renderer that does not answer
            if time.monotonic() - self._last_activity >= quiet:
                return

    async def _wait_ready(self, until: float) -> bool:
        """Wait until the document is ready (see :meth:`settle`) or ``until``; whether it is. A
        document replaced meanwhile (a navigation committing) is asked again."""
        while (left := until - time.monotonic()) > 0:
            try:
                return bool(await self._run(call(READY, left * 1e3, self._watching()), left + 1.0))
            except PlaywrightError as exc:
                if not between_documents(exc):
                    return False  # the page closed or crashed
                await asyncio.sleep(SETTLE_POLL_S * 2)
            except TimeoutError:
                return False
        return False

    async def _page_turned(self, activity: float, deadline: float) -> bool:
        """Let the page run its work due soon and its replayed streams flow (``PAGE_TURN``)
        within the deadline; whether the network stayed quiet meanwhile."""
        left = max(0.0, deadline - time.monotonic())
        limits = [min(SOON_MAX_S, left) * 1e3, min(SETTLE_MAX_S, left) * 1e3]
        task_limit = min(LONG_TASK_MAX_S, left) * 1e3
        try:
            long_lived = sorted({url for _method, url in self._long_lived})
            await self._run(
                call(PAGE_TURN, *limits, long_lived, LONG_TASK_QUIET_MS, task_limit),
                max(*limits, task_limit) / 1e3 + 1.0,
            )
        except (TimeoutError, PlaywrightError):
            pass  # navigating away, or a renderer that does not answer: the network decides
        return self._quiet() and self._last_activity == activity

    async def _run(self, expression: str, seconds: float) -> Any:
        """A script's value in the active page, over its DevTools session (``devtools.py``)."""
        session = await self._sessions.get(self._page())
        if session is None:
            raise PlaywrightError("the page has no DevTools session")
        return await evaluate(session, expression, seconds)

    async def _idle_work(self, seconds: float, deadline: float) -> None:
        """Wait ``seconds``, using the time to load Playwright's script into a new document
        (~25 ms after each navigation) so the accessibility tree is then read at once; never
        past ``deadline`` (a page whose navigation is still waiting for its document has no
        script context to load into: the call would wait for one). Only after the page's main
        frame navigated: an older document has the script already, and the call costs ~2
        core-ms for nothing."""
        started, page = time.monotonic(), self._page()
        if page in self._new_documents:
            self._new_documents.discard(page)
            try:
                await asyncio.wait_for(
                    page.locator("body").count(), max(0.0, min(LOAD_MAX_S, deadline - started))
                )
            except (TimeoutError, PlaywrightError):
                pass  # a renderer busy in a script loop does not answer: the caller's deadline decides
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
