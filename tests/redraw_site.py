"""A page that hides its interface and shows it again in the next animation frame, as JupyterLab's
theme manager does with its shell (issue 56): in a browser, the frame callback runs before the page
is rendered again, so the button focused inside keeps the focus; a ``requestAnimationFrame`` run as a
timer of its own (Playwright's clock) lets the browser render the hidden interface first, and the
button loses it.

From its ``load`` (after mmina brought the tab to the front, which moves the focus too), the page
focuses the button and repeats the redraw ``REDRAWS`` times while it fetches data the server sends
after ``SLOW_DATA_S`` (so every redraw is done when settling lets the page be observed), then says
whether the focus stayed. ``tests/test_animation_frames.py`` records and replays it.
"""

from __future__ import annotations

import time

from tests.local_site import HTML, LocalSite, answering_handler

REDRAWS = 20
SLOW_DATA_S = 1.5
START_MS = 300
"""The redraws start this long after ``load``: past settling's first reads of the new document, each of
which, run between a hide and its frame, would blur the button as a rendering does (Chromium takes the
focus from an element it finds hidden whenever it computes the page's style)."""
KEPT = "Focus kept through every redraw"
LOST = "Focus lost in redraw"
PAGE = f"""<!doctype html><html><head><title>Redraws</title><style>.hidden {{ display: none }}</style></head>
<body><div id="shell"><button id="target">Check</button></div><p id="state">Redrawing</p>
<script>
const shell = document.getElementById('shell'), target = document.getElementById('target');
const state = document.getElementById('state'), channel = new MessageChannel();
let redraws = 0, lost = 0, data = null;
const done = () => {{
  if (redraws >= {REDRAWS} && data) state.textContent = lost ? `{LOST} ${{lost}}` : `{KEPT}, ${{data}}`;
}};
target.addEventListener('focusout', () => {{ lost = lost || redraws + 1; }});
channel.port1.onmessage = () => {{
  shell.classList.add('hidden');
  requestAnimationFrame(() => {{
    shell.classList.remove('hidden');
    if (++redraws < {REDRAWS}) channel.port2.postMessage(0);
    else done();
  }});
}};
addEventListener('load', () => {{
  target.focus();
  setTimeout(() => channel.port2.postMessage(0), {START_MS});
  fetch('/tides.txt').then(r => r.text()).then(text => {{ data = text; done(); }});
}});
</script></body></html>""".encode()
DATA = b"high water at noon"


def _answer(path: str) -> tuple[int, str, bytes]:
    if path.startswith("/tides.txt"):
        time.sleep(SLOW_DATA_S)
        return 200, "text/plain", DATA
    if path in ("/", "/redraw"):
        return 200, HTML, PAGE
    return 404, "text/plain", b"not here"


class RedrawSite(LocalSite):
    """``with RedrawSite() as site: site.url + "redraw"``."""

    def __init__(self) -> None:
        super().__init__(answering_handler(_answer))
