"""An answer the recording's page got late because it was busy, on the recording's timeline (issue 56).

A page busy with its own work when its data arrives (a dashboard laying out its interface while
its first callback's answer comes in) gets the data when the work is done, not when it arrived;
a replay's page may have done that work earlier, while its time stood still for the archive (a
bundle served late), and then got the data at its recorded arrival: it read an earlier time than
the recording's page did ("Last updated" one second apart, Dash at the page load). The recording
now keeps when the page's code got each fetch/XHR answer (``x-mmina-taken``) and a replay hands
the answer over at that moment.

The page (served locally) asks for its data and then, only where no replay clock is installed
(the recording), works for ``BUSY_MS`` before it can take the answer; it prints how long after
its script started it got the data. The replay's page does no such work, as a replayed page that
did it earlier does not: it must still get the data when the recording's did.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.har import TAKEN_HEADER
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.local_site import record_thinking

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
BUSY_MS = 400
PAGE = (
    b"""<!doctype html><html><head><meta charset="utf-8"><title>Berths</title></head>
<body><h1>Berths</h1><p id="got">Waiting</p><button>Show</button>
<script>
  const started = Date.now();
  fetch('/api/berths').then(r => r.text()).then(t => {
    document.getElementById('got').textContent = 'Got ' + t + ' after ' + (Date.now() - started) + ' ms';
  });
  if (!globalThis.__pwClock) { const t = performance.now(); while (performance.now() - t < %d) {} }
</script></body></html>"""
    % BUSY_MS
)
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Show"}, "think": 1.5},
    {"action": "stop", "answer": "done", "think": 0.5},
]
CLOSE_MS = 120
"""How close the replayed page's reading must be to the recorded one (the answer's hand-over, a
loaded machine's turns)."""


def _answer(path: str) -> tuple[int, str, bytes]:
    if path.startswith("/api/berths"):
        return 200, "text/plain", b"four berths"
    return 200, "text/html; charset=utf-8", PAGE


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, str]:
    return record_thinking(
        tmp_path_factory.mktemp("taken"), _answer, "berths", "Show the berths.", SCRIPT, BROWSER
    )


def _got_after(store: Store, run_id: str) -> list[int]:
    rows = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])
    return [
        int(found) for r in rows for found in re.findall(r"Got four berths after (\d+) ms", r["tree_text"])
    ]


def _berths_row(store: Store, run_id: str) -> dict[str, Any]:
    rows = [r for r in store.read("requests", run_id=run_id).to_pylist() if "/api/berths" in r["url"]]
    assert len(rows) == 1, rows
    return rows[0]


def test_the_recording_keeps_when_the_busy_page_got_its_answer(recorded) -> None:
    store, run_id = recorded
    row = _berths_row(store, run_id)
    taken = next(float(h["value"]) for h in row["response_headers"] if h["name"] == TAKEN_HEADER)
    assert taken >= BUSY_MS - 50 and taken > row["time_ms"] + 100, (taken, row["time_ms"])
    assert all(after >= BUSY_MS for after in _got_after(store, run_id))


def test_a_replayed_page_not_busy_gets_its_answer_when_the_recordings_did(recorded) -> None:
    store, run_id = recorded
    report = replay_run(store, run_id, browser=BROWSER)
    assert report.episodes[0].requests.unmatched == 0
    recorded_ms, replayed_ms = _got_after(store, run_id), _got_after(store, report.replay_run)
    assert recorded_ms and len(recorded_ms) == len(replayed_ms), (recorded_ms, replayed_ms)
    # handed over at its arrival, the page not busy read ~10 ms where the recording's read BUSY_MS
    assert all(abs(b - a) < CLOSE_MS for a, b in zip(recorded_ms, replayed_ms)), (recorded_ms, replayed_ms)
