"""Web Workers follow the documents' rules (issue 56, items 1, 3, 5 and 8): under seeding scheme 3
every worker — dedicated, module, from a ``blob:`` URL, shared — draws from the episode's seed before
any of its own code runs, and in a replay its ``Date`` reads the recording's timeline; a SharedWorker's
script and its own requests are recorded, and replayed from the archive.

Real Chromium, a real local server (``tests/worker_site.py``): each worker draws ids at its top
level and reads ``Date.now()``; the page shows them, and the sum the SharedWorker computes from a
script it imports and JSON it fetches.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.async_api import BrowserContext, async_playwright
from playwright.sync_api import sync_playwright

from mmina.recorder import seeding
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.chromium import find_chromium
from mmina.recorder.seeding import PER_CALL_SITE, WORKERS_TOO, Seeding
from mmina.recorder.web_workers import watch_page, worker_scripts
from mmina.replayer import worker_clock
from mmina.replayer.archive import Archive, exchanges_from_rows
from mmina.replayer.handover import HandOverRouter
from mmina.replayer.page_clock import PageClock
from mmina.replayer.replays import replay_run
from mmina.replayer.timeline import Timeline
from mmina.store import Store
from tests.local_site import LocalSite, pages_handler, record_scripted, tree_lines
from tests.worker_site import KINDS, NUMBERS, SHARED, worker_site

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
SCRIPT: list[dict[str, Any]] = [
    {"action": "click", "target": {"role": "button", "name": "Show the workers"}},
    {"action": "stop", "answer": "done"},
]
WORKER_OWN = ("/tally.js", "/numbers.json")
"""What the SharedWorker asks for itself (the browser's HAR has none of it)."""
SHOWN = "Array.from(document.querySelectorAll('#out li'), li => li.textContent)"


async def _shown(context: BrowserContext) -> list[str]:
    page = context.pages[0]
    await page.wait_for_function(
        "['dedicated', 'module', 'blob', 'shared'].every(n => n in got)", timeout=10_000
    )
    await page.click("#show")
    return await page.evaluate(SHOWN)


def _draws(session: BrowserSession, url: str, seed: Seeding) -> tuple[list[str], list[float]]:
    """What the page's workers drew in a fresh context seeded with ``seed``, and how long each was held."""
    browser = session.episode(None, seed=seed)
    try:
        browser.open((url,))
        shown = session.run(_shown(browser.context))
        return [re.sub(r" clock .*", "", line) for line in shown], worker_scripts(browser.context).hold_s
    finally:
        browser.close()


def test_every_kind_of_worker_draws_from_the_episode_seed() -> None:
    """Two contexts with the same seed draw the same in every worker; another seed, or scheme 2
    (workers unseeded, as recorded before scheme 3), draws otherwise."""
    session = BrowserSession(BROWSER)
    try:
        with worker_site() as site:
            first, held = _draws(session, site.url, Seeding(7, WORKERS_TOO))
            again, _ = _draws(session, site.url, Seeding(7, WORKERS_TOO))
            other, _ = _draws(session, site.url, Seeding(8, WORKERS_TOO))
            unseeded = [_draws(session, site.url, Seeding(7, PER_CALL_SITE))[0] for _ in range(2)]
    finally:
        session.close()
    assert [line.split(":")[0] + ":" for line in first] == list(KINDS)
    assert not any("nothing" in line for line in first), first
    assert first == again
    assert all(a != b for a, b in zip(first, other, strict=True)), (first, other)
    assert all(a != b for a, b in zip(*unseeded, strict=True)), unseeded
    assert len(held) == 4  # every worker was held at its start, and let go


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, str]:
    """An episode recorded live under scheme 3 (every new recording's)."""
    assert seeding.RECORDED_SEEDING == WORKERS_TOO
    folder = tmp_path_factory.mktemp("workers")
    with worker_site() as site:
        store, summary = record_scripted(folder, site.url, "workers", "Show the workers.", SCRIPT, BROWSER)
    return store, summary.run_id


def test_a_replayed_worker_draws_as_recorded_and_reads_the_recorded_time(recorded) -> None:
    """Replayed from the archive: every worker's ids are the recorded ones (a SharedWorker's first
    turn's too), and its clock is the page's (the recording's time), though the replay runs seconds
    after the recording."""
    store, run_id = recorded
    shown = tree_lines(store, run_id, *KINDS)
    assert len(shown) == 4 and all(line.endswith("clock 0 s") for line in shown), shown
    report = replay_run(store, run_id, browser=BROWSER)
    assert tree_lines(store, report.replay_run, *KINDS) == shown


def test_without_the_worker_clock_a_replayed_worker_reads_the_wall_clock(recorded, monkeypatch) -> None:
    """The control: workers left on the wall clock read a later time than their page (the recording's)."""
    store, run_id = recorded
    monkeypatch.setattr(worker_clock, "WORKER_CLOCK", "void 0")
    report = replay_run(store, run_id, browser=BROWSER)
    replayed = tree_lines(store, report.replay_run, *KINDS)
    assert len(replayed) == 4 and not any(line.endswith("clock 0 s") for line in replayed), replayed


def _rows(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    """A run's requests by path (the last of a path)."""
    rows = store.read("requests", run_id=run_id).to_pylist()
    return {urlsplit(row["url"]).path: row for row in rows if row["url"].startswith("http")}


def _body(store: Store, row: dict[str, Any]) -> bytes:
    return store.read_blobs([row["response_body"]])[row["response_body"]]


def test_a_shared_worker_is_recorded_and_replayed_from_the_archive(recorded) -> None:
    """A SharedWorker's script is stored with its body (before: status 0, no body, time -1), and so
    are the requests the worker makes itself; replayed with the site serving other content on the
    same address, the worker runs from the archive — its script and its own requests answered
    exactly, nothing asked of the site — and computes what it computed when recorded (``sum 24``,
    where the site's tally now makes ``sum 36``), every step equal."""
    store, run_id = recorded
    rows = _rows(store, run_id)
    script = rows["/shared.js"]
    assert script["status"] == 200 and script["time_ms"] >= 0, script
    assert _body(store, script) == SHARED.encode()
    assert _body(store, rows["/numbers.json"]) == NUMBERS.encode()
    assert all(rows[path]["status"] == 200 for path in WORKER_OWN)
    assert any("sum 24" in line for line in tree_lines(store, run_id, "shared:"))
    port = int(urlsplit(script["url"]).port or 0)
    asked: list[str] = []
    with worker_site(factor=3, port=port, asked=asked):
        report = replay_run(store, run_id, browser=BROWSER)
    assert asked == []
    episode = report.episodes[0]
    assert episode.fidelity == 1.0 and episode.requests.unmatched == 0, episode
    replayed = _rows(store, report.replay_run)
    for path in ("/shared.js", *WORKER_OWN):
        assert replayed[path]["replay_match"] == "exact" and replayed[path]["status"] == 200, replayed[path]
    assert any("sum 24" in line for line in tree_lines(store, report.replay_run, "shared:"))


CLOCK_CHECK = """(async () => {
  const pageWait = (ms) => new Promise((resolve) => { onmessage = () => resolve(); postMessage({wait: ms}); });
  const seen = {start: Date.now(), late: null, ticks: []};
  let ticks = 0;
  setInterval(() => { ticks += 1; }, 50);
  const early = new Promise((resolve) => setTimeout(() => resolve(Date.now()), 100));
  setTimeout((at) => { seen.late = [at, Date.now()]; }, 300, 'due at 300');
  const cleared = setTimeout(() => { seen.cleared = 'fired'; }, 10);
  clearTimeout(cleared);
  seen.early = await early;
  await pageWait(400);  // real time, on the page's own clock
  seen.capped = Date.now();
  seen.perf = performance.now();
  seen.ticks.push(ticks);
  seen.lateAtCap = seen.late;
  __mminaTimeline.news(1000, null, 0);  // older news: not heard
  __mminaTimeline.news(900000, 1000500, 2);  // behind: no jump back; a later cap
  seen.uncapped = Date.now();
  await pageWait(700);
  seen.later = Date.now();
  seen.ticks.push(ticks);
  seen.dates = [new Date().getTime() === Date.now(), new Date(0).getTime(), typeof Date(), new Date() instanceof Date];
  postMessage(seen);
})();"""


def test_a_workers_clock_runs_to_its_cap_stands_there_and_never_goes_back() -> None:
    """The worker clock alone, in a real worker: started at τ = 1,000,000 ms with the cap 200 ms on,
    it reads the cap after 400 ms; news of a later cap lets it run on from there, never back. Its
    timers run on that time: one due before the cap fires on time, one due past it waits for the
    news, an interval of 50 ms ticks as often as the time it saw allows (not every 50 ms of the
    wall clock while the time stood), a cleared timer never fires."""
    fields = {"at": 1_000_000, "cap": 1_000_200, "version": 1, "asks": "false", "grace": 100}
    script = worker_clock.WORKER_CLOCK % fields
    body = script + "\n" + CLOCK_CHECK
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(None, playwright))
        page = browser.new_page()
        seen = page.evaluate(
            """(body) => new Promise((resolve) => {
              const worker = new Worker(URL.createObjectURL(new Blob([body], {type: 'text/javascript'})));
              worker.onmessage = ({data}) => data.wait === undefined
                ? resolve(data) : setTimeout(() => worker.postMessage('go'), data.wait);
            })""",
            body,
        )
        browser.close()
    assert seen["start"] - 1_000_000 < 100
    assert seen["capped"] == 1_000_200  # stood still at the cap
    assert seen["uncapped"] == 1_000_200  # news from behind moves nothing back or forth
    assert 1_000_490 <= seen["later"] <= 1_000_500  # ran on with real time, up to the new cap
    assert seen["dates"] == [True, 0, "string", True]
    assert 1_000_100 <= seen["early"] <= 1_000_200
    assert seen["lateAtCap"] is None  # due at 300: not while the time stood at 200
    assert seen["late"][0] == "due at 300" and 1_000_300 <= seen["late"][1] <= 1_000_500
    assert 2 <= seen["ticks"][0] <= 4, seen["ticks"]  # 200 ms of the worker's time (8 on the wall clock)
    assert 8 <= seen["ticks"][1] <= 10, seen["ticks"]  # 500 ms of it, after 1.1 s of the wall clock
    assert "cleared" not in seen


def _in_a_worker(timeline: Timeline, body: str) -> list[Any]:
    """What a worker running ``body`` posts (with the page's wall-clock milliseconds as each came)
    until it posts ``"done"`` (or 10 s), its clock on ``timeline`` (which nothing else reads)."""

    async def run() -> list[Any]:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=find_chromium(None, playwright))
            context = await browser.new_context()
            worker_clock.clock_in_workers(context, PageClock(timeline, datetime.now(UTC)), datetime.now(UTC))
            page = await context.new_page()
            await watch_page(context, await context.new_cdp_session(page))
            posted = await page.evaluate(
                """(body) => new Promise((resolve) => {
                  const posted = [];
                  const worker = new Worker(URL.createObjectURL(new Blob([body], {type: 'text/javascript'})));
                  worker.onmessage = ({data}) => data === 'done' ? resolve(posted) : posted.push([data, Date.now()]);
                  setTimeout(() => resolve(posted), 10000);
                })""",
                body,
            )
            await browser.close()
            return posted

    return asyncio.run(run())


def test_a_workers_timer_past_a_cap_fires_once_the_cap_ends_with_nobody_else_looking() -> None:
    """A worker's timer due past a cap that ends by its limit (nobody lifts it, nothing else reads
    the timeline) fires once it ended, on the worker's time: the news of the cap's end reaches the
    worker though no one else asked the timeline."""
    timeline = Timeline()
    timeline.hold("an observation", at=0.1, limit=0.6)
    posted = _in_a_worker(
        timeline, "const t0 = Date.now(); setTimeout(() => postMessage(Date.now() - t0), 300);"
    )
    assert posted, "the cap's end was never news to the worker"
    assert 300 <= posted[0][0] < 450, posted  # on the worker's time: due 300 ms after it read t0


GRACED = """const cap = __mminaTimeline.cap, armed = Date.now();
postMessage(cap - armed);
setTimeout(() => { postMessage(Date.now() - cap); postMessage('done'); }, cap - armed + 50);"""


def test_a_workers_timer_due_just_past_a_request_not_asked_yet_runs_at_once() -> None:
    """Where τ stands at the recorded moment of a request not asked for yet, a worker's timer due
    just past it (by less than ``GRACE_S``) runs — it may be what asks — rather than wait for the
    request's limit (2 s), as a document's timer does: on the worker's time 50 ms past the cap."""
    timeline = Timeline()
    timeline.expect([("GET /poll", 1.0, "GET /poll")])
    posted = _in_a_worker(timeline, GRACED)
    assert len(posted) == 2, posted
    (left_ms, armed_at), (past_cap_ms, fired_at) = posted
    assert 50 <= past_cap_ms <= 60, posted  # its due moment on the worker's time
    assert fired_at - armed_at - left_ms < 1000, posted  # not held for the request's 2 s


SECRET = "Zq81fKx02LmA9wTokenValue"
SESSION_PAGE = """<!doctype html><title>Session</title><p id="out">waiting</p><script>
const worker = new SharedWorker('/session-worker.js');
worker.port.onmessage = ({data}) => { document.getElementById('out').textContent = data; };
worker.port.start();
</script>"""
SESSION_WORKER = """onconnect = async (event) => {
  const session = await (await fetch('/session.json')).json();
  event.ports[0].postMessage(`signed in, token of ${session.access_token.length} characters`);
};"""


def test_a_shared_workers_bodies_are_redacted_like_any_other(tmp_path) -> None:
    """A secret in a response only the SharedWorker fetched (a JSON ``access_token``) is redacted
    from the stored body, as in any response the page fetched; the row says redaction changed it."""
    pages = {
        "/": SESSION_PAGE,
        "/session-worker.js": SESSION_WORKER,
        "/session.json": f'{{"access_token": "{SECRET}"}}',
    }
    kinds = {"/": "text/html", "/session-worker.js": "text/javascript", "/session.json": "application/json"}
    script = [{"action": "stop", "answer": "done"}]
    with LocalSite(pages_handler(pages, lambda path: kinds.get(path, "text/plain"))) as site:
        store, summary = record_scripted(tmp_path, site.url, "session", "Sign in.", script, BROWSER)
    assert any("token of 24 characters" in line for line in tree_lines(store, summary.run_id, "signed in"))
    row = _rows(store, summary.run_id)["/session.json"]
    stored = _body(store, row)
    assert row["status"] == 200 and SECRET.encode() not in stored and b"access_token" in stored, stored
    assert row["received_body_size"] == len(pages["/session.json"])
    assert row["received_body_sha256"] != hashlib.sha256(stored).hexdigest()  # what replay flags as changed


def test_after_a_hand_over_a_shared_workers_own_requests_go_live(recorded) -> None:
    """A hop-conditioned episode's prefix runs the SharedWorker from the archive (the site is asked
    nothing); after the hand-over the worker, still alive, sends its next fetch to the live site."""
    store, run_id = recorded
    rows = store.read("requests", run_id=run_id).to_pylist()
    digests = sorted({row["response_body"] for row in rows if row["response_body"]})
    archive = Archive(exchanges_from_rows(rows, store.read_blobs(digests)))
    router = HandOverRouter(archive, store.read("episodes", run_id=run_id).to_pylist()[0]["started_at"])
    url = _rows(store, run_id)["/"]["url"]
    asked: list[str] = []
    session = BrowserSession(BROWSER)
    try:
        with worker_site(factor=3, port=int(urlsplit(url).port or 0), asked=asked):
            browser = session.episode(None, router.prepare)
            try:
                browser.open((url,))
                session.run(browser.context.pages[0].wait_for_function("'shared' in got", timeout=10_000))
                in_prefix = list(asked)
                session.run(router.hand_over())
                second = session.run(_connect_again(browser.context, url))
            finally:
                browser.close()
    finally:
        session.close()
    assert in_prefix == []
    assert "/numbers.json" in asked and "/shared.js" not in asked, asked  # the same worker, now live
    assert second == "sum 24"  # its tally was imported in the prefix; the live numbers are the same


async def _connect_again(context: BrowserContext, url: str) -> str:
    page = await context.new_page()
    await page.goto(url)
    await page.wait_for_function("'shared' in got", timeout=10_000)
    return await page.evaluate("got.shared.extra")
