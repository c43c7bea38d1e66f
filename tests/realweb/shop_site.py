"""A small server-rendered shop that speaks HTTP/1.0 and sends no cache headers (issue 30, item 3).

Hand-written to reproduce what a held-out shop did to replay: after ``go_back`` its document
request ``GET /`` was never answered and the step passed its deadline. Everything the pages
could tell apart between two starts is random and drawn anew at each start (prices, stock, the
session cookie, CSRF fields, order numbers), and the pages add their own clock and randomness:

* a session cookie set on the first visit; the cart lives on the server, by that cookie;
* a cache-busted XHR (``/api/cart?_=<Date.now()>``) on every page load and on a back-forward
  cache restore (``pageshow`` with ``persisted``);
* a JSON beacon with a timestamp and a random nonce when a page loads, and another one on
  ``pagehide`` (sent as the page is left: a history navigation's beacon);
* polling (``/api/stock?since=<Date.now()>`` every second);
* "Add to cart" goes through a 302 then a 301, each with a random query;
* a POST checkout form with a random CSRF field.

Documents carry a repeated header (``Link``, twice). Responses are HTTP/1.0 without
``Content-Length`` (the body ends when the connection closes) and without ``Cache-Control``,
``Expires``, ``ETag`` or ``Last-Modified``. Run as a script (``python shop_site.py PORT``) for
the real-web check, or in-process with :class:`ShopSite`.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

if __package__ in (None, ""):  # run as a script (the real-web check starts it so)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.local_site import LocalSite  # noqa: E402 - after the path is set

ITEMS = ("Kittiwake lamp", "Mooring rope", "Tide clock")
LINKS = (("Link", '</api/cart>; rel="https://api.shop.test/"'), ("Link", "</?p=1>; rel=shortlink"))
"""A page's ``Link`` header twice, as WordPress sends them: a response Chromium serves from its
cache (a history navigation's document) reaches the recording with the two joined by a newline."""
PAGE_SCRIPT = """<script>
  const nonce = () => Math.random().toString(36).slice(2);
  const beacon = kind => navigator.sendBeacon('/beacon', JSON.stringify(
    {kind, page: location.pathname, ts: Date.now(), nonce: nonce()}));
  const cart = () => {
    const xhr = new XMLHttpRequest();
    xhr.open('GET', '/api/cart?_=' + Date.now());
    xhr.onload = () => { document.getElementById('cart').textContent = \
'Cart: ' + JSON.parse(xhr.responseText).count + ' items'; };
    xhr.send();
  };
  const poll = () => fetch('/api/stock?since=' + Date.now()).then(r => r.json()).then(data => {
    document.getElementById('stock').textContent = 'Lamps in stock: ' + data.stock;
  });
  cart();
  beacon('view');
  poll();
  setInterval(poll, 1000);
  addEventListener('pagehide', () => beacon('leave'));
  addEventListener('pageshow', event => { if (event.persisted) cart(); });
</script>"""


class Shop:
    """The shop's random state (drawn anew at every start) and its pages."""

    def __init__(self) -> None:
        self.salt = secrets.token_hex(3)
        self.prices = {item: secrets.randbelow(9000) / 100 + 5 for item in ITEMS}
        self.stock = secrets.randbelow(90) + 10
        self.carts: dict[str, list[str]] = {}
        self.orders: dict[str, str] = {}
        self.hits: list[str] = []
        self.lock = threading.Lock()

    def page(self, title: str, body: str) -> bytes:
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h1>{title}</h1><p id='cart'>Cart: loading</p><p id='stock'>Lamps in stock: ?</p>{body}"
            f"<p><a href='/'>Home</a> <a href='/cart'>Your cart</a></p>{PAGE_SCRIPT}</body></html>"
        ).encode()

    def home(self, order: str) -> bytes:
        links = "".join(
            f"<li><a href='/item/{n}'>{item}</a> ({self.prices[item]:.2f} EUR)</li>"
            for n, item in enumerate(ITEMS, start=1)
        )
        placed = f"<p>{self.orders[order]}</p>" if order in self.orders else ""
        return self.page(f"Harbour shop {self.salt}", f"{placed}<ul>{links}</ul>")

    def item(self, number: int) -> bytes:
        item = ITEMS[number - 1]
        add = f"/add?item={number}&r={secrets.token_hex(4)}"
        return self.page(
            item, f"<p>Price {self.prices[item]:.2f} EUR</p><p><a href='{add}'>Add to cart</a></p>"
        )

    def cart(self, session: str) -> bytes:
        lines = "".join(f"<li>{item}</li>" for item in self.carts.get(session, [])) or "<li>Nothing yet</li>"
        form = (
            f"<form method='post' action='/checkout'><input type='hidden' name='csrf' "
            f"value='{secrets.token_hex(12)}'><label>Name <input name='name'></label>"
            "<button>Place order</button></form>"
        )
        return self.page("Your cart", f"<ul>{lines}</ul>{form}")

    def checkout(self, session: str, fields: dict[str, list[str]]) -> str:
        """Places the order (the cart is emptied); its number, for the page redirected to."""
        who = fields.get("name", ["nobody"])[0]
        order = f"{self.salt}-{secrets.randbelow(10**6)}"
        self.orders[order] = f"Order {order} for {who}: {len(self.carts.pop(session, []))} items"
        return order


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "shop"
    shop: Shop

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._serve(b"")

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _serve(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        with self.shop.lock:
            self.shop.hits.append(f"{self.command} {self.path}")
        cookie = self.headers.get("Cookie") or ""
        session = next((c.split("=", 1)[1] for c in cookie.split("; ") if c.startswith("shop_session=")), "")
        new_session = "" if session else secrets.token_hex(8)
        status, headers, content = self._route(
            parts.path, parse_qs(parts.query), session or new_session, body
        )
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if new_session:
            self.send_header("Set-Cookie", f"shop_session={new_session}; Path=/")
        self.end_headers()  # HTTP/1.0, no Content-Length: the body ends when the connection closes
        self.wfile.write(content)

    def _route(
        self, path: str, query: dict[str, list[str]], session: str, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        html = [("Content-Type", "text/html; charset=utf-8"), *LINKS]
        shop = self.shop
        if path == "/":
            return 200, html, shop.home(query.get("order", [""])[0])
        if path.startswith("/item/") and path[6:].isdigit() and 1 <= int(path[6:]) <= len(ITEMS):
            return 200, html, shop.item(int(path[6:]))
        if path == "/add":
            shop.carts.setdefault(session, []).append(ITEMS[int(query.get("item", ["1"])[0]) - 1])
            return 302, [("Location", f"/added?r={secrets.token_hex(4)}")], b""
        if path == "/added":
            return 301, [("Location", f"/?r={secrets.token_hex(4)}")], b""
        if path == "/thanks":
            return 301, [("Location", f"/?order={query.get('order', [''])[0]}&r={secrets.token_hex(4)}")], b""
        if path == "/cart":
            return 200, html, shop.cart(session)
        if path == "/checkout" and self.command == "POST":
            order = shop.checkout(session, parse_qs(body.decode()))
            return 302, [("Location", f"/thanks?order={order}&r={secrets.token_hex(4)}")], b""
        if path == "/api/cart":
            return (
                200,
                [("Content-Type", "application/json")],
                json.dumps({"count": len(shop.carts.get(session, []))}).encode(),
            )
        if path == "/api/stock":
            return 200, [("Content-Type", "application/json")], json.dumps({"stock": shop.stock}).encode()
        if path == "/beacon":
            return 204, [], b""
        return 404, [("Content-Type", "text/plain")], b"not found"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class ShopSite(LocalSite):
    """The shop on a local port (``port=0``: a free one): ``with ShopSite() as site: site.url``;
    ``shop.hits`` lists every request it answered."""

    def __init__(self, port: int = 0) -> None:
        self.shop = Shop()
        super().__init__(type("Handler", (_Handler,), {"shop": self.shop}), port)


if __name__ == "__main__":
    with ShopSite(int(sys.argv[1])) as running:
        threading.Event().wait()
