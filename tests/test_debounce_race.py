"""A debounce racing the agent's next action: a replay that types slower than its recording keeps
the page's time where the recording's typing left it.

The page posts a preview of its form 1 s after the last keystroke (as Trac's ticket form does, 2 s
after), and the next action types into the form again, which restarts the timer. When recorded, the
agent thinks long enough after the first field that the preview goes out shortly *before* its next
action. The replay types slower (each key 0.12 s apart, as a loaded machine's keys come: Trac's
summary took 367 ms replayed against 191 recorded): with the page's time running as real time
through the input, its timer ends after the replayed next action began, whose first key restarts
it, and the observation after it shows no preview (the control). With the input held to its
recorded length on the page's clock (``steps.dispatch_ms``, ``PacedSteps._hold_dispatch``), the
preview goes out where it went out when recorded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from playwright.async_api import Keyboard

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.pace import PacedSteps
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.local_site import HTML, LocalSite, scripted_suite, tree_lines

DEBOUNCE_MS = 1500
FORM = (
    """<!doctype html><html><body><h1>New ticket</h1>
<label>Summary <input id=summary></label> <label>Keywords <input id=keywords></label>
<p id=preview>No preview yet</p> <p id=draft>Not saved</p>
<script>
let timer = null, drafted = false;
function draft() {
  if (drafted) return;
  drafted = true;
  fetch('/draft', {method: 'POST'}).then(r => r.text())
    .then(text => { document.getElementById('draft').textContent = text; });
}
function preview() {
  const form = new URLSearchParams({summary: summary.value, keywords: keywords.value});
  fetch('/preview', {method: 'POST', body: form}).then(r => r.text())
    .then(text => { document.getElementById('preview').textContent = 'Preview: ' + text; });
}
for (const input of document.querySelectorAll('input'))
  for (const kind of ['keydown', 'input'])
    input.addEventListener(kind, () => { draft(); clearTimeout(timer); timer = setTimeout(preview, %d); });
</script></body></html>"""
    % DEBOUNCE_MS
)
SUMMARY = "The harbour light is out"
KEYWORDS = "lighthouse pier"
DRAFT_S = 0.7
"""The server takes this long to save the draft the first key sends: the recording's page settles that
long after its first key, so the observation after the summary comes about 0.8 s after its last key
(a replay's slower keys run the page's time up to that observation's moment at most)."""
THINK_S = 1.0
"""The agent's thinking before it types the keywords: the preview of the summary (1 s after its last
key) goes out about 0.3 s (the settling after the summary, plus the observation, plus this, less the
debounce) before that action when recorded; with the page's time standing at the observation after
the summary, it would go out 0.5 s less the observation's time after it."""
SLOW_KEY_MS = 120
"""How far apart the replay's keys come (the recording's: a few milliseconds): the replay's summary
takes about 2.9 s longer, far past the recorded preview's lead on the next action."""
SCRIPT = (
    {"action": "type", "target": {"role": "textbox", "name": "Summary"}, "text": SUMMARY, "think": 0.2},
    {"action": "type", "target": {"role": "textbox", "name": "Keywords"}, "text": KEYWORDS, "think": THINK_S},
    {"action": "stop", "answer": "done", "think": 0.2},
)
BROWSER = BrowserConfig()
NONE = "paragraph: No preview yet"


class _Form(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._send(HTML, FORM.encode())

    def do_POST(self) -> None:  # noqa: N802
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
        if self.path == "/draft":
            time.sleep(DRAFT_S)
            self._send("text/plain; charset=utf-8", b"Draft saved")
            return
        text = " / ".join(v for name in ("summary", "keywords") for v in form.get(name, []) if v)
        self._send("text/plain; charset=utf-8", text.encode())

    def _send(self, kind: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Any]]:
    folder = tmp_path_factory.mktemp("debounce")
    with LocalSite(_Form) as site:
        store = Store.open(folder / "store", create=True)
        suite = scripted_suite(folder / "tasks", "debounce", site.url, "Fill in the ticket.", SCRIPT)
        config = RecordConfig(tasks=str(suite), agent="tests.realweb.agents:ThinkingOracle", browser=BROWSER)
        yield store, record_run(store, config)


@pytest.fixture
def slow_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's keys come ``SLOW_KEY_MS`` apart, as a loaded machine's do."""
    typed = Keyboard.type

    async def slowly(self: Keyboard, text: str, *, delay: float | None = None) -> None:
        await typed(self, text, delay=SLOW_KEY_MS)

    monkeypatch.setattr(Keyboard, "type", slowly)


def _previews(store: Store, run_id: str) -> list[str]:
    """The preview's line at each step, its element id left out."""
    return [re.sub(r"^\[\w+\] ", "", line) for line in tree_lines(store, run_id, "preview", "Preview")]


def _recorded_race(store: Store, summary: Any) -> list[str]:
    """The recording's previews, step by step, checked to hold the race the test is about."""
    steps = sorted(store.read("steps", run_id=summary.run_id).to_pylist(), key=lambda r: r["step_index"])
    assert [s["action_kind"] for s in steps] == ["type", "type", "stop"]
    assert all(s["dispatch_ms"] and s["dispatch_ms"] > 0 for s in steps[:2])  # kept for the replay
    previews = _previews(store, summary.run_id)
    # at the start and after the summary: no preview yet; after the keywords: the summary's preview,
    # which went out before the agent began to type them
    moments = [
        (
            round((s["started_at"] - steps[0]["started_at"]).total_seconds(), 3),
            round((s["acted_at"] - steps[0]["started_at"]).total_seconds(), 3),
            s["dispatch_ms"],
        )
        for s in steps
    ]
    assert previews == [NONE, NONE, f"paragraph: Preview: {SUMMARY}"], (previews, moments)
    return previews


def test_a_slower_replayed_input_keeps_the_debounce_where_it_was(recorded, slow_keys) -> None:
    store, summary = recorded
    recorded_previews = _recorded_race(store, summary)
    report = replay_run(store, summary.run_id, browser=BROWSER)
    episode = report.episodes[0]
    replayed = store.read("steps", run_id=report.replay_run).to_pylist()
    slow = [s["dispatch_ms"] for s in sorted(replayed, key=lambda r: r["step_index"])[:2]]
    assert min(slow) > SLOW_KEY_MS * (len(KEYWORDS) - 1)  # the replay did type slower
    assert _previews(store, report.replay_run) == recorded_previews
    assert episode.fidelity == 1.0 and episode.requests.unmatched == 0


def test_control_the_page_time_running_through_the_input_loses_the_preview(
    recorded, slow_keys, monkeypatch
) -> None:
    store, summary = recorded
    recorded_previews = _recorded_race(store, summary)
    monkeypatch.setattr(PacedSteps, "_hold_dispatch", lambda self, index, step: None)
    report = replay_run(store, summary.run_id, browser=BROWSER)
    replayed = _previews(store, report.replay_run)
    assert replayed[2] == NONE != recorded_previews[2], replayed
    assert report.episodes[0].fidelity < 1.0


def test_a_store_without_dispatch_times_reads_them_as_unknown(tmp_path: Path) -> None:
    from mmina.replayer.pace import RecordedPace

    rows = [
        {"started_at": _at(0.5), "acted_at": _at(1.0), "url": "u", "tree_text": "t", "dispatch_ms": 180.0},
        {"started_at": _at(2.0), "acted_at": _at(2.5), "url": "u", "tree_text": "t"},
    ]
    pace = RecordedPace.of(_at(0.0), rows)
    assert pace is not None
    assert [s.dispatch for s in pace.steps] == [pytest.approx(0.18), None]


def _at(seconds: float) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime(2026, 12, 6, tzinfo=UTC) + timedelta(seconds=seconds)
