"""A dashboard that prints time: a multi-MB script bundle, then data whose arrival it stamps
("Last updated 12:04:31") and a table of relative times ("7 seconds ago") that it computes as
it renders them, and a Refresh button that loads, stamps and renders the data again. (A table
re-rendered every second by an interval timer is not held to the second: docs/replay.md, "What
the recording's time does not hold".)

What its page shows depends on *when* each response reached it, so a replay whose clock ran on
the wall clock showed other text whenever it served the bundle slower than the live server had.
Served by a plain ``http.server`` on a free port; the data's times are drawn from the server's
own clock at every request, and the bundle is a real library from npm (lodash, about 0.5 MB)
padded to ``BUNDLE_MB`` with the kind of comment a big minified bundle carries.
"""
from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

from tests.realweb.installs import npm_packages

BUNDLE_MB = 6
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Harbour board</title>
<script src="/bundle.js"></script></head>
<body><h1>Harbour board</h1><p id="updated">Loading</p><button id="refresh">Refresh</button>
<table><thead><tr><th>Boat</th><th>Berthed</th></tr></thead><tbody id="rows"></tbody></table>
<script>
  const ago = ms => { const s = Math.floor(ms / 1000); return s < 60 ? s + ' seconds ago' : Math.floor(s / 60) + ' minutes ago'; };
  let boats = [];
  const render = () => { document.getElementById('rows').innerHTML = boats.map(b =>
    '<tr><td>' + b.name + '</td><td>' + ago(Date.now() - b.berthed) + '</td></tr>').join(''); };
  const load = () => fetch('/api/boats').then(r => r.json()).then(data => {
    boats = data.boats;
    document.getElementById('updated').textContent = 'Last updated ' + new Date().toISOString().slice(11, 19);
    render();
  });
  document.getElementById('refresh').addEventListener('click', () => _.defer(load));
  load();
</script></body></html>"""
NAMES = ("Morning Star", "Kittiwake", "Harbour Light", "Sea Holly")


class TimelineSite:
    """The dashboard on a free local port: ``with TimelineSite() as site: site.url``."""

    def __init__(self) -> None:
        library = (npm_packages(("lodash@4.17.21",)) / "lodash" / "lodash.min.js").read_bytes()
        padding = b"/*" + b"x" * (BUNDLE_MB * 1024 * 1024 - len(library)) + b"*/\n"
        self.bundle = padding + library
        self._draw = random.Random()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self) -> "TimelineSite":
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: TimelineSite

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        status, kind, body = self.site.answer(self.path)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass
