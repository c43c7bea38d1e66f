"""Viewport screenshots over DevTools, with Playwright's screenshot as the fallback.

Playwright's ``page.screenshot`` first runs script in every frame of the page (to hide the
text caret, in an isolated world it may have to create and fill on a fresh page), waits for
web fonts, reads the layout, captures, then runs script in every frame again to clean up:
measured here, 14–40 ms more than DevTools' ``Page.captureScreenshot`` alone, for the same
bytes. So a screenshot here is one ``Runtime.evaluate`` (wait for the fonts; is focus in
something that shows a caret?) and one ``Page.captureScreenshot`` on the page's own DevTools
session. When focus is in a text field, an editable element or a frame (whose inside this
check cannot see), the caret could show, and it blinks: the capture is left to Playwright,
which hides it, so a screenshot never depends on the moment it was taken.
"""
from __future__ import annotations

import asyncio
import base64
from typing import Any

from playwright.async_api import BrowserContext, CDPSession, Error as PlaywrightError, Page

CARET_MAY_SHOW = """(async () => {
  try { await document.fonts.ready; } catch (e) {}
  const active = document.activeElement;
  if (!active) return false;
  return active.isContentEditable || /^(INPUT|TEXTAREA|SELECT|IFRAME|FRAME|OBJECT|EMBED)$/.test(active.tagName);
})()"""
"""True when Playwright should take the screenshot: the caret may be showing."""
SEND_TIMEOUT_S = 5.0
"""A DevTools call not answered within this gives way to Playwright's path (which has its own)."""


class Screenshots:
    """JPEG screenshots of one context's pages, each page with a DevTools session of its own."""

    def __init__(self, context: BrowserContext, quality: int) -> None:
        self.context, self.quality = context, quality
        self._sessions: dict[Page, CDPSession] = {}

    async def take(self, page: Page) -> bytes:
        """The viewport of ``page`` as JPEG."""
        session = await self.session(page)
        if session is not None and not await _caret_may_show(session):
            try:
                shot = await _send(session, "Page.captureScreenshot", {"format": "jpeg", "quality": self.quality})
                return base64.b64decode(shot["data"])
            except (PlaywrightError, TimeoutError):
                pass  # e.g. the page navigated away under the capture: Playwright's path tries again
        return await page.screenshot(type="jpeg", quality=self.quality)

    async def session(self, page: Page) -> CDPSession | None:
        """The page's DevTools session (None if one cannot be opened: Playwright's path then;
        ``freezing.py`` freezes the page over the same session)."""
        for gone in [p for p in self._sessions if p.is_closed()]:
            del self._sessions[gone]
        if page not in self._sessions:
            try:
                self._sessions[page] = await self.context.new_cdp_session(page)
            except PlaywrightError:
                return None
        return self._sessions[page]


async def _caret_may_show(session: CDPSession) -> bool:
    """Whether a caret may be visible (or the check itself failed: then assume it may)."""
    try:
        reply = await _send(session, "Runtime.evaluate", {"expression": CARET_MAY_SHOW, "awaitPromise": True,
                                                         "returnByValue": True})
    except (PlaywrightError, TimeoutError):
        return True
    return "exceptionDetails" in reply or reply.get("result", {}).get("value") is not False


async def _send(session: CDPSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.wait_for(session.send(method, params), SEND_TIMEOUT_S)
