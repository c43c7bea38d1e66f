"""When a recorded observation saw the page (issue 56): at the start of its tree read.

A replay on the recording's timeline holds the page's time at each observation's recorded moment
and reads the page there. The accessibility snapshot is one task in the page: it reads the page as
it was when the read began, however long the read then takes (a big page on a loaded machine:
hundreds of milliseconds). The moment was the middle of the read, so a replay of a long read let
the page's timers run that much further than the recording's had before it read the page: a
notification due to go just after the read began was gone in the replay (NbClassic's "Kernel
ready", 50 ms into a 99 ms read).

The page (served locally) shows "Started" when its button is clicked and "Expired" 2 s later; the
recording observes it in between. Its replay is given a recorded tree read of 8 s there (as if the
recording's page had been that slow to read): the middle would be 4 s past the read's start, past
the timer; the replayed page must show "Started" as recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pytest

from mmina.recorder.browser import BrowserConfig
from mmina.replayer.pace import SNAPSHOT_S, RecordedPace
from mmina.replayer.replays import replay_run
from tests.local_site import record_thinking, tree_lines

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>Timer</title></head>
<body><h1>Timer</h1><p id="state">Ready</p><button>Start</button>
<script>
  const state = document.getElementById('state');
  document.querySelector('button').onclick = () => {
    state.textContent = 'Started';
    setTimeout(() => { state.textContent = 'Expired'; }, 2000);
  };
</script></body></html>"""
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Start"}, "think": 1.0},
    {"action": "stop", "answer": "done", "think": 3.0},
]
READ_MS = 8000.0
"""The recorded tree read the replay is given after the click: its middle is past the page's 2 s timer."""


def _text(line: str) -> str:
    """A tree line without its element id."""
    return re.sub(r"^\[\d+\] ", "", line)


def _answer(path: str) -> tuple[int, str, bytes]:
    return 200, "text/html; charset=utf-8", PAGE


@pytest.fixture
def long_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded observation after the click read the tree for ``READ_MS``, as the replay reads it."""
    of = RecordedPace.of.__func__  # type: ignore[attr-defined]

    def slow(
        cls: type[RecordedPace],
        episode_started: datetime,
        rows: Sequence[Mapping[str, Any]],
        requests: Sequence[Mapping[str, Any]] = (),
    ) -> RecordedPace | None:
        slow_read = [{**r, "tree_ms": READ_MS} if r["step_index"] == 1 else r for r in rows]
        return of(cls, episode_started, slow_read, requests)

    monkeypatch.setattr(RecordedPace, "of", classmethod(slow))


def test_a_long_tree_read_saw_the_page_at_its_start(tmp_path, long_reads) -> None:
    store, run_id = record_thinking(tmp_path, _answer, "timer", "Start the timer.", SCRIPT, BROWSER)
    recorded = tree_lines(store, run_id, "Started", "Expired")
    assert len(recorded) == 1 and "Started" in recorded[0], recorded  # observed before the timer
    assert SNAPSHOT_S * 1e3 < 2000.0 < READ_MS / 2
    report = replay_run(store, run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.requests.unmatched == 0
    replayed = tree_lines(store, report.replay_run, "Started", "Expired")
    assert [_text(line) for line in replayed] == [_text(line) for line in recorded], replayed
    assert episode.fidelity == 1.0
