"""Requests that never end never hold settling (issue 56, item 3): a long-poll the server never
answers and a SharedWorker (whose script request gets no response event a page can see) are in
flight for the whole episode; only the settling of the load that started them may wait for them,
as for any request, and every later step settles as fast as on a page without them
(``python -m bench --only realweb`` compares the two)."""
from __future__ import annotations

from pathlib import Path

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.recorder.settling import SETTLE_MAX_S
from mmina.store import Store
from tests.realweb.standing_site import StandingSite


def test_a_step_on_a_page_with_requests_that_never_end_is_not_held(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with StandingSite() as site:
        summary = record_run(store, RecordConfig(tasks=str(site.suite(tmp_path / "tasks")), agent="oracle",
                                                 browser=BrowserConfig(screenshots=False, set_of_marks=False)))
    assert summary.episodes[0].status == "completed"
    steps = sorted(store.read("steps", run_id=summary.run_id).to_pylist(), key=lambda r: r["step_index"])
    assert "High at noon" in steps[2]["tree_text"]
    # every step after the first load: held before for the whole network-quiet deadline (3 s) by
    # the poll and the worker; the next page's poll goes to the endpoint seen standing: held by
    # nothing. A held step takes the action plus those 3 s; one not held ~0.3 s (more when loaded)
    assert all(s["action_ms"] < SETTLE_MAX_S * 1_000 for s in steps[:3]), [s["action_ms"] for s in steps]
