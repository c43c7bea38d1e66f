"""Every request answered at once, history navigation included (issue 30, item 3).

A held-out shop (HTTP/1.0, no cache headers) hung its replay after ``go_back``: the document
``GET /`` was never answered. The cause: Chromium serves a history navigation's document from its
cache and hands the recording its repeated headers joined by a newline; fulfilling a request
with such a value fails inside Playwright without a word, and the request stays pending. The
hand-written shop (``tests/realweb/shop_site.py``) reproduces it; it is recorded and replayed
here with the back-forward cache off (Playwright's default) and on.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Route

from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.archive import REDACTED, Archive, Exchange, Matcher, MatchKind, reply_for
from mmina.replayer.replays import ReplayReport, replay_run
from mmina.replayer.router import ArchiveRouter
from mmina.replayer.turns import Turns
from mmina.store import Store
from tests.realweb.apps import SHOP
from tests.realweb.shop_site import ShopSite

FAST = BrowserConfig(screenshots=False, set_of_marks=False)
ANSWERED_MS = 30_000
"""The bound of a wait for a page the router must answer (at once, or at its recorded pace: 2 s):
what it guards against is a page never answered, so it can be generous for a loaded machine."""
LATE_S = 5.0
"""How late past its deadline settling may return on a loaded machine (before the fix one of
its waits took 10 s whatever the deadline said: 2 s + 5 s still tells the two apart)."""


# ---------------------------------------------------------------- deliverable headers (pure)


def test_a_repeated_header_joined_by_a_newline_is_served_as_one_list() -> None:
    exchange = Exchange(
        0,
        "GET",
        "http://shop.test/",
        200,
        headers=(
            ("Content-Type", "text/html"),
            ("Link", "</a>; rel=preload\n</b>; rel=shortlink"),
            ("Set-Cookie", "a=1; Path=/\nb=2; Path=/"),
            ("X-Odd", "one\r\ntwo\x00"),
            ("Bad Name", "x"),
            ("X-Secret", f"{REDACTED}\nkept"),
            ("X-Empty", ""),
        ),
        body=b"<p>shop</p>",
    )
    headers = reply_for(exchange).headers
    assert headers["link"] == "</a>; rel=preload, </b>; rel=shortlink"
    assert headers["set-cookie"] == "a=1; Path=/\nb=2; Path=/"  # Playwright sends one header per line
    assert headers["x-odd"] == "one, two" and headers["x-secret"] == "kept" and headers["x-empty"] == ""
    assert "bad name" not in headers
    assert all("\r" not in v and "\0" not in v for v in headers.values())


def test_a_repeated_request_whose_body_the_recording_lost_keeps_its_place_and_gets_the_next_body() -> None:
    """With the back-forward cache on, a poll of the page left behind may be answered while the
    page is frozen, and a fetch whose page navigated away at once may end before the recorder
    read it: the recording keeps no body for it. Its request still takes its place first in,
    first out, with its own timing (a paced replay holds it for its own observation, not the next
    one's), and is answered with the next kept body; the requests after it get their own."""
    lost = (("x-mmina-body", "missing"),)
    archive = Archive(
        [
            Exchange(
                0,
                "GET",
                "http://shop.test/api/stock?since=1",
                200,
                body=b'{"stock": 5}',
                started_ms=1_000.0,
                time_ms=5.0,
            ),
            Exchange(
                1,
                "GET",
                "http://shop.test/api/stock?since=2",
                200,
                headers=lost,
                started_ms=2_000.0,
                time_ms=7.0,
            ),
            Exchange(
                2,
                "GET",
                "http://shop.test/api/stock?since=3",
                200,
                body=b'{"stock": 4}',
                headers=(("Content-Type", "application/json"),),
                started_ms=3_000.0,
                time_ms=9.0,
            ),
            Exchange(
                3,
                "GET",
                "http://shop.test/api/stock?since=4",
                200,
                headers=lost,
                started_ms=4_000.0,
                time_ms=11.0,
            ),
        ]
    )
    matcher = Matcher(archive)
    assert matcher.peek("GET", "http://shop.test/api/stock?since=8").exchange.body == b'{"stock": 5}'
    served = [
        matcher.match("GET", f"http://shop.test/api/stock?since={n}").exchange for n in (7, 8, 9, 10, 11)
    ]
    assert [(e.order, e.started_ms, e.time_ms) for e in served] == [
        (0, 1_000.0, 5.0),
        (1, 2_000.0, 7.0),
        (2, 3_000.0, 9.0),
        (3, 4_000.0, 11.0),
        (3, 4_000.0, 11.0),
    ]
    assert [e.body for e in served] == [
        b'{"stock": 5}',
        b'{"stock": 4}',
        b'{"stock": 4}',
        b'{"stock": 4}',
        b'{"stock": 4}',
    ]  # the last lost one: the previous kept body
    assert not any(e.body_missing for e in served) and served[1].headers == archive.exchanges[2].headers
    assert [e.body_of for e in served] == [None, 2, None, 2, 2]  # the stand-ins, for the replay report
    news = "http://shop.test/api/news?_=17965812{}"
    clocked = Archive(
        [
            Exchange(0, "GET", news.format(49094), 200, headers=lost, started_ms=1_000.0),
            Exchange(1, "GET", news.format(50202), 200, body=b'{"items": []}', started_ms=2_000.0),
        ]
    )
    exactly = Matcher(clocked).match("GET", news.format(49094))  # the page's clock read the recorded ms
    assert exactly.kind is MatchKind.EXACT and (exactly.exchange.body, exactly.exchange.body_of) == (
        b'{"items": []}',
        1,
    )  # its only candidate lost its body: a repeat's answers it
    only_lost = Matcher(Archive([Exchange(0, "GET", "http://shop.test/a", 200, headers=lost)]))
    assert only_lost.match("GET", "http://shop.test/a").exchange.body_missing  # nothing better to give


def test_a_cache_hit_answered_by_the_same_resource_is_no_lost_body() -> None:
    """A page gone back to takes its fonts from the browser's memory cache: the recording has no
    body for them (answered in a millisecond, no server behind it). The same URL's kept response,
    as long as the hit's headers said, is that resource: nothing was lost. A slower exchange, or
    another length, is still a body the recording lost."""
    lost = (("Content-Length", "12"), ("x-mmina-body", "missing"))
    font = "http://docs.test/css/fonts/lato.woff2"
    archive = Archive(
        [
            Exchange(
                0, "GET", font, 200, headers=(("Content-Length", "12"),), body=b"woff2-bytes!", time_ms=80.0
            ),
            Exchange(1, "GET", font, 200, headers=lost, time_ms=1.0),
            Exchange(2, "GET", font, 200, headers=lost, time_ms=40.0),
            Exchange(
                3,
                "GET",
                font,
                200,
                headers=(("Content-Length", "13"), ("x-mmina-body", "missing")),
                time_ms=1.0,
            ),
        ]
    )
    matcher = Matcher(archive)
    served = [matcher.match("GET", font).exchange for _ in range(4)]
    assert [e.body for e in served] == [b"woff2-bytes!"] * 4
    assert [(e.body_of, e.cache_hit) for e in served] == [(None, False), (0, True), (0, False), (0, False)]


# ---------------------------------------------------------------- the router (a real browser)


def test_a_document_recorded_with_a_joined_header_is_answered_at_once() -> None:
    """Without splitting the value, ``route.fulfill`` fails silently and ``goto`` times out."""
    url = "http://shop.history.test/"
    archive = Archive(
        [
            Exchange(
                0,
                "GET",
                url,
                200,
                headers=(("Content-Type", "text/html"), ("Link", "</a>; rel=preload\n</b>; rel=shortlink")),
                body=b"<title>Harbour shop</title><p>shop</p>",
            )
        ]
    )
    router = ArchiveRouter(archive, datetime.now(UTC))
    session = BrowserSession(FAST)
    try:

        async def visit(context: BrowserContext) -> str:
            page = await context.new_page()
            await page.goto(url, timeout=ANSWERED_MS)
            return await page.title()

        context = session.run(_context(session, router))
        assert session.run(visit(context), time.monotonic() + 2 * ANSWERED_MS / 1000) == "Harbour shop"
        session.run(context.close())
    finally:
        session.close()
    assert [(s.url, s.status) for s in router.served] == [(url, 200)]


def test_a_repeat_asked_a_turn_earlier_than_recorded_is_answered_without_waiting_for_an_observation() -> None:
    """The page asks for its stock twice before its first observation; the recording asked the
    second time only after that observation (a page the back-forward cache restored when recorded
    asks less often). First in, first out, the second ask gets the later answer: held for the
    observation it was recorded after, it would leave the page waiting for the observation that
    waits for it. It spanned no observation when recorded, so it is answered at once."""
    now = time.time() * 1e3
    page_html = (
        b"<title>stock</title><p id=s>?</p><script>const ask = () => fetch('/api/stock?since=' + "
        b"Date.now()).then(r => r.json()); ask().then(() => ask()).then(d => "
        b"{ document.getElementById('s').textContent = 'Stock ' + d.stock; });</script>"
    )
    json_type = (("Content-Type", "application/json"),)
    archive = Archive(
        [
            Exchange(
                0, "GET", "http://turns.history.test/", 200, (("Content-Type", "text/html"),), page_html
            ),
            Exchange(
                1,
                "GET",
                "http://turns.history.test/api/stock?since=1",
                200,
                json_type,
                b'{"stock": 7}',
                request_type="fetch",
                started_ms=now + 100,
                time_ms=10,
            ),
            Exchange(
                2,
                "GET",
                "http://turns.history.test/api/stock?since=2",
                200,
                json_type,
                b'{"stock": 7}',
                request_type="fetch",
                started_ms=now + 2_100,
                time_ms=10,
            ),
        ]
    )
    turns = Turns([now / 1e3 + 1.0, now / 1e3 + 3.0])  # observation 0 between the two recorded asks
    router = ArchiveRouter(archive, datetime.now(UTC), paced=True, turns=turns)
    session = BrowserSession(FAST)
    try:

        async def visit(context: BrowserContext) -> str:
            page = await context.new_page()
            await page.goto("http://turns.history.test/", timeout=ANSWERED_MS)
            await page.wait_for_function(
                "document.getElementById('s').textContent !== '?'", timeout=ANSWERED_MS
            )
            return await page.inner_text("#s")

        context = session.run(_context(session, router))
        assert session.run(visit(context), time.monotonic() + 3 * ANSWERED_MS / 1000) == "Stock 7"
        session.run(context.close())
    finally:
        session.close()
    assert turns.taken == 0 and len([s for s in router.served if "/api/stock" in s.url]) == 2


async def _context(session: BrowserSession, router: ArchiveRouter) -> BrowserContext:
    context = await session.browser.new_context()
    await router.prepare(context)
    return context


# ---------------------------------------------------------------- settling never waits past its deadline


def test_settling_ends_by_its_deadline_while_a_navigation_waits_for_its_document() -> None:
    """A document request nobody answers (the held-out case before the fix): settling after a
    history navigation returns by its deadline; before, one of its waits took 10 s whatever
    the deadline said."""
    held: list[Route] = []

    async def hold_the_second_page(context: BrowserContext) -> None:
        async def handle(route: Route) -> None:
            if route.request.url.endswith("/two"):
                held.append(route)  # never answered while the test waits
                return
            await route.fulfill(
                status=200,
                content_type="text/html",
                body=b"<a href='/two'>two</a>" if route.request.url.endswith("/") else b"",
            )

        await context.route("**/*", handle)

    session = BrowserSession(FAST)
    try:
        browser = session.episode(None, hold_the_second_page)
        browser.open(("http://held.history.test/",))
        session.run(browser.tabs.page.evaluate("location.href = '/two'"))
        started = time.monotonic()
        browser.settle(started + 2.0)
        assert time.monotonic() - started < 2.0 + LATE_S
        assert held, "the second page's request was routed"
        for route in held:
            session.run(route.abort())
        browser.close()
    finally:
        session.close()


# ---------------------------------------------------------------- the shop, recorded and replayed


def _suite(folder: Path, url: str) -> Path:
    suite = folder / "tasks" / "shop"
    suite.mkdir(parents=True)
    task = {**SHOP.task(1), "start_url": url}
    (suite / "1.json").write_text(json.dumps(task))
    return suite


def _record_and_replay(
    folder: Path, config: BrowserConfig
) -> tuple[Store, RunSummary, ReplayReport, list[str]]:
    """The shop's episode recorded, then replayed while the shop runs on (its state drawn anew
    would not matter: nothing may reach it); the requests that reached it during the replay."""
    store = Store.open(folder / "store", create=True)
    with ShopSite() as site:
        recorded = record_run(
            store, RecordConfig(tasks=str(_suite(folder, site.url)), agent="oracle", browser=config)
        )
        before = len(site.shop.hits)
        report = replay_run(store, recorded.run_id, browser=config)
        live = site.shop.hits[before:]
    return store, recorded, report, live


@pytest.mark.parametrize("back_forward_cache", [False, True], ids=["no-bfcache", "bfcache"])
def test_history_navigation_replays_exactly_with_every_request_answered(
    tmp_path: Path, back_forward_cache: bool
) -> None:
    config = BrowserConfig(screenshots=False, set_of_marks=False, back_forward_cache=back_forward_cache)
    store, recorded, report, live = _record_and_replay(tmp_path, config)
    steps = sorted(store.read("steps", run_id=recorded.run_id).to_pylist(), key=lambda r: r["step_index"])
    assert [s["action_error"] for s in steps] == [None] * (len(SHOP.script) + 1)
    episode = report.episodes[0]
    assert (episode.status, episode.error) == ("completed", None)
    assert episode.fidelity == 1.0, [(s.step_index, s.tree_diff) for s in episode.steps if not s.faithful]
    assert live == [], "a replay must not reach the live shop"
    assert episode.requests.unmatched == 0 and episode.requests.failed == 0
    replayed = store.read("steps", run_id=report.replay_run).to_pylist()
    history = [s for s in replayed if s["action_kind"] in ("go_back", "go_forward")]
    assert len(history) == 4 and all(s["action_ms"] < 5_000 for s in history)
    documents = [
        r
        for r in store.read("requests", run_id=report.replay_run).to_pylist()
        if r["method"] == "GET" and "/api/" not in r["url"] and "beacon" not in r["url"]
    ]
    assert documents and all(r["status"] == 200 for r in documents), [
        (r["url"], r["status"]) for r in documents
    ]
