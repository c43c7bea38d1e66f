"""One DevTools session per page, opened as the page appears, for what mmina asks Chromium itself.

Every page of an episode gets one session of mmina's own beside Playwright's, opened when the
page appears (before it loads anything, where the caller can wait for it): it taps the page's
network (``streams.BodyTaps``), takes its screenshots (``shots.py``), freezes its animations
while the agent thinks (``freezing.py``) and runs the few scripts mmina asks a page for
(:func:`evaluate`: is the document ready, let the page turn, which images are in view). A second
session, silent, has Chromium keep the page's latest response bodies after it navigates away
(:func:`_body_keeper`).

Why not Playwright's ``page.evaluate`` and ``wait_for_function`` for those scripts: each new
document first gets Playwright's own scripts installed into its main world (its utility script
for arguments and results, and for ``wait_for_function`` its ~300 KB injected script), measured
at ~25 core-milliseconds per navigation of a small page, most of it in the renderer — a sixth of
a navigation's cost. mmina's scripts take JSON and give JSON, which ``Runtime.evaluate`` does
without any of that. (Playwright's injected script in its isolated world stays: the
accessibility tree and the actions' locators need it.)
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import BrowserContext, CDPSession, Page
from playwright.async_api import Error as PlaywrightError

SEND_TIMEOUT_S = 5.0
"""A DevTools call of mmina's not answered within this is given up (the caller decides what then)."""

REREAD_S = 0.5
"""A body not found at once is asked for again after this (see :func:`response_body`)."""

DURABLE_BYTES = 8 * 1024 * 1024
"""How many bytes of a page's latest response bodies Chromium keeps in the browser process for
reading after the document that loaded them is gone (``Network.configureDurableMessages``)."""

Listener = Callable[[CDPSession], Awaitable[None]]
"""Run on each page's session as it opens, before the page loads anything (e.g. enable a domain)."""


class PageSessions:
    """The DevTools sessions of one context's pages (on the browser's event loop)."""

    def __init__(self, context: BrowserContext, listener: Listener | None = None) -> None:
        self.context, self.listener = context, listener
        self._opening: dict[Page, asyncio.Future[CDPSession | None]] = {}
        self._keepers: dict[Page, CDPSession | None] = {}

    def open(self, page: Page) -> None:
        """Start opening ``page``'s session (from the context's ``page`` event)."""
        if page not in self._opening:
            self._opening[page] = asyncio.ensure_future(self._open(page))

    async def _open(self, page: Page) -> CDPSession | None:
        try:
            session = await asyncio.wait_for(self.context.new_cdp_session(page), SEND_TIMEOUT_S)
        except (TimeoutError, PlaywrightError):
            return None  # the page closed first, or the browser does not answer: nothing of it to ask
        self._keepers[page] = await _body_keeper(self.context, page)
        if self.listener is not None:
            try:
                await asyncio.wait_for(self.listener(session), SEND_TIMEOUT_S)
            except (TimeoutError, PlaywrightError):
                pass  # the page closed meanwhile; a session that still answers stays of use
        return session

    async def get(self, page: Page) -> CDPSession | None:
        """``page``'s session once it is open (None if it could not be: the page closed, or
        the browser did not let it open); a page the event has not announced yet is opened now."""
        for gone in [p for p in self._opening if p.is_closed() and p is not page]:
            del self._opening[gone]
            self._keepers.pop(gone, None)
        self.open(page)
        return await self._opening[page]

    @property
    def held(self) -> int:
        """How many pages' sessions are held (those of closed pages are let go)."""
        return len(self._opening)


async def _body_keeper(context: BrowserContext, page: Page) -> CDPSession | None:
    """A session of the page that only has Chromium keep its latest response bodies
    (``DURABLE_BYTES``, the oldest let go first) outside the renderer, so a body can still be read
    after the page navigated away; None where it could not (a Chromium older than 2025 records as before).

    Without it a body is kept only by the document that loaded it: a page that navigates as its
    load finishes (one that redirects itself by script, a link clicked while a poll answers)
    drops the bodies not yet read when the next document commits, and ``Network.getResponseBody``
    then finds no such resource, for the network tap and for Playwright's HAR alike (which reads
    each body on its own session as its load finishes; on a loaded machine, after the commit).
    The kept bodies serve every session of the page. It is a session of its own, with no domain
    enabled: configured on the tap's session, Chromium's ``Network.streamResourceContent`` there
    no longer hands over what a stream had received before it was asked."""
    try:
        keeper = await asyncio.wait_for(context.new_cdp_session(page), SEND_TIMEOUT_S)
        await send(
            keeper,
            "Network.configureDurableMessages",
            {"maxTotalBufferSize": DURABLE_BYTES, "maxResourceBufferSize": DURABLE_BYTES},
        )
    except (TimeoutError, PlaywrightError):
        return None
    return keeper


class PageScriptError(PlaywrightError):
    """A script mmina ran in a page threw, or its value could not be returned."""


async def send(
    session: CDPSession, method: str, params: dict[str, Any] | None = None, seconds: float = SEND_TIMEOUT_S
) -> dict[str, Any]:
    """The answer to one DevTools call of mmina's, within ``seconds`` (else ``asyncio.TimeoutError``)."""
    return await asyncio.wait_for(session.send(method, params), seconds)


async def evaluate(session: CDPSession, expression: str, seconds: float = SEND_TIMEOUT_S) -> Any:
    """The JSON value of ``expression`` in the page's main world (a promise is awaited), within
    ``seconds``. A page that navigates away meanwhile, or a session gone, raises Playwright's
    ``Error``, as the script throwing does (:class:`PageScriptError`); past ``seconds``,
    ``asyncio.TimeoutError``."""
    reply = await send(
        session,
        "Runtime.evaluate",
        {"expression": expression, "awaitPromise": True, "returnByValue": True},
        seconds,
    )
    if "exceptionDetails" in reply:
        details = reply["exceptionDetails"]
        raise PageScriptError(
            (details.get("exception") or {}).get("description") or details.get("text", "script failed")
        )
    return (reply.get("result") or {}).get("value")


async def response_body(session: CDPSession, request_id: str) -> bytes | None:
    """A response's body by ``Network.getResponseBody``, asked again once after ``REREAD_S`` (a
    body whose document was just replaced reaches the bodies Chromium keeps a moment later);
    None when neither answered."""
    for attempt in range(2):
        try:
            result = await send(session, "Network.getResponseBody", {"requestId": request_id})
        except (TimeoutError, PlaywrightError):
            if attempt == 0:
                await asyncio.sleep(REREAD_S)
            continue
        body = result.get("body") or ""
        return base64.b64decode(body) if result.get("base64Encoded") else body.encode()
    return None


BETWEEN_DOCUMENTS = (
    "Inspected target navigated",
    "Execution context was destroyed",
    "Cannot find default execution context",
)
"""How Chromium answers a script asked of a page whose document is being replaced."""


def between_documents(exc: PlaywrightError) -> bool:
    """Whether a script failed because its document went away under it (a navigation
    committing): the next document can be asked the same."""
    return any(text in str(exc) for text in BETWEEN_DOCUMENTS)


def call(function: str, *args: Any) -> str:
    """An expression calling the script ``function`` (``(a, b) => ...``) with JSON arguments."""
    return f"({function})({', '.join(json.dumps(a) for a in args)})"
