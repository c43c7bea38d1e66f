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
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

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


class ClockSite:
    """The page on a free local port: ``with ClockSite() as site: site.url``; ``hits`` counts
    the requests it answered."""

    def __init__(self) -> None:
        self.modules = npm_packages(LIBRARIES)
        self.token = secrets.token_hex(4)
        self.hits: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self) -> "ClockSite":
        handler = type("Handler", (_Handler,), {"site": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        parts = urlsplit(path)
        if parts.path == "/":
            return 200, "text/html; charset=utf-8", (PAGE % {"debounce": DEBOUNCE_MS}).encode()
        if parts.path == "/api/search":
            query = parse_qs(parts.query).get("q", [""])[0].lower()
            boats = [f"{b} ({self.token})" for b in BOATS if query and query in b.lower()]
            return 200, "application/json", json.dumps({"boats": boats}).encode()
        files = {"/vendor/rxjs.umd.min.js": self.modules / "rxjs/dist/bundles/rxjs.umd.min.js",
                 "/vendor/lodash.min.js": self.modules / "lodash/lodash.min.js"}
        if parts.path in files:
            return 200, "text/javascript", Path(files[parts.path]).read_bytes()
        return 404, "text/plain", b"not found"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: ClockSite

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self.site.hits.append(self.path)
        status, kind, body = self.site.answer(self.path)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass
