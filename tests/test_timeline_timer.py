"""A request a page's timer makes, on the recording's timeline (issue 56): the timer runs.

The timeline holds the page's time at the recorded moment of a request the page has not asked
for yet (``Timeline.expect``). A page that asks from a timer due a few milliseconds past that
moment (its timer was set that much later on the page's time than the recording's: the page ran
its script a little slower) could not ask while its time stood there: the replay stood still for
``EXPECTED_MAX_S`` (2 s) before the timer ran (seen on the shop's poll). The page's clock now
runs a timer due at most ``TIMER_GRACE_S`` past such a moment.

The page (served locally) asks ``/api/poll`` from a 600 ms timer after it loads and prints the
answer; its recording is replayed with the poll's recorded moment moved 30 ms earlier (as if the
recording's page had run its script that much faster), and the replayed page must ask no later
than the recorded gap plus a second, not two seconds late — where its timer was due within the grace:
the page sends when it set the timer (its clock's ``Date.now()``, a request header), and a loaded
machine that ran the page's script later on the page's time than the grace covers meets the known
limit (the poll up to ``EXPECTED_MAX_S`` late), which the test then bounds instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pytest

from mmina.recorder.browser import BrowserConfig
from mmina.replayer import archive, source
from mmina.replayer.page_clock import TIMER_GRACE_S
from mmina.replayer.replays import replay_run
from mmina.replayer.timeline import EXPECTED_MAX_S
from mmina.store import Store
from tests.local_site import record_thinking

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>Poll</title></head>
<body><h1>Poll</h1><p id="polled">Waiting</p><button>Show</button>
<script>
  const setAt = String(Date.now());
  setTimeout(() => fetch('/api/poll', {headers: {'x-timer-set-at': setAt}}).then(r => r.text()).then(t => {
    document.getElementById('polled').textContent = 'Polled ' + t;
  }), 600);
</script></body></html>"""
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Show"}, "think": 2.0},
    {"action": "stop", "answer": "done", "think": 0.5},
]
EARLIER_S = 0.03
"""How much earlier than the replayed page's timer the recording's page is made to have asked."""


def _answer(path: str) -> tuple[int, str, bytes]:
    if path.startswith("/api/poll"):
        return 200, "text/plain", b"seven boats"
    return 200, "text/html; charset=utf-8", PAGE


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, str]:
    return record_thinking(
        tmp_path_factory.mktemp("timer"), _answer, "poll", "Show the poll.", SCRIPT, BROWSER
    )


@pytest.fixture
def asked_earlier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's archive has the poll asked ``EARLIER_S`` earlier than recorded."""
    rows_to_exchanges = archive.exchanges_from_rows

    def earlier(rows: Iterable[dict], blobs: dict[str, bytes], start: int = 0) -> list[archive.Exchange]:
        return [
            dataclasses.replace(e, started_ms=e.started_ms - EARLIER_S * 1e3)
            if "/api/poll" in e.url and e.started_ms is not None
            else e
            for e in rows_to_exchanges(rows, blobs, start)
        ]

    monkeypatch.setattr(source, "exchanges_from_rows", earlier)


def _poll_after_document(store: Store, run_id: str) -> tuple[float, int]:
    """Seconds from the document's request to the poll's, in a run's one episode, and when the page
    set the poll's timer on its clock (epoch ms: in a replay, on the recording's timeline)."""
    rows: list[dict[str, Any]] = store.read("requests", run_id=run_id).to_pylist()
    started: dict[str, datetime] = {}
    set_at = 0
    for row in rows:
        kind = "poll" if "/api/poll" in row["url"] else "document" if row["url"].endswith("/") else None
        if kind and kind not in started and row.get("started_at"):
            started[kind] = row["started_at"]
        if kind == "poll":
            set_at = set_at or int(_header(row["request_headers"], "x-timer-set-at") or 0)
    assert set(started) == {"poll", "document"} and set_at, rows
    return (started["poll"] - started["document"]).total_seconds(), set_at


def _header(headers: Any, name: str) -> str | None:
    pairs = headers.items() if isinstance(headers, dict) else ((h["name"], h["value"]) for h in headers or ())
    return next((value for key, value in pairs if key.lower() == name), None)


def test_a_timer_due_just_past_a_requests_moment_runs(recorded, asked_earlier) -> None:
    assert EARLIER_S < TIMER_GRACE_S and EXPECTED_MAX_S >= 2.0
    store, run_id = recorded
    report = replay_run(store, run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.requests.unmatched == 0
    (recorded_gap, recorded_set), (replayed_gap, replayed_set) = (
        _poll_after_document(store, run_id),
        _poll_after_document(store, report.replay_run),
    )
    assert episode.fidelity == 1.0
    # how far past the poll's (moved) recorded moment the replayed page's timer was due, on its time
    due_past_ms = replayed_set - recorded_set + EARLIER_S * 1e3
    if due_past_ms <= TIMER_GRACE_S * 1e3:
        # held at the moved moment until EXPECTED_MAX_S ran out, the page asked about 2 s later than recorded
        assert replayed_gap < recorded_gap + 1.0, (recorded_gap, replayed_gap, due_past_ms)
    else:  # a loaded machine ran the page's script later on its time than the grace covers: the limit
        assert replayed_gap < recorded_gap + EXPECTED_MAX_S + 1.0, (recorded_gap, replayed_gap, due_past_ms)
