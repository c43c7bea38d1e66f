"""A SharedWorker's traffic, which the browser's HAR does not have: its script's response and the
requests the worker makes itself (``importScripts``, ``fetch``, module imports).

Chromium reports a SharedWorker's script request to the page that started the worker, and its
response only to the worker; Playwright follows no shared worker, so its HAR keeps the request
with no response (status -1, no body), and none of the worker's own requests at all. So:

* **The script's response** is paused at the response stage by the page's DevTools session of
  mmina's own (``Fetch.enable`` for requests of type ``Other``, the type Chromium gives a worker's
  script; every other such request goes on at once): the body is read (``Fetch.getResponseBody``,
  the whole body, as the browser received it), and the response handed over only once the worker
  has its channel and scripts (``mmina.recorder.web_workers``: the request's network id is the
  worker's target id). Holding it holds the worker: it cannot run a line before its script
  arrives, so its first turn is seeded and on the replay's clock, like a dedicated worker's.
* **The worker's own requests** are read from its Network domain, enabled on its channel before
  its script is handed over: request, response, timing and body (``Network.getResponseBody``).

Both become HAR entries (:meth:`SharedWorkers.entries`, :func:`mmina.recorder.har.fill_scripts`),
so they are stored, redacted and replayed like any other response. A replay's router answers the
worker's own requests through the same channel (``mmina.replayer.worker_route``).
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from playwright.async_api import BrowserContext, CDPSession
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import send
from mmina.recorder.web_workers import WorkerChannel, WorkerScripts, WorkerStart, worker_scripts

SCRIPT_PATTERN = {"urlPattern": "*", "resourceType": "Other", "requestStage": "Response"}
"""What the page's session pauses: a worker's script is of type ``Other`` (so are few others)."""
BODY_READ_S = 10.0
"""A body is read within this (a worker's script, or a request of the worker's)."""


@dataclass
class WorkerExchange:
    """One request of a SharedWorker's (its script included), as a HAR entry has it."""

    method: str
    url: str
    started: float
    """When it was sent (seconds since the epoch)."""
    request_headers: dict[str, str] = field(default_factory=dict)
    post_data: str | None = None
    resource_type: str = "other"
    status: int = -1
    status_text: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    mime_type: str = ""
    body: bytes | None = None
    size: int = 0
    time_ms: float = -1.0
    redirect_url: str = ""

    def har_entry(self) -> dict[str, Any]:
        """This exchange in the HAR's format (``mmina.recorder.har``)."""
        content: dict[str, Any] = {
            "size": len(self.body) if self.body else self.size,
            "mimeType": self.mime_type,
        }
        if self.body:
            content |= {"encoding": "base64", "text": base64.b64encode(self.body).decode()}
        request: dict[str, Any] = {
            "method": self.method,
            "url": self.url,
            "headers": [{"name": k, "value": v} for k, v in self.request_headers.items()],
        }
        if self.post_data is not None:
            request["postData"] = {
                "mimeType": _header(self.request_headers, "content-type"),
                "text": self.post_data,
            }
        return {
            "startedDateTime": _har_time(self.started),
            "time": self.time_ms,
            "request": request,
            "response": {
                "status": self.status,
                "statusText": self.status_text,
                "headers": [{"name": k, "value": v} for k, v in self.headers],
                "content": content,
                "redirectURL": self.redirect_url,
            },
            "_resourceType": self.resource_type,
        }


class SharedWorkers:
    """One context's SharedWorker traffic (see the module)."""

    def __init__(self) -> None:
        self.scripts_fetched: list[WorkerExchange] = []
        """Workers' scripts, in the order their responses arrived (the HAR has their requests)."""
        self.exchanges: list[WorkerExchange] = []
        """The workers' own requests, in the order they were sent."""
        self._open: dict[tuple[str, str], tuple[WorkerExchange, float]] = {}
        """Requests in flight, by channel and request id, with when they were sent (DevTools' clock)."""
        self._workers: set[str] = set()
        """The target ids of the context's shared workers."""
        self._scripts: WorkerScripts | None = None
        self._busy: set[asyncio.Task[None]] = set()

    def attach(self, context: BrowserContext) -> None:
        """Follow every SharedWorker of ``context`` (before its first page opens)."""
        self._scripts = worker_scripts(context)
        self._scripts.on_shared(self._worker)

    async def listen(self, session: CDPSession) -> None:
        """Pause the worker scripts of the page behind ``session`` (its session of mmina's own, as it opens)."""
        session.on("Fetch.requestPaused", lambda event: self._spawn(self._paused(session, event)))
        await send(session, "Fetch.enable", {"patterns": [SCRIPT_PATTERN]})

    def entries(self) -> list[dict[str, Any]]:
        """The workers' own requests as HAR entries; one still in flight has no response (as the
        HAR has a page's: a long-poll replays as it was, unanswered)."""
        unfinished = {id(exchange) for exchange, _sent in self._open.values()}
        return [
            (replace(e, status=-1, headers=[], body=None, size=0) if id(e) in unfinished else e).har_entry()
            for e in self.exchanges
        ]

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._busy.add(task)
        task.add_done_callback(self._busy.discard)

    async def _paused(self, session: CDPSession, event: dict[str, Any]) -> None:
        """A response of type ``Other``: a SharedWorker's script is read, then handed over once the
        worker has its scripts; anything else goes on at once."""
        worker = event.get("networkId") or ""
        try:
            if self._scripts is None or not (worker in self._workers or worker in self._scripts.starting):
                return
            await self._scripts.ready(worker)
            self.scripts_fetched.append(await _script(session, event))
        except (TimeoutError, PlaywrightError):
            pass  # the page went away, or the body could not be read: the HAR keeps the request
        finally:
            try:
                await send(session, "Fetch.continueResponse", {"requestId": event["requestId"]})
            except (TimeoutError, PlaywrightError):
                pass  # the page went away meanwhile

    async def _worker(self, start: WorkerStart, channel: WorkerChannel) -> None:
        """Follow a SharedWorker's own requests (see the module); its Network domain is enabled
        before it runs (not waited for: a worker not started yet does not answer)."""
        self._workers.add(start.target_id)
        channel.on("Network.requestWillBeSent", lambda event: self._sent(channel, event))
        channel.on("Network.responseReceived", lambda event: self._response(channel, event))
        channel.on("Network.dataReceived", lambda event: self._data(channel, event))
        channel.on("Network.loadingFinished", lambda event: self._spawn(self._finished(channel, event)))
        channel.on("Network.loadingFailed", lambda event: self._failed(channel, event))
        await channel.post("Network.enable")

    def _sent(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        key = (channel.session_id, event.get("requestId", ""))
        redirect = event.get("redirectResponse")
        request = event.get("request") or {}
        now = float(event.get("timestamp") or 0.0)
        if redirect is not None and key in self._open:  # the same request id goes on to the redirect's target
            previous, sent = self._open.pop(key)
            _respond(previous, redirect)
            previous.redirect_url, previous.time_ms = request.get("url", ""), (now - sent) * 1e3
        exchange = WorkerExchange(
            request.get("method", "GET"),
            request.get("url", ""),
            float(event.get("wallTime") or 0.0) or datetime.now(UTC).timestamp(),
            dict(request.get("headers") or {}),
            request.get("postData"),
            str(event.get("type") or "other").lower(),
        )
        self.exchanges.append(exchange)
        self._open[key] = (exchange, now)

    def _response(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        found = self._open.get((channel.session_id, event.get("requestId", "")))
        if found is not None:
            _respond(found[0], event.get("response") or {})

    def _data(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        found = self._open.get((channel.session_id, event.get("requestId", "")))
        if found is not None:
            found[0].size += int(event.get("dataLength") or 0)

    async def _finished(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        found = self._open.pop((channel.session_id, event.get("requestId", "")), None)
        if found is None:
            return
        exchange, sent = found
        exchange.time_ms = (float(event.get("timestamp") or sent) - sent) * 1e3
        try:
            read = await channel.call(
                "Network.getResponseBody", {"requestId": event["requestId"]}, BODY_READ_S
            )
        except (TimeoutError, PlaywrightError):
            return  # the worker went away first: the body is missing, and its row says so
        text = read.get("body") or ""
        exchange.body = base64.b64decode(text) if read.get("base64Encoded") else text.encode()

    def _failed(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        found = self._open.pop((channel.session_id, event.get("requestId", "")), None)
        if found is not None:
            found[0].status = -1  # no response, as the HAR says of a failed request


def _respond(exchange: WorkerExchange, response: dict[str, Any]) -> None:
    exchange.status = int(response.get("status") or 0)
    exchange.status_text = response.get("statusText") or ""
    exchange.headers = list((response.get("headers") or {}).items())
    exchange.mime_type = response.get("mimeType") or ""


async def _script(session: CDPSession, event: dict[str, Any]) -> WorkerExchange:
    """A worker's script paused at its response: the exchange, its body read whole."""
    request = event.get("request") or {}
    status = int(event.get("responseStatusCode") or 0)
    headers = [(h["name"], h["value"]) for h in event.get("responseHeaders") or []]
    exchange = WorkerExchange(
        request.get("method", "GET"),
        request.get("url", ""),
        datetime.now(UTC).timestamp(),
        dict(request.get("headers") or {}),
        resource_type="script",
        status=status,
        status_text=event.get("responseStatusText") or "",
        headers=headers,
        mime_type=_header(dict(headers), "content-type").partition(";")[0].strip(),
    )
    if 300 <= status < 400:
        exchange.redirect_url = _header(dict(headers), "location")
        return exchange
    read = await send(session, "Fetch.getResponseBody", {"requestId": event["requestId"]}, BODY_READ_S)
    text = read.get("body") or ""
    exchange.body = base64.b64decode(text) if read.get("base64Encoded") else text.encode()
    return exchange


def _har_time(seconds: float) -> str:
    """A time as the HAR writes one (ISO 8601, milliseconds, UTC)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")
