"""The window around a page, which a headless browser never shows, kept small.

Playwright sizes each page's window to its viewport (``Browser.setWindowBounds``, 1280×2048 by
default) beside emulating the viewport (``Emulation.setDeviceMetricsOverride``). Headless
Chromium composites that window in software every time the page submits a frame, at the
window's size, although nothing ever shows it: at 1280×2048 over a quarter of the GPU process's
CPU in a step (measured in ``docs/performance.md``: 0.055 → 0.040 core-seconds a step one
episode at a time, the same 1280×2048 screenshots byte for byte). So each page's window is made
``WINDOW_HEIGHT`` pixels high (the viewport's width) as the page appears, and its viewport
emulated again, as Playwright emulates it, on mmina's own DevTools session: the page keeps its
viewport (``innerWidth``, ``innerHeight``, media queries, ``screen``) and its screenshots; only
``outerHeight`` — the height of a window nobody sees — reads ``WINDOW_HEIGHT``, as with
Puppeteer, whose headless window stays at Chromium's 800×600 whatever the viewport.
"""

from __future__ import annotations

from playwright.async_api import CDPSession
from playwright.async_api import Error as PlaywrightError

from mmina.recorder.devtools import send

WINDOW_HEIGHT = 128
"""The window's height in pixels: the composited area is the window's, so a low window costs
little (128 and 1 cost the same within the noise; 800×600 a tenth more)."""


async def keep_window_small(session: CDPSession, width: int, height: int) -> None:
    """Make the window of the page behind ``session`` ``width`` × ``WINDOW_HEIGHT``, its
    ``width`` × ``height`` viewport kept (:func:`size_window`)."""
    await size_window(session, width, height, WINDOW_HEIGHT)


async def size_window(session: CDPSession, width: int, height: int, window_height: int) -> None:
    """Make the window of the page behind ``session`` ``width`` × ``window_height`` and emulate
    its ``width`` × ``height`` viewport again: a window made smaller takes the page's view down
    with it (the page still reads its viewport, but a screenshot would be the window's size), and
    emulating the viewport sizes the view again. If that fails, the window gets the viewport's
    size, so a screenshot is never cut to the window. A page that closed meanwhile, or a browser
    without windows, is left as it is."""
    try:
        window = (await send(session, "Browser.getWindowForTarget"))["windowId"]
        await _bounds(session, window, width, window_height)
    except (TimeoutError, PlaywrightError, KeyError):
        return
    try:
        await send(session, "Emulation.setDeviceMetricsOverride", viewport_metrics(width, height))
    except (TimeoutError, PlaywrightError):
        try:
            await _bounds(session, window, width, height)
        except (TimeoutError, PlaywrightError):
            return  # the page is gone, or the browser stopped answering: nothing left to size


async def _bounds(session: CDPSession, window: int, width: int, height: int) -> None:
    await send(
        session, "Browser.setWindowBounds", {"windowId": window, "bounds": {"width": width, "height": height}}
    )


def viewport_metrics(width: int, height: int) -> dict[str, object]:
    """``Emulation.setDeviceMetricsOverride``'s parameters as Playwright sends them for a desktop
    context with this viewport (the screen as large as the viewport)."""
    return {
        "mobile": False,
        "width": width,
        "height": height,
        "screenWidth": width,
        "screenHeight": height,
        "deviceScaleFactor": 1,
        "screenOrientation": {"angle": 0, "type": "landscapePrimary"},
    }
