"""The page's random draws in a recording and its replay (issue 56, item 5): scheme 2 seeds a
stream per calling place, so an id drawn after another number of draws elsewhere, or after
other scripts in another order, comes out as recorded; scheme 1 (stores before schema version
10) replays as it always did.

The fixture page stands for a page whose draws depend on timing: an unseeded Web Worker (the
episodes here are recorded under schemes 2 and 1, which leave workers unseeded) decides how many
numbers an animation draws first (1 to 2^20) and in which order two scripts draw their ids; each
id is shown and sent to the server, which echoes it.
Recorded live and replayed from the archive in real Chromium: the worker decides anew in the
replay, as timing would.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Request, Route, sync_playwright

from mmina.recorder import seeding
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.chromium import find_chromium
from mmina.recorder.seeding import (
    PER_CALL_SITE,
    PER_EPISODE,
    SEEDED_RANDOM,
    Seeding,
    seed_for,
)
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.local_site import LocalSite, answering_handler, record_scripted, tree_lines

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
PAGE = """<!doctype html><title>Berths</title><h1>Berths</h1>
<p id="pilot">Pilot: none</p><p id="tug">Tug: none</p><p id="booking">No booking</p>
<button id="book">Book a berth</button>
<script src="/pilot.js"></script><script src="/tug.js"></script><script>
const worker = new Worker(URL.createObjectURL(new Blob(
  ["postMessage([Math.floor(Math.random() * 1048576), Math.random() < 0.5])"], {type: "text/javascript"})));
worker.onmessage = ({data: [jitter, pilotFirst]}) => {
  let wave = 0;
  for (let i = 0; i <= jitter; i++) wave += Math.random();  // an animation's draws, as many as timing gave
  crypto.getRandomValues(new Uint8Array(1 + (jitter & 1023)));
  const [first, second] = pilotFirst ? [pilot, tug] : [tug, pilot];
  setTimeout(first, 0);
  setTimeout(second, 0);
};
function shown(where, id) {
  fetch('/api/echo?id=' + id).then(r => r.json()).then(reply => {
    const echoed = reply.id === id ? ' (echoed)' : ' (replaced)';
    document.getElementById(where).textContent = where + ': ' + id + echoed;
  });
}
document.getElementById('book').addEventListener('click', () => {
  shown('booking', crypto.randomUUID() + '/' + Math.random().toString(36).slice(2, 10));
});
</script>"""
PILOT = "function pilot() { shown('pilot', crypto.randomUUID()); }"
TUG = "function tug() { shown('tug', Math.random().toString(36).slice(2, 12)); }"
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Book a berth"}},
    {"action": "stop", "answer": "done"},
]
WORDS = ("pilot:", "tug:", "booking:")
RACE = """<script src="/order.js"></script><script>
function pilot() { return Math.random(); }
function tug() { return Math.random(); }
for (let i = 0; i < window.before; i++) Math.random();
window.drawn = {};
for (const name of window.order) setTimeout(() => { window.drawn[name] = window[name](); }, 0);
</script>"""
"""Two functions drawing in the order ``/order.js`` says, after as many other draws as it says."""
V1_SHA256 = "927df671e449c37fcfe4a2283087f8cac965739f5b824cb14f96aaf5d2936212"
"""The scheme-1 script as every store before schema version 10 was recorded with: a replay of one
must draw exactly what it drew."""


def _answer(path: str) -> tuple[int, str, bytes]:
    parts = urlsplit(path)
    if parts.path == "/api/echo":
        return 200, "application/json", json.dumps({"id": parse_qs(parts.query)["id"][0]}).encode()
    if parts.path in ("/pilot.js", "/tug.js"):
        return 200, "text/javascript", (PILOT if parts.path == "/pilot.js" else TUG).encode()
    return 200, "text/html; charset=utf-8", PAGE.encode()


def _record(folder, scheme: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, str]:
    monkeypatch.setattr(seeding, "RECORDED_SEEDING", scheme)
    with LocalSite(answering_handler(_answer)) as site:
        store, summary = record_scripted(folder, site.url, "berths", "Book a berth.", SCRIPT, BROWSER)
    return store, summary.run_id


def _seeding(store: Store, run_id: str) -> list[int | None]:
    return store.read("episodes", run_id=run_id, columns=["random_seeding"]).column(0).to_pylist()


def test_ids_drawn_after_other_draws_and_in_another_order_replay_as_recorded(tmp_path, monkeypatch) -> None:
    store, run_id = _record(tmp_path, PER_CALL_SITE, monkeypatch)
    recorded = tree_lines(store, run_id, *WORDS)
    assert sum("(echoed)" in line for line in recorded) >= 4, recorded  # pilot, tug (twice), the booking
    assert _seeding(store, run_id) == [PER_CALL_SITE]
    report = replay_run(store, run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert tree_lines(store, report.replay_run, *WORDS) == recorded
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert episode.requests.nearest == episode.requests.unmatched == 0, "every id was sent as recorded"
    assert _seeding(store, report.replay_run) == [PER_CALL_SITE]


def test_a_scheme_1_episode_replays_with_scheme_1_draws(tmp_path, monkeypatch) -> None:
    """An episode recorded as stores before schema version 10 were: its replay seeds as it was
    seeded, one stream per document, so the draws the worker shifted come out otherwise (the
    echoed ids are rewritten, the ids the page shows are not)."""
    store, run_id = _record(tmp_path, PER_EPISODE, monkeypatch)
    assert _seeding(store, run_id) == [PER_EPISODE]
    report = replay_run(store, run_id, browser=BROWSER)
    assert _seeding(store, report.replay_run) == [PER_EPISODE]
    assert report.episodes[0].fidelity < 1.0
    assert tree_lines(store, report.replay_run, *WORDS) != tree_lines(store, run_id, *WORDS)


def _fulfil(kind: str, body: str, route: Route, _request: Request) -> None:
    route.fulfill(body=body, content_type=kind)


def _mulberry32(seed: int, count: int) -> list[float]:
    """Scheme 1's ``Math.random``, in Python."""
    drawn, state = [], seed
    for _ in range(count):
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + ((t ^ (t >> 7)) * (t | 61))) & 0xFFFFFFFF
        drawn.append(((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296)
    return drawn


def test_scheme_1_is_byte_for_byte_the_script_stores_were_recorded_with() -> None:
    assert hashlib.sha256(SEEDED_RANDOM.encode()).hexdigest() == V1_SHA256
    assert Seeding.of("an episode", None) == Seeding(seed_for("an episode"), PER_EPISODE)
    assert Seeding.of("an episode", None).script() == SEEDED_RANDOM % {
        "seed": seed_for("an episode"),
        "document": seeding.DOCUMENT_ID,
    }


def test_a_draw_depends_on_its_place_not_on_the_draws_before_it() -> None:
    """In real Chromium: the same page with the two scripts' draws in either order and 0 or 5000
    other draws before them. Scheme 2 gives each script its own ids; scheme 1 gives the first
    draws of the stream to whichever comes first (Python's mulberry32 says which)."""
    drawn: dict[tuple[int, str, int], dict[str, float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(None, playwright))
        for scheme in (PER_EPISODE, PER_CALL_SITE):
            for order, before in (("pilot,tug", 0), ("tug,pilot", 5000)):
                context = browser.new_context()
                context.add_init_script(Seeding.of("a berth", scheme).script())
                context.route("http://berths.test/", partial(_fulfil, "text/html", RACE))
                script = f"window.order = {order.split(',')}; window.before = {before};"
                context.route("http://berths.test/order.js", partial(_fulfil, "text/javascript", script))
                page = context.new_page()
                page.goto("http://berths.test/")
                page.wait_for_function("Object.keys(window.drawn).length == 2")
                drawn[scheme, order, before] = page.evaluate("window.drawn")
                context.close()
        browser.close()
    assert drawn[PER_CALL_SITE, "pilot,tug", 0] == drawn[PER_CALL_SITE, "tug,pilot", 5000]
    stream = _mulberry32(seed_for("a berth"), 5002)
    assert drawn[PER_EPISODE, "pilot,tug", 0] == {"pilot": stream[0], "tug": stream[1]}
    assert drawn[PER_EPISODE, "tug,pilot", 5000] == {"tug": stream[5000], "pilot": stream[5001]}
