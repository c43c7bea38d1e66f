"""Animation frames in a replay run as in the recording (issue 56): in the browser's rendering step,
before style and layout, not as timers of Playwright's clock (``mmina.replayer.page_clock.FRAMES``).

The page (``tests/redraw_site.py``) hides its interface and shows it again in the next frame, twenty
times, as JupyterLab's theme manager does with Notebook 7's shell; the button focused inside keeps
the focus only if no rendering comes between the hide and the frame. Recorded live, it kept it; the
replay must show the same tree (the button ``[active]``, "Focus kept"). The control replays with
Playwright's own animation frames (mmina before the fix): the button lost the focus, as Notebook 7's
cell did in every replay (its page's root ``[active]``, the recorded cell never).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer import router
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.local_site import scripted_suite
from tests.redraw_site import KEPT, LOST, RedrawSite

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
SCRIPT = [{"action": "stop", "answer": "done", "think": 0.5}]
FOCUSED = 'button "Check" [active]'


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, RunSummary]:
    folder: Path = tmp_path_factory.mktemp("frames")
    store = Store.open(folder / "store", create=True)
    with RedrawSite() as site:
        suite = scripted_suite(folder, "redraws", site.url + "redraw", "Watch the page redraw.", SCRIPT)
        summary = record_run(
            store,
            RecordConfig(tasks=str(suite), agent="tests.realweb.agents:ThinkingOracle", browser=BROWSER),
        )
    return store, summary


def _first_tree(store: Store, run_id: str) -> str:
    rows = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])
    return rows[0]["tree_text"]


def test_the_recording_keeps_the_focus_through_every_redraw(recorded) -> None:
    store, summary = recorded
    assert summary.episodes[0].status == "completed"
    tree = _first_tree(store, summary.run_id)
    assert KEPT in tree and FOCUSED in tree, tree


def test_the_replay_renders_between_frames_as_the_recording_did(recorded) -> None:
    store, summary = recorded
    report = replay_run(store, summary.run_id, browser=BROWSER)
    episode = report.episodes[0]
    tree = _first_tree(store, report.replay_run)
    assert KEPT in tree and FOCUSED in tree, tree
    assert episode.fidelity == 1.0 and episode.requests.unmatched == 0, episode.as_json()


def test_control_playwrights_timer_frames_lose_the_focus(recorded, monkeypatch) -> None:
    store, summary = recorded
    monkeypatch.setattr(router, "FRAMES", "")
    report = replay_run(store, summary.run_id, browser=BROWSER)
    tree = _first_tree(store, report.replay_run)
    assert LOST in tree and FOCUSED not in tree, tree
