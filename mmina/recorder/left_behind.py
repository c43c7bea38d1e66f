"""The bodies of a document its page leaves as soon as it has loaded, read as the page leaves.

A page that replaces itself as it loads (a script's ``location.replace``, a login page sending
the browser on, a link clicked while the page's last script arrives) drops the bodies of its
document when the next one commits. Playwright's HAR reads each body on its own session as its
load finishes, and lost such a page's own body in 4 of 20 recordings even with the bodies
Chromium keeps outside the renderer (``devtools._body_keeper``; 8 of 8 before it); a replay then
serves that page empty, and it never moves on.

So mmina's session of the page watches for a frame asking for its next document and reads there
and then the bodies of that frame's document that finished just before (``LATE_S``), and those
of a document already left that finish afterwards. A document its own script replaces while it
is parsed never finishes loading (Chromium sends no event for it: 5 of 30 times on this machine,
and then the HAR has no body for it at all), so an answer counts from its headers on. Only what
makes a page work is read (``LEFT_TYPES``), and only in that moment: a page whose agent thought
before acting finished its loads long before, so a step costs nothing more. ``har.fill_left``
gives each HAR entry without its body the one read for it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from playwright.async_api import CDPSession

from mmina.recorder.devtools import response_body

LEFT_TYPES = frozenset({"Document", "Script", "Stylesheet"})
"""The resource types read (images and fonts are left out: nobody saw a page replaced so soon)."""
LATE_S = 0.5
"""A body that finished at most this long before its frame asked for its next document is read."""
MAX_BYTES = 64 * 1024 * 1024
"""At most this many bytes are held per context (a page that bounces between two large documents
for the whole episode is read until then)."""


@dataclass(frozen=True)
class LeftBody:
    """A body read as its page moved on: its request's method, URL, when it was sent (seconds
    since the epoch, as the HAR's ``startedDateTime``) and the body."""

    method: str
    url: str
    sent: float
    body: bytes


@dataclass(frozen=True, kw_only=True)
class _Sent:
    method: str
    url: str
    wall: float
    kind: str
    frame: str
    loader: str


class LeftBehind:
    """The bodies a context's pages left behind as they moved on (on the browser's event loop)."""

    def __init__(self) -> None:
        self._sent: dict[str, _Sent] = {}
        self._documents: dict[tuple[CDPSession, str], str] = {}
        """Each frame's latest document (its loader), by page session and frame."""
        self._finished: dict[tuple[CDPSession, str], dict[str, float]] = {}
        """Each frame's ``LEFT_TYPES`` responses of its latest document, finished when (DevTools seconds)."""
        self._read: list[asyncio.Future[LeftBody | None]] = []
        self._asked: set[str] = set()
        self._bytes = 0

    def listen(self, session: CDPSession) -> None:
        """Watch the page behind ``session`` (whose Network domain its caller enables)."""
        session.on("Network.requestWillBeSent", lambda event: self._request(session, event))
        session.on("Network.responseReceived", lambda event: self._answered(session, event))
        session.on("Network.loadingFinished", lambda event: self._loaded(session, event))

    def _request(self, session: CDPSession, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        sent = _Sent(
            method=request.get("method", "GET"),
            url=request.get("url", ""),
            wall=float(event.get("wallTime") or 0.0),
            kind=event.get("type") or "",
            frame=event.get("frameId") or "",
            loader=event.get("loaderId") or "",
        )
        if sent.kind not in LEFT_TYPES or not sent.frame or not sent.loader:
            return  # a worker's script has no frame: it is not left with a page
        self._sent[event["requestId"]] = sent
        if sent.kind == "Document" and self._documents.get((session, sent.frame)) != sent.loader:
            self._leaving(session, sent.frame, float(event.get("timestamp") or 0.0))
            self._documents[session, sent.frame] = sent.loader

    def _leaving(self, session: CDPSession, frame: str, at: float) -> None:
        """``frame`` asks for its next document at ``at``: read what its document finished just before."""
        for request_id, finished in self._finished.pop((session, frame), {}).items():
            if at - finished <= LATE_S:
                self._read_now(session, request_id)

    def _answered(self, session: CDPSession, event: dict[str, Any]) -> None:
        """A response of the frame's latest document counts from its headers on: a document
        replaced by its own script as it is parsed never finishes loading (no event says so)."""
        sent = self._sent.get(event["requestId"])
        if sent is not None and self._of_latest(session, sent):
            self._finish(session, sent, event)

    def _loaded(self, session: CDPSession, event: dict[str, Any]) -> None:
        sent = self._sent.get(event["requestId"])
        if sent is None:
            return
        if self._of_latest(session, sent):
            self._finish(session, sent, event)
        else:
            self._read_now(session, event["requestId"])  # its document was left before it finished

    def _of_latest(self, session: CDPSession, sent: _Sent) -> bool:
        """Of its frame's latest document (or of one loading before the session opened)."""
        return self._documents.get((session, sent.frame)) in (None, sent.loader)

    def _finish(self, session: CDPSession, sent: _Sent, event: dict[str, Any]) -> None:
        """The response of ``event`` is done as far as its frame leaving goes (DevTools seconds)."""
        self._finished.setdefault((session, sent.frame), {})[event["requestId"]] = float(
            event.get("timestamp") or 0.0
        )

    def _read_now(self, session: CDPSession, request_id: str) -> None:
        if request_id not in self._asked:  # read as its frame left, then its load finished
            self._asked.add(request_id)
            self._read.append(asyncio.ensure_future(self._body(session, request_id)))

    async def _body(self, session: CDPSession, request_id: str) -> LeftBody | None:
        if self._bytes >= MAX_BYTES:
            return None
        sent = self._sent[request_id]
        body = await response_body(session, request_id)
        if not body or self._bytes + len(body) > MAX_BYTES:
            return None
        self._bytes += len(body)
        return LeftBody(sent.method, sent.url, sent.wall, body)

    @property
    def asked(self) -> int:
        """How many bodies were asked for (read or not)."""
        return len(self._read)

    def bodies(self) -> dict[tuple[str, str], list[LeftBody]]:
        """The bodies read so far, by (method, URL), in the order they were asked for."""
        found: dict[tuple[str, str], list[LeftBody]] = {}
        for read in self._read:
            left = (
                read.result() if read.done() and not read.cancelled() and read.exception() is None else None
            )
            if left is not None:
                found.setdefault((left.method, left.url), []).append(left)
        return found
