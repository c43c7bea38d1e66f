"""An independent little shop, written apart from mmina's fixture web (nothing imported from it).

Plain ``http.server.BaseHTTPRequestHandler`` with hand-written HTML, like a small shop's own
server. Every response carries ``Content-Type``, ``Content-Length`` and ``Date`` (and nothing
else unless said below); with ``no_store`` every response also says ``Cache-Control: no-store``.

Its volatile behaviours, the ones that make a site hard to replay:

* ``/`` sets a session cookie, fills its featured list from a cache-busted XHR
  (``/api/featured?_=<Date.now()>``) and sends a JSON POST beacon with a timestamp and a
  random nonce (``/api/beacon``);
* ``/catalog`` polls one JSON endpoint (``/api/stock``) three times, each answer different;
* ``/deals`` answers 302 to ``/deals-tmp?sess=<random>``, which answers 301 to ``/deals/today``;
* the search form POSTs ``/search`` with a random CSRF hidden field, checked by the server.

All random state (session ids, prices, stock counts, tokens) is drawn anew on every start, so
a restarted shop serves different bytes on the same URLs. The browser reaches the shop under
one fixed host name (``HOST``) mapped to whatever port the server got
(:meth:`IndieShop.chromium_args`), so recorded URLs stay valid across restarts.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HOST = "shop.indie.test"
TEAS = ("Oolong Breeze", "Smoky Lapsang", "Jasmine Pearl", "Oolong Reserve", "Mint Meadow")


class ShopState:
    """Everything random about one run of the shop."""

    def __init__(self) -> None:
        draw = secrets.SystemRandom()
        self.instance = secrets.token_hex(4)
        self.prices = {tea: f"{draw.randint(300, 2500) / 100:.2f}" for tea in TEAS}
        self.discounts = {tea: draw.randint(5, 40) for tea in TEAS}
        self.draw = draw
        self.csrf: set[str] = set()
        self.hits: list[tuple[str, str]] = []
        self.lock = threading.Lock()


class IndieShop:
    """The shop on a free local port: ``with IndieShop(no_store=True) as shop: ...``."""

    def __init__(self, no_store: bool = False) -> None:
        self.no_store = no_store
        self.state = ShopState()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "the shop is not running"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}/"

    @property
    def hits(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server received, in order."""
        with self.state.lock:
            return list(self.state.hits)

    def chromium_args(self) -> list[str]:
        return [f"--host-resolver-rules=MAP {HOST} 127.0.0.1:{self.port}"]

    def start(self) -> IndieShop:
        handler = type("BoundHandler", (ShopHandler,), {"shop": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="indie-shop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def restart(self) -> IndieShop:
        """Stop, draw new random state, start on a new port (same host name)."""
        self.stop()
        self.state = ShopState()
        return self.start()

    def __enter__(self) -> IndieShop:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - Corner Tea Shop</title></head>
<body>
<header><p>Corner Tea Shop</p>
<nav><a href="/">Home</a> | <a href="/catalog">Catalog</a> | <a href="/deals">Today's deals</a></nav></header>
<main><h1>{title}</h1>
{body}
</main>
</body></html>
"""


class ShopHandler(BaseHTTPRequestHandler):
    shop: IndieShop
    server_version = "CornerShop/1.0"

    def log_message(self, *_args: object) -> None:  # quiet
        pass

    # ------------------------------------------------------------ plumbing

    @property
    def state(self) -> ShopState:
        return self.shop.state

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response_only(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", formatdate(usegmt=True))
        if self.shop.no_store:
            self.send_header("Cache-Control", "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _page(self, title: str, body: str, extra: dict[str, str] | None = None) -> None:
        text = PAGE.format(title=html.escape(title), body=body)
        self._send(200, text.encode(), "text/html; charset=utf-8", extra)

    def _json(self, value: object) -> None:
        self._send(200, json.dumps(value).encode(), "application/json")

    def _redirect(self, status: int, location: str) -> None:
        self._send(status, b"", "text/html; charset=utf-8", {"Location": location})

    def _search_form(self) -> str:
        token = secrets.token_urlsafe(12)
        with self.state.lock:
            self.state.csrf.add(token)
        return (
            '<form method="post" action="/search" role="search">'
            f'<input type="hidden" name="csrf" value="{token}">'
            '<input type="search" name="q" aria-label="Search the shop">'
            '<button type="submit">Search</button></form>'
        )

    def _record_hit(self) -> None:
        with self.state.lock:
            self.state.hits.append((self.command, self.path))

    # ------------------------------------------------------------ routes

    def do_GET(self) -> None:
        self._record_hit()
        parts = urlsplit(self.path)
        route = {
            "/": self._home,
            "/catalog": self._catalog,
            "/deals": self._deals,
            "/deals-tmp": self._deals_tmp,
            "/deals/today": self._deals_today,
            "/api/featured": self._featured,
            "/api/stock": self._stock,
            "/favicon.ico": self._not_found,
        }.get(parts.path, self._not_found)
        route()

    def do_POST(self) -> None:
        self._record_hit()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path
        if path == "/api/beacon":
            self._beacon(body)
        elif path == "/search":
            self._search(body)
        else:
            self._not_found()

    def _not_found(self) -> None:
        self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _home(self) -> None:
        session = secrets.token_hex(16)
        body = (
            f"<p>Welcome! Loose-leaf teas since 1987.</p>{self._search_form()}"
            '<section><h2>Featured</h2><ul id="featured"><li>Loading featured teas</li></ul></section>'
            "<script>\n"
            "fetch('/api/featured?_=' + Date.now()).then(r => r.json()).then(items => {\n"
            "  document.getElementById('featured').innerHTML =\n"
            "    items.map(i => '<li>' + i.name + ', $' + i.price + '</li>').join('');\n"
            "});\n"
            "fetch('/api/beacon', {method: 'POST', headers: {'Content-Type': 'application/json'},\n"
            "  body: JSON.stringify({event: 'view', page: 'home', ts: Date.now(),\n"
            "                        nonce: Math.random().toString(36).slice(2)})});\n"
            "</script>"
        )
        self._page("Home", body, {"Set-Cookie": f"sid={session}; Path=/; SameSite=Lax"})

    def _featured(self) -> None:
        self._json([{"name": tea, "price": self.state.prices[tea]} for tea in TEAS[:3]])

    def _beacon(self, body: bytes) -> None:
        try:
            json.loads(body or b"{}")
        except ValueError:
            self._send(400, b"bad beacon\n", "text/plain; charset=utf-8")
            return
        self._send(204, b"", "text/plain; charset=utf-8")

    def _catalog(self) -> None:
        rows = "".join(f"<li>{html.escape(tea)}, ${self.state.prices[tea]}</li>" for tea in TEAS)
        body = (
            f'<ul>{rows}</ul><p id="stock">Checking stock</p>'
            "<script>\n"
            "let checks = 0;\n"
            "function poll() {\n"
            "  fetch('/api/stock').then(r => r.json()).then(s => {\n"
            "    checks += 1;\n"
            "    document.getElementById('stock').textContent = s.count + ' tins in stock (check ' + checks + ')';\n"
            "    if (checks < 3) poll();\n"
            "  });\n"
            "}\n"
            "poll();\n"
            "</script>"
        )
        self._page("Catalog", body)

    def _stock(self) -> None:
        self._json({"count": self.state.draw.randint(1, 500), "checked": formatdate(usegmt=True)})

    def _deals(self) -> None:
        self._redirect(302, f"/deals-tmp?sess={secrets.token_hex(8)}")

    def _deals_tmp(self) -> None:
        self._redirect(301, "/deals/today")

    def _deals_today(self) -> None:
        rows = "".join(f"<li>{html.escape(tea)}: {self.state.discounts[tea]}% off</li>" for tea in TEAS)
        self._page("Today's deals", f"<ul>{rows}</ul><p>Deal batch {self.state.instance}</p>")

    def _search(self, body: bytes) -> None:
        form = parse_qs(body.decode("utf-8", "replace"))
        token = (form.get("csrf") or [""])[0]
        with self.state.lock:
            valid = token in self.state.csrf
        if not valid:
            self._send(403, b"bad csrf token\n", "text/plain; charset=utf-8")
            return
        query = (form.get("q") or [""])[0].strip()
        found = [tea for tea in TEAS if query.lower() in tea.lower()] if query else []
        rows = (
            "".join(f"<li>{html.escape(tea)}, ${self.state.prices[tea]}</li>" for tea in found)
            or "<li>No teas</li>"
        )
        self._page(f"Results for {query}", f"{self._search_form()}<ul>{rows}</ul>")
