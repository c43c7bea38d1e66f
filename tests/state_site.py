"""A site that leaves state in the browser, for the hand-over tests of hop-conditioned episodes.

Plain ``http.server``, one host name (``HOST``) mapped to a free port. Its pages:

* ``/`` sets a server cookie (``visit``, a random value: a credential by rule, so the store
  keeps it redacted) and, from its script, a script cookie (``theme=dark``), ``localStorage``
  (``basket=oolong``) and ``sessionStorage`` (``note=first-tab``); it links to ``/two`` and opens
  ``/other`` in a new tab;
* ``/two`` links to ``/state``;
* ``/state`` shows what the browser brought: the cookies the server received (in the page and
  in :attr:`StateSite.hits`), and from its script the cookies, both storages and two clock
  readings (``Date.now()`` at load, then once 50 ms have passed, or after 20 million
  readings of a clock that does not move).

Every request is logged with its ``Cookie`` header, so a test can tell which requests reached
the live server and with what.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOST = "state.cond.test"
URL = f"http://{HOST}/"

PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body><main><h1>{title}</h1>{body}</main></body></html>"""
HOME = """<p>Welcome.</p><p><a href="/two">Two</a></p><p><a href="/other" target="_blank">Other in a new tab</a></p>
<script>
document.cookie = "theme=dark; path=/";
localStorage.setItem("basket", "oolong");
sessionStorage.setItem("note", "first-tab");
</script>"""
STATE = """<p id="server">server saw: {cookies}</p><p id="js">waiting</p>
<script>
const first = Date.now();
let later = first;
for (let i = 0; i < 20000000 && later - first < 50; i++) later = Date.now();
const pairs = store => Object.keys(store).sort().map(k => k + "=" + store.getItem(k)).join(", ") || "none";
document.getElementById("js").textContent = "js cookies: " + (document.cookie || "none") + " | local: " +
  pairs(localStorage) + " | session: " + pairs(sessionStorage) + " | clock: " + first + " then " + later;
</script>"""


class StateSite:
    """The site on a free local port: ``with StateSite() as site: ...``."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        """(path, Cookie header) of every request, in order."""
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def chromium_args(self) -> list[str]:
        assert self._server is not None, "the site is not running"
        return [f"--host-resolver-rules=MAP {HOST} 127.0.0.1:{self._server.server_address[1]}"]

    def log(self, path: str, cookies: str) -> None:
        with self.lock:
            self.hits.append((path, cookies))

    def take_hits(self) -> list[tuple[str, str]]:
        """The requests logged so far (and forget them)."""
        with self.lock:
            hits, self.hits = self.hits, []
        return hits

    def __enter__(self) -> StateSite:
        handler = type("Bound", (_Handler,), {"site": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="state-site", daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    site: StateSite

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        cookies = self.headers.get("Cookie", "")
        self.site.log(self.path, cookies)
        pages = {
            "/": ("Home", HOME),
            "/two": ("Two", '<p><a href="/state">State</a></p>'),
            "/other": ("Other", "<p>Another tab.</p>"),
            "/state": ("State", STATE.format(cookies=html.escape(cookies or "none"))),
        }
        if self.path not in pages:
            self._send(404, PAGE.format(title="Not found", body=""))
            return
        title, body = pages[self.path]
        extra = {"Set-Cookie": f"visit={secrets.token_hex(8)}; Path=/"} if self.path == "/" else {}
        self._send(200, PAGE.format(title=title, body=body), extra)

    def _send(self, status: int, text: str, extra: dict[str, str] | None = None) -> None:
        body = text.encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


SCRIPT: list[dict[str, Any]] = [
    {"action": "click", "target": {"role": "link", "name": "Other in a new tab"}},
    {"action": "tab_focus", "tab": 0},
    {"action": "click", "target": {"role": "link", "name": "Two"}},
    {"action": "click", "target": {"role": "link", "name": "State"}},
    {"action": "stop", "answer": "oolong"},
]
"""The oracle's way through the task: a second tab, back to the first, hop 1 on /two, hop 2 on
/state. Hop 1 completes at step 3 (the observation of /two), so ``--at-hop 2`` replays three steps."""


def write_task(folder: Path) -> Path:
    """The two-hop task over the site (``state/1``); returns the suite folder."""
    task = {
        "task_id": 1,
        "city": "",
        "flight": "",
        "shop": "",
        "intent": "Open the other page in a new tab, come back, go to Two, then to State; what is in the "
        "basket?",
        "start_url": URL,
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"must_include": ["oolong"]},
            "reference_url": f"{URL}state",
        },
        "cnt_hop": 3,
        "procedure": ["state", "state", "end"],
        "mmina_hops": [
            {"keyword": "state", "reference_url": f"{URL}two"},
            {"keyword": "state", "reference_url": f"{URL}state", "answer": "oolong"},
        ],
        "reference_script": SCRIPT,
    }
    (folder / "state").mkdir(parents=True, exist_ok=True)
    (folder / "state" / "1.json").write_text(json.dumps(task))
    return folder
