"""Playwright side of replay: answer every request of a browser context from the archive.

The only replayer module that touches Playwright. ``ArchiveRouter.prepare`` is handed to
``BrowserSession.episode`` so the context is routed and its clock set before the first page
opens (``Math.random`` and ``crypto`` are seeded by the recorder, with the source episode's seed).

**The clock.** ``clock.install`` starts the page's clock (``Date``, ``performance.now``,
timers, animation frames) at the recorded episode's start, and it then runs in real time: it
is not pinned with ``set_fixed_time``. A pinned ``Date.now()`` with running timers breaks code
that compares the time with a due time — RxJS ``debounceTime``, lodash ``debounce`` and
``throttle`` re-arm forever and never fire. So a page reads the recorded start plus the time the
replay has taken so far (a page that prints the time when it loads shows the recorded one, to
the second when it loads as promptly as it did). Real time, not the recorded pace: see
docs/replay.md, "The replay clock".

**The recorded pace.** In a paced replay (stored actions, ``mmina.replayer.pace``) a fetch or
XHR is answered no sooner than its recorded exchange took (at most ``MAX_HOLD_S``): a loading
bar or a status region shows as long as it did, and a long-poll (engine.io, SockJS) is held as
its server held it. Documents, scripts, styles and images are answered at once.

**Sockets.** A WebSocket the page opens is played from its recorded conversation by the clock
(``mmina.replayer.sockets``), and what was said on it is kept for the replay run's ``requests``.

**Streams.** A fetch/XHR body recorded in chunks (``x-mmina-chunks``) is fulfilled whole, with
that header, and :data:`STREAMED_FETCH` (an init script) hands it to a page that reads it with
``fetch`` in its recorded chunks at its recorded pace, so a page reading a stream sees what it
saw (a stream it aborted mid-way included).
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

from playwright.async_api import BrowserContext, Error as PlaywrightError, Request, Route, WebSocketRoute

from mmina.recorder.browser import REDIRECT_MARK
from mmina.recorder.har import CHUNKS_HEADER
from mmina.replayer.archive import (MAX_REDIRECTS, NOT_ARCHIVED_STATUS, Archive, Exchange, MatchKind, Matcher,
                                    Reply, redirect_target, redirected_method, reply_for, unmatched_reply)
from mmina.replayer.fidelity import SocketFidelity, compare_sockets
from mmina.replayer.socket_route import SocketPlayer
from mmina.replayer.sockets import parse_messages

STREAMED_FETCH = """(() => {
  const native = window.fetch;
  if (!native || native.__mmina) return;
  const HEADER = '%s';
  async function fetch(...args) {
    const response = await native.apply(this, args);
    const timing = response.headers.get(HEADER);
    if (!timing || !response.body) return response;
    const bytes = new Uint8Array(await response.arrayBuffer());
    const chunks = timing.split(',').map(part => part.split('@').map(Number));
    const flowing = window.__mminaStreams = window.__mminaStreams || new Set();
    const body = new ReadableStream({start(controller) {
      let offset = 0;
      flowing.add(controller);
      chunks.forEach(([size, at], index) => {
        const last = index === chunks.length - 1;
        const piece = bytes.slice(offset, last ? bytes.length : offset + size);
        offset += size;
        setTimeout(() => {
          if (last) flowing.delete(controller);
          try { controller.enqueue(piece); if (last) controller.close(); } catch (e) {}
        }, at);
      });
    }, cancel() { flowing.clear(); }});
    const headers = new Headers(response.headers);
    headers.delete(HEADER);
    const streamed = new Response(body, {status: response.status, statusText: response.statusText, headers});
    for (const name of ['url', 'redirected', 'type']) Object.defineProperty(streamed, name, {value: response[name]});
    return streamed;
  }
  fetch.__mmina = true;
  window.fetch = fetch;
})();""" % CHUNKS_HEADER
"""Hands a body recorded in chunks to the page in those chunks, each at its recorded time
after the response (see the module). A stream still flowing is in ``window.__mminaStreams``,
which settling waits on as a recording waits on the network."""
SOCKET_SCHEMES = ("ws://", "wss://")
ENGINE_IO_SEPARATOR = "\x1e"
"""Between the packets of one engine.io (v4) long-poll body."""
HELD_TYPES = frozenset({"fetch", "xhr"})
"""What a paced replay answers in its recorded time: a page's own requests, whose latency it shows
(a loading bar, a status region, a long-poll held by its server until something happened)."""
MAX_HOLD_S = 60.0
"""No answer is held longer than this, whatever the recording says."""
ROUTE_DEADLINE_S = 10.0
"""A request is answered within this, whatever happens inside the router (a request left
unanswered holds its page, and every read of the page, for good)."""


@dataclass(frozen=True)
class Served:
    """One request the router answered, for the fidelity report and coverage gaps."""

    at: datetime
    method: str
    url: str
    kind: MatchKind
    status: int
    missing_body: bool = False
    """Matched, but the recording could not keep the response's body (a fidelity defect)."""
    failed: bool = False
    """The router could not answer in time (or failed) and answered with an error instead."""
    redacted_body: bool = False
    """Matched, but redaction changed the recorded body: the page got other bytes than it did (a defect)."""


@dataclass
class ArchiveRouter:
    """Routes one context to one archive; never continues a request to the network."""

    archive: Archive
    starts_at: datetime
    served: list[Served] = field(default_factory=list)
    paced: bool = False
    """Keep the recorded pace: a fetch/XHR is answered no sooner than it was when recorded."""
    on_socket: Callable[[], None] | None = None
    """Told when the page opens a socket (the pace keeps its timeline from the first one)."""

    def __post_init__(self) -> None:
        self.matcher = Matcher(self.archive)
        self._last_match: Exchange | None = None
        self.sockets: list[SocketPlayer] = []
        """The sockets played to the page, with what was said on them (``socket_entries``)."""

    async def prepare(self, context: BrowserContext) -> None:
        """Set the clock, stream recorded chunks and route everything (before any page opens;
        see the module). ``Math.random`` is seeded as in the recording (``recorder/seeding.py``)."""
        await context.clock.install(time=self.starts_at)
        await context.add_init_script(STREAMED_FETCH)
        await context.route("**/*", self._handle)
        await context.route_web_socket("**/*", self._socket)

    async def _socket(self, socket: WebSocketRoute) -> None:
        """A WebSocket the page opens talks to its recorded conversation, played in time
        (``mmina.replayer.sockets``), never to the server."""
        exchange = self._match("GET", socket.url, None, "")
        if exchange is None or exchange.status <= 0:
            await socket.close(code=1011, reason="mmina replay: no such socket in the archive")
            return
        self.sockets.append(SocketPlayer.start(socket, exchange))
        if self.on_socket is not None:
            self.on_socket()

    def socket_fidelity(self) -> tuple[SocketFidelity, ...]:
        """Every recorded socket compared with the one the page opened again (message by
        message; one the page never opened again has every message missing)."""
        played = {player.exchange.order: player for player in self.sockets}
        return tuple(played[e.order].fidelity() if e.order in played
                     else compare_sockets(e.url, parse_messages(e.body), [])
                     for e in self.archive.exchanges if e.url.startswith(SOCKET_SCHEMES))

    def socket_entries(self) -> list[dict[str, object]]:
        """The sockets played, as HAR entries (a routed socket has none in the context's HAR),
        so the replay run's ``requests`` keep what was said on them; their players stop."""
        for player in self.sockets:
            player.stop()
        return [player.har_entry() for player in self.sockets]

    async def _handle(self, route: Route) -> None:
        """Answer one request from the archive; every request gets an answer, whatever happens.

        A routed request left unanswered stays paused in the browser for good: its page never
        loads, and a navigation or tree read waiting on it times out. So a failure of our own
        (a bug, a body we cannot read) is answered with a 500 naming it, and an answer not
        ready within ``ROUTE_DEADLINE_S`` with a 504, never left pending.
        """
        request = route.request
        asked = asyncio.get_running_loop().time()
        self._feed_sockets(request)
        try:
            reply = await asyncio.wait_for(self._reply(request), ROUTE_DEADLINE_S)
        except asyncio.TimeoutError:
            reply = self._failed(request, 504, f"no answer within {ROUTE_DEADLINE_S:g} s")
        except asyncio.CancelledError:  # the context closed first: still a request never answered
            self._failed(request, 504, "the context closed before the answer was ready")
            raise
        except Exception as exc:  # noqa: BLE001 - see above: an unanswered request hangs its page
            reply = self._failed(request, 500, f"{type(exc).__name__}: {exc}")
        if self.paced:
            await asyncio.sleep(reply.recorded_s - (asyncio.get_running_loop().time() - asked))
        try:
            if reply.status <= 0:  # no response when recorded: fail it again
                await route.abort("failed")
            else:
                await route.fulfill(status=reply.status, headers=reply.headers, body=reply.body)
        except PlaywrightError:
            pass  # the page or tab went away while we answered: nothing left to serve

    def _feed_sockets(self, request: Request) -> None:
        """A long-poll POST (engine.io's ``transport=polling``) carries page messages of a session
        whose WebSocket may be open already: that socket's script hears them as if said on it, so
        its server messages follow them whichever transport the page used (it upgrades when it
        does, not when it did)."""
        if request.method != "POST" or not request.post_data_buffer:
            return
        query = parse_qs(urlsplit(request.url).query)
        if query.get("transport") != ["polling"] or "sid" not in query:
            return
        for player in self.sockets:
            if parse_qs(urlsplit(player.socket.url).query).get("sid") == query["sid"]:
                for packet in request.post_data_buffer.decode("utf-8", "replace").split(ENGINE_IO_SEPARATOR):
                    player.heard_elsewhere(packet)

    async def _reply(self, request: Request) -> Reply:
        """The archive's answer to one request; a body recorded in chunks keeps its timing
        for the page's ``fetch`` (see :data:`STREAMED_FETCH`)."""
        reply = self._answer(request)
        exchange = self._last_match  # the chain's final exchange (matched last, no await between)
        if exchange is None or request.resource_type not in HELD_TYPES:
            return reply
        if exchange.chunks and request.resource_type == "fetch" and reply.status < 300:
            reply = Reply(reply.status, {**reply.headers, CHUNKS_HEADER: exchange.chunks}, reply.body)
        return replace(reply, recorded_s=min(_until_headers(exchange) / 1e3, MAX_HOLD_S))

    def _failed(self, request: Request, status: int, why: str) -> Reply:
        """The error a request gets when the router could not answer it (logged as failed)."""
        self.served.append(Served(datetime.now(timezone.utc), request.method, request.url, MatchKind.UNMATCHED,
                                  status, failed=True))
        return Reply(status, {"content-type": "text/plain; charset=utf-8", "x-mmina-replay": "router-error"},
                     f"mmina replay: could not answer {request.url}: {why}\n".encode())

    def _answer(self, request: Request) -> Reply:
        method, url, body = request.method, request.url, request.post_data_buffer
        exchange = self._match(method, url, body, request.headers.get("content-type", ""))
        if exchange is not None and redirect_target(exchange, url) and request.is_navigation_request():
            return self._redirect_page(method, url, body, exchange)
        return self._follow(method, url, body, exchange)

    def _redirect_page(self, method: str, url: str, body: bytes | None, exchange: Exchange) -> Reply:
        """A navigation the recording redirected: follow the recorded chain inside the archive
        (as Playwright's HAR router does) and answer with a page that replaces itself by the
        chain's final URL, whose own request is then routed and answered like any other.

        Not ``Route._redirect_navigation_request`` (what Playwright's HAR replay uses): in 1.65
        it starts a navigation inside the driver whose failure nobody handles, so when that
        navigation is aborted (the next hop of a 302 -> 301 chain redirecting it again, or the
        page navigating elsewhere first) the driver process dies of an unhandled rejection.
        Cookies the redirects set come with the page (those the recording did not redact);
        ``location.replace`` keeps the history as the redirect left it (one entry, the final
        URL). The final page sees the stand-in's URL as its referrer, not the original one.
        """
        cookies: list[str] = []
        for _hop in range(MAX_REDIRECTS + 1):
            cookies += [c for c in reply_for(exchange).headers.get("set-cookie", "").split("\n") if c]
            target = redirect_target(exchange, url)
            next_method = redirected_method(exchange.status, method)
            body = body if next_method == method else None
            method, url = next_method, target or url
            upcoming = self.matcher.peek(method, url, body, "").exchange
            if upcoming is None or not redirect_target(upcoming, url):
                break
            matched = self._match(method, url, body, "")  # the next hop, logged and served
            assert matched is not None
            exchange = matched
        else:
            return unmatched_reply(method, url)  # a redirect loop: never hand the browser a 3xx
        if method != "GET":  # a 307/308 keeps its method: a page cannot re-send it, serve the end
            return self._follow(method, url, body, self._match(method, url, body, ""))
        headers = {"content-type": "text/html; charset=utf-8", "cache-control": "no-store",
                   "x-mmina-replay": "redirect"}
        if cookies:
            headers["set-cookie"] = "\n".join(cookies)
        return Reply(200, headers, (REDIRECT_PAGE % json.dumps(url).replace("<", "\\u003c")).encode())

    def _follow(self, method: str, url: str, body: bytes | None, exchange: Exchange | None) -> Reply:
        """A subresource's recorded redirects followed inside the archive to the final response
        (a fulfilled 3xx would send the browser to the network for its target)."""
        for _hop in range(MAX_REDIRECTS + 1):
            target = redirect_target(exchange, url) if exchange else None
            if exchange is None or target is None:
                return reply_for(exchange) if exchange else unmatched_reply(method, url)
            next_method = redirected_method(exchange.status, method)
            body = body if next_method == method else None
            method, url = next_method, target
            exchange = self._match(method, url, body, "")
        return unmatched_reply(method, url)  # a redirect loop: never hand the browser a 3xx

    def _match(self, method: str, url: str, body: bytes | None, content_type: str) -> Exchange | None:
        """Ask the archive and log the answer (one log entry per request or followed redirect)."""
        match = self.matcher.match(method, url, body, content_type)
        exchange = self.archive.revalidated(match.exchange) if match.exchange else None
        status = exchange.status if exchange else NOT_ARCHIVED_STATUS
        missing = exchange is not None and exchange.body_missing
        self.served.append(Served(datetime.now(timezone.utc), method, url, match.kind, status, missing,
                                  redacted_body=exchange is not None and exchange.redacted_body))
        self._last_match = exchange
        return exchange


def _until_headers(exchange: Exchange) -> float:
    """Milliseconds the recorded response took to begin: its whole time, less the time its body
    took to arrive in chunks (which the page's ``fetch`` is then handed at their pace)."""
    offsets = [float(part.partition("@")[2] or 0) for part in exchange.chunks.split(",") if part]
    return max(0.0, exchange.time_ms - max(offsets, default=0.0))


REDIRECT_PAGE = ('<!doctype html><html><head><meta charset="utf-8"><meta name="' + REDIRECT_MARK + '">'
                 '<script>(t => location.replace(new URL(t).hash ? t : t + location.hash))(%s)</script></head></html>')
"""The stand-in for a recorded redirect of a navigation; ``EpisodeBrowser.settle`` waits while
the page shows it (the meta tag names it). A target without a fragment keeps the fragment of
the URL that was redirected, as a browser does (Fetch standard; a form posted to ``/new#ticket``
and redirected to ``/ticket/1`` lands on ``/ticket/1#ticket``)."""
