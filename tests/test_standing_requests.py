"""Requests that never end never hold settling (issue 56, item 3): a long-poll the server never
answers and a SharedWorker (whose script request gets no response event a page can see) are in
flight for the whole episode; only the settling of the load that started them may wait for them,
as for any request, and every later step settles as fast as on a page without them."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store

PAGES = {
    "/": "<h1>Harbour</h1><a href='/two'>Tides</a>",
    "/two": "<h1>Tides</h1><button onclick=\"document.querySelector('p').textContent='High at noon'\">Read</button>"
            "<p>Not read</p><a href='/'>Harbour</a>",
}
SCRIPTS = ("<script>new SharedWorker('/worker.js');"
           "fetch('/poll?since=' + Date.now()).then(r => r.text()).catch(() => {});</script>")
SCRIPT = [
    {"action": "click", "target": {"role": "link", "name": "Tides"}},
    {"action": "click", "target": {"role": "button", "name": "Read"}},
    {"action": "click", "target": {"role": "link", "name": "Harbour"}},
    {"action": "stop", "answer": "done"},
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?")[0]
        if path == "/poll":
            self.release.wait(120)  # a long-poll nobody ever answers during the episode
            return
        if path == "/worker.js":
            body, kind = b"onconnect = e => e.ports[0].postMessage('ready');", "text/javascript"
        elif path in PAGES:
            body, kind = f"<!doctype html><title>{path}</title>{PAGES[path]}{SCRIPTS}".encode(), "text/html"
        else:
            body, kind = b"", "text/plain"
        self.send_response(200 if path in PAGES or path == "/worker.js" else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def test_a_step_on_a_page_with_requests_that_never_end_is_not_held(tmp_path: Path) -> None:
    release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Handler,), {"release": release}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    suite = tmp_path / "tasks" / "standing"
    suite.mkdir(parents=True)
    (suite / "1.json").write_text(json.dumps({
        "task_id": 1, "intent": "Read the tides.", "start_url": f"http://127.0.0.1:{server.server_address[1]}/",
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["done"]}},
        "procedure": ["standing", "end"], "reference_script": SCRIPT}))
    store = Store.open(tmp_path / "store", create=True)
    try:
        summary = record_run(store, RecordConfig(tasks=str(suite), agent="oracle",
                                                 browser=BrowserConfig(screenshots=False, set_of_marks=False)))
    finally:
        release.set()
        server.shutdown()
    assert summary.episodes[0].status == "completed"
    steps = sorted(store.read("steps", run_id=summary.run_id).to_pylist(), key=lambda r: r["step_index"])
    assert "High at noon" in steps[2]["tree_text"]
    # a click on the page where the poll and the worker stand (no navigation): held before for the
    # whole network-quiet deadline (3 s); the navigations start new ones, which their own load waits for
    assert steps[1]["action_ms"] < 1_500, [s["action_ms"] for s in steps]
