"""Requests that never end never hold settling (issue 56, item 3): a long-poll the server never
answers and a SharedWorker (whose script request gets no response event a page can see) are in
flight for the whole episode; only the settling of the load that started them may wait for them,
as for any request, and every later step settles as fast as on a page without them
(``python -m bench --only realweb`` compares the two)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.recorder.settling import SETTLE_MAX_S
from mmina.store import Store
from tests.realweb.standing_site import StandingSite


def test_a_step_on_a_page_with_requests_that_never_end_is_not_held(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with StandingSite() as site:
        summary = record_run(
            store,
            RecordConfig(
                tasks=str(site.suite(tmp_path / "tasks")),
                agent="oracle",
                browser=BrowserConfig(screenshots=False, set_of_marks=False),
            ),
        )
    assert summary.episodes[0].status == "completed"
    steps = sorted(store.read("steps", run_id=summary.run_id).to_pylist(), key=lambda r: r["step_index"])
    assert "High at noon" in steps[2]["tree_text"]
    # every step after the first load: held before for the whole network-quiet deadline (3 s) by
    # the poll and the worker; the next page's poll goes to the endpoint seen standing: held by
    # nothing. A held step takes the action plus those 3 s; one not held ~0.3 s (more when loaded)
    assert all(s["action_ms"] < SETTLE_MAX_S * 1_000 for s in steps[:3]), [s["action_ms"] for s in steps]


SLOW_PAGE = """<!doctype html><title>Stock</title><p id="stock">Stock: ?</p>
<script>fetch('/api/stock').then(r => r.text()).then(t => { \
document.getElementById('stock').textContent = t; });</script>"""


def test_an_answer_held_while_the_page_time_stands_still_is_not_taken_for_a_long_poll() -> None:
    """A replay holds an answer to its recorded moment while its timeline stands still (a loaded
    machine behind the recording): the first ``/api/stock`` outlasts the settling in wall time,
    but not in the page's time, so the endpoint is no long-poll and the next page's request to it
    holds settling again until its answer is on the page (it was left standing, and the second
    page observed "Stock: ?", when settling measured on the wall clock)."""
    from mmina.actions.grammar import parse_action
    from mmina.recorder.browser import BrowserSession
    from tests.local_site import HTML, LocalSite, answering_handler

    calls: list[str] = []
    answered = threading.Event()

    def answer(path: str) -> tuple[int, str, bytes]:
        if path.startswith("/api/stock"):
            calls.append(path)
            # the first held past settling's network-quiet deadline; the next one slow enough that
            # a settling not waiting for it observes before it lands
            if len(calls) == 1:
                answered.wait(SETTLE_MAX_S + 2.0)
            else:
                time.sleep(SETTLE_MAX_S / 2)  # the site's own slowness
            return 200, "text/plain", f"Stock: {len(calls)} lamps".encode()
        return 200, HTML, SLOW_PAGE.encode()

    session = BrowserSession(BrowserConfig(screenshots=False, set_of_marks=False))
    try:
        with LocalSite(answering_handler(answer)) as site:
            browser = session.episode(None, page_time=lambda: 0.0)  # the page's time stands still
            try:
                browser.open((site.url + "first",))
                answered.set()
                browser.execute(parse_action(f"goto [{site.url}second]"))
                tree, _elements = browser.tree()
                assert "Stock: 2 lamps" in tree, tree
            finally:
                browser.close()
    finally:
        session.close()
