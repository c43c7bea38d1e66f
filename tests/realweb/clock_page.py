"""A page that needs a clock that moves: search-as-you-type with the real RxJS ``debounceTime``,
a lodash ``debounce`` and ``throttle``, the time it loaded at, a random number, ids drawn from
``crypto``, and a "Loading" state replaced by a ``setTimeout(0)`` follow-up after its XHR.

Served with the two libraries as npm installs them (``installs.npm_packages``) by a plain
``http.server`` on a free port; ``/api/search`` answers with a random token drawn anew at every
start, so a replay that asked the live server would show other words.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.local_site import LocalSite, answering_handler
from tests.realweb.installs import npm_packages

LIBRARIES = ("rxjs@7.8.2", "lodash@4.17.21")
DEBOUNCE_MS = 300

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Harbour search</title>
<script src="/vendor/rxjs.umd.min.js"></script><script src="/vendor/lodash.min.js"></script></head>
<body><h1>Harbour search</h1>
<p id="loaded"></p><p id="random"></p><p id="drawn"></p>
<label>Search boats <input id="q" type="search"></label>
<p id="status">Type to search</p><ul id="results"></ul>
<button id="save">Save notes</button><p id="saved">Not saved</p>
<button id="count">Count visits</button><p id="visits">Visits counted 0</p>
<script>
  document.getElementById('loaded').textContent = 'Loaded at ' + new Date().toISOString().slice(0, 16);
  document.getElementById('random').textContent = 'Lucky number ' + Math.floor(Math.random() * 1e6);
  document.getElementById('drawn').textContent = 'Request id ' + crypto.getRandomValues(new Uint32Array(2)).join('-') +
    ' ' + crypto.randomUUID();
  const status = document.getElementById('status');
  rxjs.fromEvent(document.getElementById('q'), 'input').pipe(
    rxjs.operators.map(e => e.target.value), rxjs.operators.debounceTime(%(debounce)d),
    rxjs.operators.distinctUntilChanged()
  ).subscribe(q => {
    status.textContent = 'Loading results for ' + q;
    fetch('/api/search?q=' + encodeURIComponent(q) + '&_=' + Date.now()).then(r => r.json()).then(data => {
      setTimeout(() => {
        status.textContent = data.boats.length + ' boats match ' + q;
        document.getElementById('results').innerHTML = data.boats.map(b => '<li>' + b + '</li>').join('');
      }, 0);
    });
  });
  document.getElementById('save').addEventListener('click', _.debounce(() => {
    document.getElementById('saved').textContent = 'Saved at ' + new Date().toISOString().slice(0, 16);
  }, 200));
  let visits = 0;
  document.getElementById('count').addEventListener('click', _.throttle(() => {
    visits += 1;
    document.getElementById('visits').textContent = 'Visits counted ' + visits;
  }, 100, {leading: false, trailing: true}));
</script></body></html>"""
BOATS = ("Morning Star", "Kittiwake", "Harbour Light", "Sea Holly", "Harbour Master")


class ClockSite(LocalSite):
    """The page on a free local port: ``with ClockSite() as site: site.url``; ``hits`` counts
    the requests it answered."""

    def __init__(self) -> None:
        self.modules = npm_packages(LIBRARIES)
        self.token = secrets.token_hex(4)
        self.hits: list[str] = []
        super().__init__(answering_handler(self._hit))

    def _hit(self, path: str) -> tuple[int, str, bytes]:
        self.hits.append(path)
        return self.answer(path)

    def answer(self, path: str) -> tuple[int, str, bytes]:
        parts = urlsplit(path)
        if parts.path == "/":
            return 200, "text/html; charset=utf-8", (PAGE % {"debounce": DEBOUNCE_MS}).encode()
        if parts.path == "/api/search":
            query = parse_qs(parts.query).get("q", [""])[0].lower()
            boats = [f"{b} ({self.token})" for b in BOATS if query and query in b.lower()]
            return 200, "application/json", json.dumps({"boats": boats}).encode()
        files = {
            "/vendor/rxjs.umd.min.js": self.modules / "rxjs/dist/bundles/rxjs.umd.min.js",
            "/vendor/lodash.min.js": self.modules / "lodash/lodash.min.js",
        }
        if parts.path in files:
            return 200, "text/javascript", Path(files[parts.path]).read_bytes()
        return 404, "text/plain", b"not found"
