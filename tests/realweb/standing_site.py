"""Two pages and a button, with or without requests that never end: a long-poll the server never
answers and a SharedWorker (whose script request gets no response event a page can see).

``tests/test_standing_requests.py`` records its episode and checks that a step on the page costs
no settling deadline; ``python -m bench --only realweb`` compares a step's cost with and without
them. Served by a plain ``http.server`` on a free port.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

PAGES = {
    "/": "<h1>Harbour</h1><a href='/two'>Tides</a>",
    "/two": "<h1>Tides</h1><button onclick=\"document.querySelector('p').textContent='High at noon'\">Read</button>"
            "<p>Not read</p><a href='/'>Harbour</a>",
}
NEVER_ENDING = ("<script>new SharedWorker('/worker.js');"
                "fetch('/poll?since=' + Date.now()).then(r => r.text()).catch(() => {});</script>")
SCRIPT = [
    {"action": "click", "target": {"role": "link", "name": "Tides"}},
    {"action": "click", "target": {"role": "button", "name": "Read"}},
    {"action": "click", "target": {"role": "link", "name": "Harbour"}},
    {"action": "stop", "answer": "done"},
]


class StandingSite:
    """``with StandingSite(never_ending=True) as site: site.suite(folder)``."""

    def __init__(self, never_ending: bool = True) -> None:
        self.never_ending = never_ending
        self.release = threading.Event()
        """Set at the end: the long-polls the server held return."""
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def suite(self, folder: Path, repeats: int = 1) -> Path:
        """The episode as ``repeats`` tasks of an MMInA-format suite in ``folder``; the suite's folder."""
        suite = folder / "standing"
        suite.mkdir(parents=True, exist_ok=True)
        for number in range(1, repeats + 1):
            (suite / f"{number}.json").write_text(json.dumps({
                "task_id": number, "intent": "Read the tides.", "start_url": self.url,
                "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["done"]}},
                "procedure": ["standing", "end"], "reference_script": SCRIPT}))
        return suite

    def __enter__(self) -> "StandingSite":
        handler = type("Handler", (_Handler,), {"site": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: StandingSite

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?")[0]
        if path == "/poll":
            self.site.release.wait(120)  # a long-poll nobody answers during the episode
            return
        if path == "/worker.js":
            status, body, kind = 200, b"onconnect = e => e.ports[0].postMessage('ready');", "text/javascript"
        elif path in PAGES:
            extra = NEVER_ENDING if self.site.never_ending else ""
            status, body, kind = 200, f"<!doctype html><title>{path}</title>{PAGES[path]}{extra}".encode(), "text/html"
        else:
            status, body, kind = 404, b"", "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass
