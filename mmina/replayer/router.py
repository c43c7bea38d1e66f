"""Playwright side of replay: answer every request of a browser context from the archive.

The only replayer module that touches Playwright. ``ArchiveRouter.prepare`` is handed to
``BrowserSession.episode`` so the context is routed, its clock frozen and ``Math.random``
seeded before the first page opens.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from playwright.async_api import BrowserContext, Error as PlaywrightError, Request, Route, WebSocketRoute

from mmina.recorder.browser import REDIRECT_MARK
from mmina.replayer.archive import (MAX_REDIRECTS, NOT_ARCHIVED_STATUS, Archive, Exchange, MatchKind, Matcher,
                                    Reply, SocketScript, redirect_target, redirected_method, reply_for,
                                    unmatched_reply)

SEEDED_RANDOM = """(() => {
  let state = %d >>> 0;
  Math.random = function random() {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
})();"""
"""mulberry32, restarted from the same seed in every document: a page that draws random
numbers while loading draws the same ones on every replay."""


def seed_for(text: str) -> int:
    """A 32-bit seed derived from a stable name (the source episode id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


@dataclass(frozen=True)
class Served:
    """One request the router answered, for the fidelity report and coverage gaps."""

    at: datetime
    method: str
    url: str
    kind: MatchKind
    status: int


@dataclass
class ArchiveRouter:
    """Routes one context to one archive; never continues a request to the network."""

    archive: Archive
    frozen_at: datetime
    seed: int
    served: list[Served] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.matcher = Matcher(self.archive)

    async def prepare(self, context: BrowserContext) -> None:
        """Freeze the clock, seed ``Math.random`` and route everything (before any page opens).

        ``clock.install`` fakes the timers from the recorded start; ``set_fixed_time`` then pins
        ``Date.now()``/``new Date()`` there while timers keep running, so scripts that wait on
        ``setTimeout`` still finish.
        """
        await context.clock.install(time=self.frozen_at)
        await context.clock.set_fixed_time(self.frozen_at)
        await context.add_init_script(SEEDED_RANDOM % self.seed)
        await context.route("**/*", self._handle)
        await context.route_web_socket("**/*", self._socket)

    async def _socket(self, socket: WebSocketRoute) -> None:
        """A WebSocket the page opens talks to its recorded conversation, never to the server."""
        exchange = self._match("GET", socket.url, None, "")
        if exchange is None:
            await socket.close(code=1011, reason="mmina replay: no such socket in the archive")
            return
        script = SocketScript.parse(exchange.body)
        socket.on_message(lambda _message: _send_all(socket, script.answer()))
        _send_all(socket, script.opening())

    async def _handle(self, route: Route) -> None:
        """Answer one request from the archive; every request gets an answer, whatever happens.

        A routed request left unanswered stays paused in the browser for good: its page never
        loads, and a navigation or tree read waiting on it times out. So a failure of our own
        (a bug, a body we cannot read) is answered with a 500 naming it, never left pending.
        """
        try:
            reply = self._answer(route.request)
        except Exception as exc:  # noqa: BLE001 - see above: an unanswered request hangs its page
            reply = Reply(500, {"content-type": "text/plain; charset=utf-8", "x-mmina-replay": "router-error"},
                          f"mmina replay: could not answer {route.request.url}: {type(exc).__name__}: {exc}\n"
                          .encode())
        try:
            await route.fulfill(status=reply.status, headers=reply.headers, body=reply.body)
        except PlaywrightError:
            pass  # the page or tab went away while we answered: nothing left to serve

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
            exchange = self._match(method, url, body, "")  # the next hop, logged and served
            assert exchange is not None
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
        status = match.exchange.status if match.exchange else NOT_ARCHIVED_STATUS
        self.served.append(Served(datetime.now(timezone.utc), method, url, match.kind, status))
        return match.exchange


def _send_all(socket: WebSocketRoute, messages: list[str | bytes]) -> None:
    try:
        for message in messages:
            socket.send(message)
    except PlaywrightError:
        pass  # the page closed the socket meanwhile


REDIRECT_PAGE = ('<!doctype html><html><head><meta charset="utf-8"><meta name="' + REDIRECT_MARK + '">'
                 '<script>location.replace(%s)</script></head></html>')
"""The stand-in for a recorded redirect of a navigation; ``EpisodeBrowser.settle`` waits while
the page shows it (the meta tag names it)."""
