"""A dashboard that prints time: a multi-MB script bundle, then data whose arrival it stamps
("Data arrived 12:04:31.150"), a table it lays out (``BUILD`` steps of work: a page takes tens
to hundreds of milliseconds to render what arrived) and stamps ("Last updated 12:04:31.250"), a
table of relative times ("7.250 seconds ago") that it computes as it renders them, a line an
interval timer started at the stamp rewrites every second ("Ticked 12.250 s after the first
berth"), and a Refresh button that loads, stamps and renders the data again.

What its page shows depends on *when* each response reached it and how long it then worked, so
a replay whose clock ran on the wall clock showed other text whenever it served the bundle slower
than the live server had, and one whose clock stood at the response's arrival while the page
worked on it stamped that much earlier (and its interval ticked that much earlier: at an
observation that fell just after a tick, "N seconds ago" read one second less).
It prints to the millisecond, so that a test can say how close the replay's readings are (a page
printing to the second shows the same text unless the small rest crosses a second).
Served by a plain ``http.server`` on a free port; the data's times are drawn from the server's
own clock at every request, and the bundle is a real library from npm (lodash, about 0.5 MB)
padded to ``BUNDLE_MB`` with the kind of comment a big minified bundle carries.
"""

from __future__ import annotations

import json
import random
import time
from urllib.parse import urlsplit

from tests.local_site import LocalSite, answering_handler
from tests.realweb.installs import npm_packages

BUNDLE_MB = 6
BUILD = 40_000_000
"""The steps of work the page does on its data before it stamps it (0.4 to 1.1 s at load 11-15)."""
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Harbour board</title>
<script src="/bundle.js"></script></head>
<body><h1>Harbour board</h1><p id="arrived"></p><p id="updated">Loading</p><p id="ticked"></p>
<button id="refresh">Refresh</button>
<table><thead><tr><th>Boat</th><th>Berthed</th></tr></thead><tbody id="rows"></tbody></table>
<script>
  const ago = ms => (ms / 1000).toFixed(3) + ' seconds ago', stamp = () => new Date().toISOString().slice(11, 23);
  let boats = [], ticking = null;
  const build = () => { let h = 0; for (let i = 0; i < %(build)d; i++) h = (h * 31 + i) | 0; return h; };
  const render = () => { document.getElementById('rows').innerHTML = boats.map(b =>
    '<tr><td>' + b.name + '</td><td>' + ago(Date.now() - b.berthed) + '</td></tr>').join(''); };
  const tick = () => { document.getElementById('ticked').textContent =
    'Ticked ' + ((Date.now() - boats[0].berthed) / 1000).toFixed(3) + ' s after the first berth'; };
  const load = () => fetch('/api/boats').then(r => r.json()).then(data => {
    boats = data.boats;
    document.getElementById('arrived').textContent = 'Data arrived ' + stamp();
    document.getElementById('rows').dataset.built = build();
    document.getElementById('updated').textContent = 'Last updated ' + stamp();
    render();
    clearInterval(ticking);
    ticking = setInterval(tick, 1000);
  });
  document.getElementById('refresh').addEventListener('click', () => _.defer(load));
  load();
</script></body></html>""" % {"build": BUILD}
NAMES = ("Morning Star", "Kittiwake", "Harbour Light", "Sea Holly")


class TimelineSite(LocalSite):
    """The dashboard on a free local port: ``with TimelineSite() as site: site.url``."""

    def __init__(self) -> None:
        library = (npm_packages(("lodash@4.17.21",)) / "lodash" / "lodash.min.js").read_bytes()
        padding = b"/*" + b"x" * (BUNDLE_MB * 1024 * 1024 - len(library)) + b"*/\n"
        self.bundle = padding + library
        self._draw = random.Random()
        super().__init__(answering_handler(self.answer))

    def answer(self, path: str) -> tuple[int, str, bytes]:
        route = urlsplit(path).path
        if route == "/":
            return 200, "text/html; charset=utf-8", PAGE.encode()
        if route == "/bundle.js":
            return 200, "text/javascript", self.bundle
        if route == "/api/boats":
            now = time.time() * 1e3
            boats = [{"name": n, "berthed": now - self._draw.uniform(3e3, 50e3)} for n in NAMES]
            return 200, "application/json", json.dumps({"boats": boats}).encode()
        return 404, "text/plain", b"not found"
