"""The messages of the EventSource streams an episode opened.

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

from typing import Any

from playwright.async_api import BrowserContext

NO_RECONNECT = b"retry: 86400000\n\n"
BINDING = "__mminaEventSource"

WRAPPER = """(() => {
  const Native = window.EventSource;
  if (!Native || Native.__mmina) return;
  const documentId = crypto.getRandomValues(new Uint32Array(2)).join('-');  // not Math.random: replay seeds it
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
})();""" % {"binding": BINDING}


class EventStreams:
    """EventSource messages by stream, in the order the streams were opened."""

    def __init__(self) -> None:
        self._urls: dict[str, str] = {}
        self._messages: dict[str, list[bytes]] = {}

    @classmethod
    async def attach(cls, context: BrowserContext) -> "EventStreams":
        """Listen to every EventSource the context's pages open (before any page opens)."""
        streams = cls()
        await context.expose_binding(BINDING, streams._heard)
        await context.add_init_script(WRAPPER)
        return streams

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
