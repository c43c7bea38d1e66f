"""Two pages and a button, with or without requests that never end: a long-poll the server never
answers and a SharedWorker (whose script request gets no response event a page can see).

``tests/test_standing_requests.py`` records its episode and checks that a step on the page costs
no settling deadline; ``python -m bench --only realweb`` compares a step's cost with and without
them. Served by a plain ``http.server`` on a free port.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

from tests.local_site import LocalSite, answering_handler, scripted_suite

PAGES = {
    "/": "<h1>Harbour</h1><a href='/two'>Tides</a>",
    "/two": "<h1>Tides</h1><button onclick=\"document.querySelector('p').textContent='High at noon'\">Read</button>"
    "<p>Not read</p><a href='/'>Harbour</a>",
}
NEVER_ENDING = (
    "<script>new SharedWorker('/worker.js');"
    "fetch('/poll?since=' + Date.now()).then(r => r.text()).catch(() => {});</script>"
)
SCRIPT = [
    {"action": "click", "target": {"role": "link", "name": "Tides"}},
    {"action": "click", "target": {"role": "button", "name": "Read"}},
    {"action": "click", "target": {"role": "link", "name": "Harbour"}},
    {"action": "stop", "answer": "done"},
]


class StandingSite(LocalSite):
    """``with StandingSite(never_ending=True) as site: site.suite(folder)``."""

    def __init__(self, never_ending: bool = True) -> None:
        self.never_ending = never_ending
        self.release = threading.Event()
        """Set at the end: the long-polls the server held return (unanswered)."""
        super().__init__(answering_handler(self.answer))

    def suite(self, folder: Path, repeats: int = 1) -> Path:
        """The episode as ``repeats`` tasks of an MMInA-format suite in ``folder``; the suite's folder."""
        return scripted_suite(folder, "standing", self.url, "Read the tides.", SCRIPT, repeats=repeats)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release.set()
        super().__exit__(kind, error, trace)

    def answer(self, path: str) -> tuple[int, str, bytes] | None:
        path = path.split("?")[0]
        if path == "/poll":
            self.release.wait(120)  # a long-poll nobody answers during the episode
            return None
        if path == "/worker.js":
            return 200, "text/javascript", b"onconnect = e => e.ports[0].postMessage('ready');"
        if path in PAGES:
            extra = NEVER_ENDING if self.never_ending else ""
            return 200, "text/html", f"<!doctype html><title>{path}</title>{PAGES[path]}{extra}".encode()
        return 404, "text/plain", b""
