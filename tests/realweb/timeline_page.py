"""A dashboard that prints time: a multi-MB script bundle, then data whose arrival it stamps
("Last updated 12:04:31.250") and a table of relative times ("7.25 seconds ago") that it computes as
it renders them, and a Refresh button that loads, stamps and renders the data again. (A table
re-rendered every second by an interval timer is not held to the second: docs/replay.md, "What
the recording's time does not hold".)

What its page shows depends on *when* each response reached it, so a replay whose clock ran on
the wall clock showed other text whenever it served the bundle slower than the live server had.
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
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Harbour board</title>
<script src="/bundle.js"></script></head>
<body><h1>Harbour board</h1><p id="updated">Loading</p><button id="refresh">Refresh</button>
<table><thead><tr><th>Boat</th><th>Berthed</th></tr></thead><tbody id="rows"></tbody></table>
<script>
  const ago = ms => (ms / 1000).toFixed(2) + ' seconds ago';
  let boats = [];
  const render = () => { document.getElementById('rows').innerHTML = boats.map(b =>
    '<tr><td>' + b.name + '</td><td>' + ago(Date.now() - b.berthed) + '</td></tr>').join(''); };
  const load = () => fetch('/api/boats').then(r => r.json()).then(data => {
    boats = data.boats;
    document.getElementById('updated').textContent = 'Last updated ' + new Date().toISOString().slice(11, 23);
    render();
  });
  document.getElementById('refresh').addEventListener('click', () => _.defer(load));
  load();
</script></body></html>"""
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
