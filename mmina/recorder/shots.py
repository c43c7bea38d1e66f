"""Viewport screenshots over DevTools, with Playwright's screenshot as the fallback.

Playwright's ``page.screenshot`` first runs script in every frame of the page (to hide the
text caret, in an isolated world it may have to create and fill on a fresh page), waits for
web fonts, reads the layout, captures, then runs script in every frame again to clean up:
measured here, 14–40 ms more than DevTools' ``Page.captureScreenshot`` alone, for the same
bytes. So a screenshot here is one ``Runtime.evaluate`` (wait for the fonts; is focus in
something that shows a caret?) and one ``Page.captureScreenshot`` on the page's own DevTools
session (``devtools.py``). When focus is in a text field, an editable element or a frame (whose
inside this check cannot see), the caret could show, and it blinks: the capture is left to Playwright,
which hides it, so a screenshot never depends on the moment it was taken.

The capture is taken from the page's view, not its compositor surface (``fromSurface: false``):
the same bytes (measured with the headless shell and the full Chromium, viewports from 390×844
at device scale 3 to 1920×1080 and 1280×2048, scrolled pages, cross-origin frames, video), but
a capture from the surface leaves two viewport-sized buffers behind in Chromium's GPU process
until the page next paints — ~20 MB for a 1280×2048 page, held all the time its agent thinks,
so ~20 MB more per episode in flight. From the view it costs ~6 core-ms more per capture
(``docs/performance.md``, "The screenshot").
"""

from __future__ import annotations

import base64

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import PageSessions, evaluate, send

NO_CARET_INPUTS = (
    "checkbox",
    "radio",
    "range",
    "color",
    "file",
    "submit",
    "button",
    "reset",
    "image",
    "hidden",
    "date",
    "time",
    "datetime-local",
    "month",
    "week",
)
"""The input types Chromium draws no caret in (measured: screenshots of each focused for 1.5 s).
Any other input, one of a type Chromium does not know included, is a text field with a caret."""

CARET_MAY_SHOW = """(async () => {
  try { await document.fonts.ready; } catch (e) {}
  let active = document.activeElement;
  while (active && active.shadowRoot && active.shadowRoot.activeElement) active = active.shadowRoot.activeElement;
  if (!active) return false;
  if (active.tagName === "INPUT") return !/^(NO_CARET)$/.test(active.type);
  return active.isContentEditable || /^(TEXTAREA|IFRAME|FRAME|OBJECT|EMBED)$/.test(active.tagName);
})()""".replace("NO_CARET", "|".join(NO_CARET_INPUTS))
"""True when Playwright should take the screenshot: the caret may be showing. Focus inside an
open shadow root is followed to its element; a select, a button, a link and the inputs of
``NO_CARET_INPUTS`` show none. (A text field inside a closed shadow root is out of reach of
this check and of Playwright's hiding alike: its caret may show in a screenshot.)"""


CAPTURE = {"format": "jpeg", "fromSurface": False}
"""``Page.captureScreenshot``'s parameters besides the quality (see the module)."""


class Screenshots:
    """JPEG screenshots of one context's pages, over each page's DevTools session (``devtools.py``)."""

    def __init__(self, sessions: PageSessions, quality: int) -> None:
        self.sessions, self.quality = sessions, quality

    async def take(self, page: Page) -> bytes:
        """The viewport of ``page`` as JPEG."""
        session = await self.sessions.get(page)
        if session is not None and not await _caret_may_show(session):
            try:
                shot = await send(session, "Page.captureScreenshot", {**CAPTURE, "quality": self.quality})
                return base64.b64decode(shot["data"])
            except (PlaywrightError, TimeoutError):
                pass  # e.g. the page navigated away under the capture: Playwright's path tries again
        return await page.screenshot(type="jpeg", quality=self.quality)


async def _caret_may_show(session: CDPSession) -> bool:
    """Whether a caret may be visible (or the check itself failed: then assume it may)."""
    try:
        return await evaluate(session, CARET_MAY_SHOW) is not False
    except (PlaywrightError, TimeoutError):
        return True
