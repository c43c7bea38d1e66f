"""A replay clock that moves, and settling that waits for what a page does right after
(issue 23, items 3 and 4), on a page built on the real RxJS and lodash from npm.

The page searches as you type through RxJS ``debounceTime``, saves through lodash ``debounce``,
counts through lodash ``throttle``, prints the time it loaded, a random number and ids drawn from
``crypto``, and shows "Loading results" until a ``setTimeout(0)`` follow-up of its XHR replaces it.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mmina.recorder.browser import BrowserConfig, BrowserSession, Offline
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.recorder.seeding import PER_CALL_SITE, Seeding
from mmina.replayer.replays import replay_run
from mmina.replayer.router import ArchiveRouter
from mmina.replayer.source import SourceRun, select_sources
from mmina.store import Store
from tests.polling import wait_until
from tests.realweb.clock_page import ClockSite

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
SCRIPT = [
    {"action": "type", "target": {"role": "searchbox", "name": "Search boats"}, "text": "harbour"},
    {"action": "click", "target": {"role": "button", "name": "Save notes"}},
    {"action": "click", "target": {"role": "button", "name": "Count visits"}},
    {"action": "stop", "answer": "Harbour Light"},
]
TIMERS_S = 30.0
"""The bound of a wait for the page's timers (300 and 200 ms debounces, an XHR) on a loaded machine."""


def _suite(folder: Path, url: str) -> Path:
    path = folder / "clock" / "1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "task_id": 1,
                "intent": "Search the harbour boats, save notes, count a visit.",
                "start_url": url,
                "eval": {
                    "eval_types": ["string_match"],
                    "reference_answers": {"must_include": ["Harbour Light"]},
                },
                "procedure": ["clock", "end"],
                "reference_script": SCRIPT,
            }
        )
    )
    return path.parent


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, RunSummary, list[str]]:
    folder = tmp_path_factory.mktemp("clock")
    store = Store.open(folder / "store", create=True)
    with ClockSite() as site:
        summary = record_run(
            store, RecordConfig(tasks=str(_suite(folder, site.url)), agent="oracle", browser=BROWSER)
        )
        hits = list(site.hits)
    return store, summary, hits


def _trees(store: Store, run_id: str) -> list[str]:
    rows = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])
    return [r["tree_text"] for r in rows]


def test_recording_sees_the_debounced_search_after_its_loading_state(recorded) -> None:
    store, summary, hits = recorded
    assert summary.episodes[0].status == "completed"
    trees = _trees(store, summary.run_id)
    assert "Type to search" in trees[0]
    # settling waited for the debounce timer, its XHR and the setTimeout(0) after it
    assert "2 boats match harbour" in trees[1] and "Loading results" not in trees[1]
    assert "Saved at" in trees[2]  # lodash debounce fired before the observation
    assert "Visits counted 1" in trees[3]  # lodash throttle (trailing) fired too
    assert any(h.startswith("/api/search?q=harbour") for h in hits)


def test_replay_reproduces_every_step_with_a_moving_clock(recorded) -> None:
    store, summary, _hits = recorded
    report = replay_run(store, summary.run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert episode.requests.unmatched == 0 and episode.requests.missing_body == 0
    trees = _trees(store, report.replay_run)
    assert "2 boats match harbour" in trees[1]
    assert "Loaded at" in trees[0] and "Lucky number" in trees[0]  # recorded time and draw, shown again
    assert "Request id" in trees[0]  # and the ids drawn from crypto (the trees are equal)


def _page_at(store: Store, run_id: str, starts_at: datetime, fixed: bool) -> dict[str, str]:
    """Open the recorded page in a replay context whose clock starts at ``starts_at`` (pinned
    there with ``set_fixed_time`` when ``fixed``, as replay did before), type a search, and
    read what the page shows once its timers fired (a moving clock; waited for, bounded) or two
    seconds later (a pinned clock, whose timers must never fire: 2 s is over six debounces)."""
    _run, sources = select_sources(store, run_id, None)
    source = SourceRun.load(store, run_id, {sources[0].episode_id})
    router = ArchiveRouter(source.archive(store, sources), starts_at)
    session = BrowserSession(BROWSER)
    try:

        async def prepare(context) -> None:
            await router.prepare(context)
            if fixed:
                await context.clock.set_fixed_time(starts_at)

        browser = session.episode(None, prepare, offline=Offline(), seed=Seeding.of("a seed", PER_CALL_SITE))
        browser.open(source.task(sources[0].task_id).start_urls)
        page = browser.tabs.page
        session.run(page.locator("#q").press_sequentially("harbour"))
        session.run(page.locator("#save").click())

        def read() -> dict[str, str]:
            return {
                name: session.run(page.locator(f"#{name}").inner_text())
                for name in ("loaded", "random", "drawn", "status", "saved")
            }

        def fired() -> bool:
            now = read()
            return "boats match" in now["status"] and now["saved"] != "Not saved"

        if fixed:
            time.sleep(2)
        else:
            wait_until(fired, TIMERS_S, "the search's debounce and XHR, and the save's debounce, firing")
        shown = read()
        session.run(page.goto("about:blank"))
        shown["elsewhere"] = session.run(
            page.evaluate("crypto.getRandomValues(new Uint32Array(2)).join('-')")
        )
        browser.close()
        return shown
    finally:
        session.close()


def test_the_replayed_clock_starts_at_the_recorded_time_and_moves(recorded) -> None:
    store, summary, _hits = recorded
    starts_at = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
    moving = _page_at(store, summary.run_id, starts_at, fixed=False)
    assert moving["loaded"].startswith("Loaded at 2001-02-03T04:05")
    assert moving["status"] == "2 boats match harbour"  # RxJS debounceTime fired
    assert moving["saved"].startswith("Saved at 2001-02-03T04:05")  # lodash debounce fired
    again = _page_at(store, summary.run_id, starts_at, fixed=False)
    assert again["random"] == moving["random"]  # Math.random stays seeded
    assert again["drawn"] == moving["drawn"] and re.fullmatch(
        r"Request id \d+-\d+ [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"
        r"[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        moving["drawn"],
    )
    # another page draws other ids (a request id or idempotency key is not sent twice), as reproducibly
    assert again["elsewhere"] == moving["elsewhere"] and moving["elsewhere"] not in moving["drawn"]
    # the control: a clock pinned while timers run (replay before issue 23) never fires them
    pinned = _page_at(store, summary.run_id, starts_at, fixed=True)
    assert pinned["status"] != "2 boats match harbour" and pinned["saved"] == "Not saved"
