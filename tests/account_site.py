"""An account page that shows what a task's browser context brought: the login state and the
position (for ``storage_state`` and ``geolocation``, ``mmina.tasks.harness_context``).

Plain ``http.server`` on ``127.0.0.1`` (a page may read its position only on a secure origin, and
a loopback address is one). ``/`` says who is signed in, from the session cookie the server
receives, and from its script the basket kept in ``localStorage`` and the position the browser
gives (or why it gives none). :meth:`AccountSite.storage_state` is the state a user who logged
in would have saved (Playwright's ``context.storage_state`` format).
"""

from __future__ import annotations

import html
import secrets
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.local_site import LocalSite

USER = "Mira Kittiwake"
BASKET = "3 tide clocks"
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Your account</title></head>
<body><main><h1>Your account</h1><p id="who">{who}</p><p id="basket">Basket: loading</p>
<p id="where">Position: locating</p></main>
<script>
  document.getElementById('basket').textContent = 'Basket: ' + (localStorage.getItem('basket') || 'empty');
  let located = false;
  const show = text => {{ located = true; document.getElementById('where').textContent = 'Position: ' + text; }};
  navigator.geolocation.getCurrentPosition(
    p => show(p.coords.latitude.toFixed(4) + ', ' + p.coords.longitude.toFixed(4)),
    e => show('unavailable (' + e.message + ')'), {{timeout: 2000}});
  const wait = () => {{ if (!located) setTimeout(wait, 50); }};  // settling waits for timers due soon
  wait();
</script></body></html>"""


class AccountSite(LocalSite):
    """``with AccountSite() as site: site.url``; a session token drawn anew at every start."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        super().__init__(type("Handler", (_Handler,), {"site": self}))

    def storage_state(self) -> dict[str, Any]:
        """A signed-in user's saved state: the session cookie and the basket in ``localStorage``."""
        cookie = {
            "name": "session",
            "value": self.token,
            "domain": "127.0.0.1",
            "path": "/",
            "expires": -1,
            "httpOnly": True,
            "secure": False,
            "sameSite": "Lax",
        }
        return {
            "cookies": [cookie],
            "origins": [
                {"origin": self.url.rstrip("/"), "localStorage": [{"name": "basket", "value": BASKET}]}
            ],
        }


class _Handler(BaseHTTPRequestHandler):
    site: AccountSite

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        cookies = dict(c.split("=", 1) for c in (self.headers.get("Cookie") or "").split("; ") if "=" in c)
        signed_in = cookies.get("session") == self.site.token
        who = f"Signed in as {USER}" if signed_in else "Not signed in"
        body = PAGE.format(who=html.escape(who)).encode() if self.path == "/" else b""
        self.send_response(200 if self.path == "/" else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass
