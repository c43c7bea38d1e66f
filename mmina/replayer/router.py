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

from playwright.sync_api import BrowserContext, Error as PlaywrightError, Route

from mmina.replayer.archive import (MAX_REDIRECTS, NOT_ARCHIVED_STATUS, Archive, Exchange, MatchKind, Matcher,
                                    Reply, redirect_target, redirected_method, reply_for,
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

    def prepare(self, context: BrowserContext) -> None:
        """Freeze the clock, seed ``Math.random`` and route everything (before any page opens).

        ``clock.install`` fakes the timers from the recorded start; ``set_fixed_time`` then pins
        ``Date.now()``/``new Date()`` there while timers keep running, so scripts that wait on
        ``setTimeout`` still finish.
        """
        context.clock.install(time=self.frozen_at)
        context.clock.set_fixed_time(self.frozen_at)
        context.add_init_script(SEEDED_RANDOM % self.seed)
        context.route("**/*", self._handle)

    def _handle(self, route: Route) -> None:
        request = route.request
        method, url, body = request.method, request.url, request.post_data_buffer
        exchange = self._match(method, url, body, request.headers.get("content-type", ""))
        target = redirect_target(exchange, url) if exchange else None
        try:
            if target and request.is_navigation_request():
                redirect_navigation(route, target)
                return
            reply = self._follow(method, url, body, exchange)
            route.fulfill(status=reply.status, headers=reply.headers, body=reply.body)
        except PlaywrightError:
            pass  # the page or tab went away while we answered: nothing left to serve

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


REDIRECT_PAGE = '<!doctype html><meta charset="utf-8"><script>location.replace(%s)</script>'


def redirect_navigation(route: Route, target: str) -> None:
    """Send a navigation on to ``target`` so that the target request is routed too.

    Playwright's HAR replay does this with ``Route._redirect_navigation_request`` (private, in
    1.65): the frame navigates to the target as if redirected, history included. Without that
    method, a page that calls ``location.replace`` does the same at the cost of one extra,
    invisible document.
    """
    inner = getattr(route, "_impl_obj", None)
    if hasattr(inner, "_redirect_navigation_request"):
        route._sync(inner._redirect_navigation_request(target))  # type: ignore[attr-defined]
        return
    route.fulfill(status=200, content_type="text/html", body=REDIRECT_PAGE % json.dumps(target))
