"""Response bodies the HAR does not keep: EventSource messages, fetch/XHR bodies tapped as they
arrive (:class:`BodyTaps`, below), and the bodies of a document its page left as it loaded
(``left_behind.py``); and when the page's own code got each fetch/XHR answer (:data:`TAKEN`),
which the HAR does not know either.

Playwright's HAR keeps no body for a ``text/event-stream`` response (the stream is still open,
or was aborted, when the page moves on), so without help a replay would serve the stream empty.
An init script wraps ``EventSource`` in every frame (cross-origin iframes included) and reports,
through a binding, each stream it opens and each message it dispatches, before the page's own
listeners see it. (Chromium's ``Network.eventSourceMessageReceived`` over a CDP session was
tried first: its request events for the stream went missing in about a third of the episodes.)

:meth:`EventStreams.bodies` gives each stream back as a finished body: the messages in order,
after a ``retry`` field long enough that the browser, when the replayed body ends, does not
reconnect within the episode (as the recorded stream, still open, did not).
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import BrowserContext, CDPSession
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import response_body
from mmina.recorder.left_behind import LeftBehind
from mmina.recorder.seeding import DOCUMENT_ID
from mmina.recorder.shared_workers import SharedWorkers

NO_RECONNECT = b"retry: 86400000\n\n"
BINDING = "__mminaEventSource"

WRAPPER = """(() => {
  const Native = window.EventSource;
  if (!Native || Native.__mmina) return;
  // not Math.random nor crypto, which are seeded alike in every document (seeding.py)
  const documentId = window.%(document)s || crypto.getRandomValues(new Uint32Array(2)).join('-');
  let serial = 0;
  const report = (...args) => { try { window.%(binding)s(...args); } catch (e) {} };
  function EventSource(url, init) {
    const source = new Native(url, init);
    const stream = documentId + '#' + (++serial);
    const address = new URL(url, location.href).href;
    report(stream, address, 'open', '', '');
    const record = event => report(stream, address, event.type, String(event.data), event.lastEventId || '');
    const add = source.addEventListener.bind(source);
    const heard = new Set(['message']);
    add('message', record);
    source.addEventListener = (type, listener, options) => {
      if (!heard.has(type)) { heard.add(type); add(type, record); }
      return add(type, listener, options);
    };
    return source;
  }
  EventSource.prototype = Native.prototype;
  Object.assign(EventSource, {CONNECTING: 0, OPEN: 1, CLOSED: 2, __mmina: true});
  window.EventSource = EventSource;
})();""" % {"binding": BINDING, "document": DOCUMENT_ID}


TAKEN_BINDING = "__mminaTaken"
TAKEN = """(() => {
  if (window.__mminaTakenWrapped) return;
  Object.defineProperty(window, '__mminaTakenWrapped', {value: true});
  // this machine's clock, not a replay's page clock (which may stand still: page_clock.py)
  const now = () => ((globalThis.__pwClock && globalThis.__pwClock.builtins) || globalThis).Date.now();
  const absolute = url => { try { return new URL(url, location.href).href; } catch (e) { return ''; } };
  const report = (method, url, asked) => {
    try { window.%(binding)s(String(method || 'GET').toUpperCase(), absolute(url), asked, now()); } catch (e) {}
  };
  const nativeFetch = window.fetch;
  if (nativeFetch) {
    window.fetch = function fetch(input, init) {
      const request = input && typeof input === 'object' && 'url' in input ? input : null;
      const url = request ? request.url : String(input);
      const method = (init && init.method) || (request && request.method) || 'GET', asked = now();
      const answer = nativeFetch.apply(this, arguments);
      answer.then(() => report(method, url, asked), () => {});
      return answer;
    };
  }
  const XHR = window.XMLHttpRequest && window.XMLHttpRequest.prototype;
  if (XHR) {
    const open = XHR.open, send = XHR.send;
    XHR.open = function (method, url) {
      this.__mminaTakenOf = [method, String(url)];
      return open.apply(this, arguments);
    };
    XHR.send = function () {
      const of = this.__mminaTakenOf, asked = now();
      if (of) this.addEventListener('readystatechange', () => {
        if (this.readyState === 4 && this.status > 0) report(of[0], of[1], asked);
      });
      return send.apply(this, arguments);
    };
  }
})();""" % {"binding": TAKEN_BINDING}
"""Reports, in every document, when the page's own code got each answer to its ``fetch`` (the
promise resolved) and XHR (``readyState`` 4): a page busy with its own work (a dashboard laying
out its interface) gets an answer later than it arrived, and a replay hands it over at that
moment (``x-mmina-taken``, ``mmina.recorder.har``)."""


@dataclass(frozen=True)
class Taken:
    """One fetch/XHR answer as the page's code got it (wall-clock seconds of this machine)."""

    asked: float
    taken: float


class EventStreams:
    """EventSource messages by stream, in the order the streams were opened."""

    def __init__(self) -> None:
        self._urls: dict[str, str] = {}
        self._messages: dict[str, list[bytes]] = {}
        self._taken: dict[tuple[str, str], list[Taken]] = {}
        self.taps = BodyTaps()
        """The fetch/XHR bodies of the same context."""
        self.left = LeftBehind()
        """The bodies of documents the context's pages left as they loaded (``left_behind.py``)."""
        self.shared = SharedWorkers()
        """The context's SharedWorkers' traffic (``shared_workers.py``)."""

    @classmethod
    async def attach(cls, context: BrowserContext) -> EventStreams:
        """Listen to every EventSource the context's pages open (before any page opens)."""
        streams = cls()
        streams.shared.attach(context)
        await context.expose_binding(BINDING, streams._heard)
        await context.add_init_script(WRAPPER)
        await context.expose_binding(TAKEN_BINDING, streams._taken_by_page)
        await context.add_init_script(TAKEN)
        return streams

    async def listen(self, session: CDPSession) -> None:
        """Tap the network of the page behind ``session`` as it opens (``Tabs``, ``devtools.py``)."""
        self.left.listen(session)
        await self.taps.listen(session)
        await self.shared.listen(session)

    def _taken_by_page(self, _source: Any, method: str, url: str, asked_ms: float, taken_ms: float) -> None:
        self._taken.setdefault((method, url), []).append(Taken(asked_ms / 1e3, taken_ms / 1e3))

    def taken(self) -> dict[tuple[str, str], list[Taken]]:
        """When the page's code got each fetch/XHR answer (:data:`TAKEN`), by (method, URL), in
        the order the page asked."""
        return {key: sorted(found, key=lambda t: t.asked) for key, found in self._taken.items()}

    def _heard(self, _source: Any, stream: str, url: str, kind: str, data: str, event_id: str) -> None:
        if kind == "open":
            self._urls[stream] = url
        else:
            self._messages.setdefault(stream, []).append(event_text(kind, data, event_id))

    def bodies(self) -> dict[str, list[bytes]]:
        """Each stream's body (see the module), by URL, one per time the URL was opened."""
        found: dict[str, list[bytes]] = {}
        for stream, url in self._urls.items():
            found.setdefault(url, []).append(NO_RECONNECT + b"".join(self._messages.get(stream, [])))
        return found


def event_text(kind: str, data: str, event_id: str) -> bytes:
    """One message in the event-stream format."""
    lines = [f"id: {event_id}"] if event_id else []
    if kind != "message":
        lines.append(f"event: {kind}")
    lines += [f"data: {line}" for line in data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


TAPPED_TYPES = frozenset({"Fetch", "XHR"})
"""Resource types whose bodies a page may read as a stream (and abort): Chromium's HAR then
keeps none (Gradio's queue, served as server-sent events over ``fetch``)."""


@dataclass
class Tapped:
    """One response body as the network delivered it: its chunks, each with its arrival time
    in milliseconds after the response's headers."""

    method: str
    url: str
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    started: float = 0.0
    """The response's headers arrived (DevTools monotonic seconds)."""

    @property
    def body(self) -> bytes:
        return b"".join(chunk for _at, chunk in self.chunks)

    def timing(self) -> list[tuple[int, float]]:
        """(size, milliseconds after the headers) of each non-empty chunk."""
        return [(len(chunk), round(at, 1)) for at, chunk in self.chunks if chunk]


class BodyTaps:
    """The bodies of every page's fetch/XHR responses, byte for byte as they arrive, through
    the DevTools Network domain on the page's session of mmina's own beside Playwright's:
    ``Network.streamResourceContent`` gives what arrived before it was asked (its
    ``bufferedData``), and every later ``Network.dataReceived`` then carries its bytes. A
    stream the page aborts keeps what it had received."""

    def __init__(self) -> None:
        self._requests: dict[str, tuple[str, str]] = {}
        self._tapped: dict[str, Tapped] = {}
        self._order: list[str] = []

    async def listen(self, session: CDPSession) -> None:
        """Listen to the network of the page behind ``session`` (its DevTools session,
        ``devtools.py``: opened before the page loads anything, where the caller can)."""
        session.on("Network.requestWillBeSent", self._request)
        session.on("Network.responseReceived", lambda event: self._response(session, event))
        session.on("Network.dataReceived", self._data)
        session.on("Network.loadingFinished", lambda event: self._finished(session, event))
        await session.send("Network.enable")

    def _request(self, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        self._requests[event["requestId"]] = (request.get("method", "GET"), request.get("url", ""))

    def _response(self, session: CDPSession, event: dict[str, Any]) -> None:
        request_id = event["requestId"]
        if event.get("type") not in TAPPED_TYPES or request_id not in self._requests:
            return
        method, url = self._requests[request_id]
        self._tapped[request_id] = Tapped(method, url, started=float(event.get("timestamp") or 0.0))
        self._order.append(request_id)
        asyncio.ensure_future(self._stream(session, request_id))

    async def _stream(self, session: CDPSession, request_id: str) -> None:
        try:
            result = await session.send("Network.streamResourceContent", {"requestId": request_id})
        except PlaywrightError:
            return  # finished (or gone) before we asked: the HAR has what there was
        buffered = base64.b64decode(result.get("bufferedData") or "")
        tapped = self._tapped[request_id]
        tapped.chunks.insert(0, (0.0, buffered))

    def _finished(self, session: CDPSession, event: dict[str, Any]) -> None:
        tapped = self._tapped.get(event["requestId"])
        if tapped is not None and not tapped.body:
            asyncio.ensure_future(self._read(session, event["requestId"], tapped))

    async def _read(self, session: CDPSession, request_id: str, tapped: Tapped) -> None:
        """A body that finished before it could be streamed, read whole from our session.

        The HAR keeps none for the requests of a page restored from the back-forward cache
        (measured with Playwright 1.65: size -1), nor did streaming start in time for a short
        one; ``Network.getResponseBody`` on this session still has it (from the bodies Chromium
        keeps, ``devtools.PageSessions``, when the page has navigated away meanwhile)."""
        data = await response_body(session, request_id)
        if data and not tapped.body:
            tapped.chunks.append((0.0, data))

    def _data(self, event: dict[str, Any]) -> None:
        tapped = self._tapped.get(event["requestId"])
        if tapped is None or not event.get("data"):
            return
        at = (float(event.get("timestamp") or tapped.started) - tapped.started) * 1e3
        tapped.chunks.append((max(0.0, at), base64.b64decode(event["data"])))

    def bodies(self) -> dict[tuple[str, str], list[Tapped]]:
        """The tapped responses by (method, URL), in the order their responses arrived."""
        found: dict[tuple[str, str], list[Tapped]] = {}
        for request_id in self._order:
            tapped = self._tapped[request_id]
            found.setdefault((tapped.method, tapped.url), []).append(tapped)
        return found
