"""A SharedWorker's own requests routed to the archive: Playwright routes a shared worker's script
(it is the page's request) but none of the requests the worker makes itself (``importScripts``,
``fetch``), so the replay's router answers those through the worker's DevTools channel
(``mmina.recorder.web_workers``), with ``Fetch.enable`` there before the worker runs.

:class:`WorkerRoute` and :class:`WorkerRequest` are what the router asks of Playwright's ``Route``
and ``Request``, for one request paused in the worker (``Fetch.requestPaused``).
"""

from __future__ import annotations

import base64
from typing import Any

from mmina.recorder.web_workers import WorkerCallError, WorkerChannel

ANSWER_S = 10.0
"""A paused request's answer reaches the worker within this (else the call counts as failed)."""


class WorkerRequest:
    """A request a SharedWorker made, as Playwright's ``Request`` shows one."""

    def __init__(self, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        self.url: str = request.get("url", "")
        self.method: str = request.get("method", "GET")
        self.headers: dict[str, str] = {k.lower(): v for k, v in (request.get("headers") or {}).items()}
        self.resource_type: str = str(event.get("resourceType") or "other").lower()
        entries = request.get("postDataEntries") or []
        if entries:
            self.post_data_buffer: bytes | None = b"".join(
                base64.b64decode(e.get("bytes") or "") for e in entries
            )
        else:
            text = request.get("postData")
            self.post_data_buffer = text.encode() if text is not None else None

    def is_navigation_request(self) -> bool:
        return False


class WorkerRoute:
    """One request paused in a SharedWorker, answered as Playwright's ``Route`` answers one."""

    def __init__(self, channel: WorkerChannel, event: dict[str, Any]) -> None:
        self.channel, self.request_id = channel, event.get("requestId", "")
        self.request = WorkerRequest(event)

    async def fulfill(self, status: int, headers: dict[str, str], body: bytes) -> None:
        listed = [
            {"name": name, "value": value} for name, values in headers.items() for value in values.split("\n")
        ]
        await self._call(
            "Fetch.fulfillRequest",
            {
                "requestId": self.request_id,
                "responseCode": status,
                "responseHeaders": listed,
                "body": base64.b64encode(body).decode(),
            },
        )

    async def abort(self, error_code: str = "failed") -> None:
        await self._call("Fetch.failRequest", {"requestId": self.request_id, "errorReason": "Failed"})

    async def continue_(self, url: str | None = None) -> None:
        params: dict[str, Any] = {"requestId": self.request_id}
        if url is not None:
            params["url"] = url
        await self._call("Fetch.continueRequest", params)

    async def _call(self, method: str, params: dict[str, Any]) -> None:
        try:
            await self.channel.call(method, params, ANSWER_S)
        except TimeoutError:
            raise WorkerCallError(f"the worker did not take {method} within {ANSWER_S:g} s") from None
