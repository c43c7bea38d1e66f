"""A small real web site for the observation tests, served on a free port.

* ``/`` — a harbour page whose news arrive by a follow-up request (``setTimeout(fetch('/late'), 0)``)
  put *above* everything else, and a "More boats" button that fetches ``/more``. With
  ``hold_late`` set, ``/late`` is answered only once ``/more`` was asked for: the follow-up lands
  one step later, as a slow network makes it do.
* ``/search`` — a search box whose suggestions come only from ``keyup`` (as many autocomplete
  widgets do), a box that already holds text, a password field, a ``<select>`` and a form
  that Enter submits (to ``/found``, which answers slowly, as a busy server does).
"""

from __future__ import annotations

import html
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HOLD_LIMIT_S = 60.0
FOUND_DELAY_S = 0.3
TEAS = ["Oolong Breeze", "Oolong Reserve", "Assam Gold", "Darjeeling First Flush", "Earl Grey"]

HARBOUR = """<!doctype html><html><head><title>Harbour</title></head><body><main>
<h1>Harbour news</h1>
<section id="late" aria-label="Latest"></section>
<ul id="boats"><li><a href="/boat/1">Morning Star</a></li><li><a href="/boat/2">Kittiwake</a></li>
<li><a href="/boat/3">Sea Breeze</a></li></ul>
<button id="more">More boats</button>
<p>Moorings: 12 free</p>
</main><script>
const item = (text) => { const li = document.createElement('li'); const a = document.createElement('a');
  a.href = '/boat/' + encodeURIComponent(text); a.textContent = text; li.append(a); return li; };
setTimeout(() => fetch('/late').then(r => r.json()).then(news => {
  for (const text of news) { const p = document.createElement('p'); p.textContent = text; late.append(p); }
  const link = document.createElement('a'); link.href = '/tides'; link.textContent = 'Tide tables: today';
  late.append(link); }), 0);
document.getElementById('more').addEventListener('click', () =>
  fetch('/more').then(r => r.json()).then(names => names.forEach(n => boats.append(item(n)))));
</script></body></html>"""

SEARCH = """<!doctype html><html><head><title>Tea search</title></head><body><main>
<label>Find a tea <input id="q" autocomplete="off"></label>
<ul id="suggestions" aria-label="Suggestions"></ul>
<p id="keys">no keys yet</p>
<p id="searched">nothing searched</p>
<label>Note <input id="note" value="old text"></label>
<label>Password <input id="password" type="password"></label>
<label>Size <select id="size"><option>Small</option><option>Large</option></select></label>
<form action="/found"><label>Order a tea <input name="tea"></label></form>
</main><script>
let keyups = 0;
const q = document.getElementById('q');
q.addEventListener('keyup', (event) => {
  document.getElementById('keys').textContent = 'keyups: ' + (++keyups);
  if (event.key === 'Enter') { document.getElementById('searched').textContent = 'searched for ' + q.value; return; }
  fetch('/suggest?q=' + encodeURIComponent(q.value)).then(r => r.json()).then(names => {
    const list = document.getElementById('suggestions');
    list.replaceChildren(...names.map(n => { \
const li = document.createElement('li'); li.textContent = n; return li; }));
  });
});
</script></body></html>"""


class HarbourSite:
    """The site on 127.0.0.1 and a free port; ``with HarbourSite() as site: site.url("/")``."""

    def __init__(self) -> None:
        self.hold_late = False
        self.released = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> HarbourSite:
        handler = type("BoundHandler", (_Handler,), {"site": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    site: HarbourSite

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        url = urlsplit(self.path)
        if url.path == "/":
            self._send(HARBOUR, "text/html")
        elif url.path == "/search":
            self._send(SEARCH, "text/html")
        elif url.path == "/late":
            if self.site.hold_late:
                self.site.released.wait(HOLD_LIMIT_S)
            self._send(
                json.dumps(["Storm warning: small craft stay in port", "Ferry at 10:40"]), "application/json"
            )
        elif url.path == "/more":
            self.site.released.set()
            self._send(json.dumps(["Puffin", "Guillemot"]), "application/json")
        elif url.path == "/found":
            time.sleep(FOUND_DELAY_S)
            tea = html.escape(parse_qs(url.query).get("tea", [""])[0])
            self._send(f"<!doctype html><title>Found</title><p>Found: {tea}</p>", "text/html")
        elif url.path == "/suggest":
            typed = parse_qs(url.query).get("q", [""])[0].lower()
            self._send(
                json.dumps([t for t in TEAS if typed and t.lower().startswith(typed)]), "application/json"
            )
        else:
            self._send("<!doctype html><title>Boat</title><p>A boat.</p>", "text/html")

    def _send(self, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the http.server signature
        pass
