"""Animations frozen while the agent thinks: a busy page's animation stands still and runs again
at the thaw, its script runs all along, the browser spends under half the CPU on it meanwhile;
a quick agent never freezes a page."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mmina.agents.settings import AgentSettings
from mmina.recorder import freezing
from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from tests.agents_for_tests import chromium_ticks
from tests.fake_openai import FakeOpenAI
from tests.polling import wait_until

BUSY = """<!doctype html><html><body>
<p id=ticks>0</p><div id=spin style="width:300px;height:300px;background:linear-gradient(red,blue);
animation: spin 0.5s linear infinite"></div>
<div id=held style="animation: spin 0.5s linear infinite; animation-play-state: paused">held by the page</div>
<iframe id=inner srcdoc="<style>@keyframes fade { to { opacity: 0 } }</style>\
<b style='animation: fade 1s infinite'>inner</b>"></iframe>
<style>@keyframes spin { from { transform: rotate(0deg) } to { transform: rotate(360deg) } }</style>
<script>window.pulse = document.getElementById('held').animate([{opacity: 1}, {opacity: 0.5}], \
{duration: 800, iterations: Infinity});</script>
<script>
let ticks = 0;
setInterval(() => { document.getElementById('ticks').textContent = ++ticks; }, 50);
setInterval(() => fetch('/poll?t=' + Date.now()), 100);
</script></body></html>"""
"""A page that never rests: a CSS animation, a Web Animation, one in a same-origin frame, a counter
every 50 ms and a poll every 100 ms; and a CSS animation the page's own rule holds paused."""
ANIMATED = BUSY.split("<script>")[0] + "</body></html>"
"""The same page's animation alone (a spinner)."""
SHADOW = """<!doctype html><html><body><x-spinner></x-spinner><script>
customElements.define('x-spinner', class extends HTMLElement { constructor() { super();
  this.attachShadow({mode: 'open'}).innerHTML = '<style>@keyframes spin { to { transform: rotate(360deg) } }</style>'
    + '<div style="width:50px;height:50px;background:red;animation: spin 0.5s linear infinite"></div>'; } });
</script></body></html>"""
"""A spinner in a shadow root, which ``document.getAnimations`` leaves out: the timeline holds it."""
STILL = "<!doctype html><html><body><h1>Nothing moves here</h1></body></html>"
LOADED_S = 30.0
"""The bound of a wait on the page (a frame, a freeze reaching it, its counter counting on): on
an idle machine each comes within a second; a loaded one may take much longer."""


class _Busy(BaseHTTPRequestHandler):
    polls: list[float] = []

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        body = {"/": BUSY, "/animated": ANIMATED, "/shadow": SHADOW, "/still": STILL}.get(
            self.path, "ok"
        ).encode()
        if self.path.startswith("/poll"):
            _Busy.polls.append(time.monotonic())
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if self.path.startswith("/poll") else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def busy_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def session() -> Iterator[BrowserSession]:
    session = BrowserSession(BrowserConfig(viewport_width=640, viewport_height=480))
    yield session
    session.close()


def _ticks(browser: EpisodeBrowser) -> int:
    return int(browser.session.run(browser.tabs.page.inner_text("#ticks")))


def _animation_ms(browser: EpisodeBrowser) -> float:
    return float(browser.session.run(browser.tabs.page.evaluate("document.getAnimations()[0].currentTime")))


def _polls_between(start: float, end: float) -> int:
    return sum(start <= at <= end for at in _Busy.polls)


ANIMATION_STATE = """() => { const a = document.getAnimations()[0]; return {playState: a.playState, pending: a.pending,
  currentTime: a.currentTime, startTime: a.startTime, playbackRate: a.playbackRate,
  timeline: document.timeline.currentTime, visibility: document.visibilityState, focus: document.hasFocus()}; }"""
"""What the page says of its first animation and its timeline (printed when it never starts)."""


def _first_frames(browser: EpisodeBrowser) -> None:
    """Wait until the animation has run (its time above 0); failing, say how the page sees it."""
    try:
        wait_until(lambda: _animation_ms(browser) > 0, LOADED_S, "the animation's first frames")
    except AssertionError as error:
        state = browser.session.run(browser.tabs.page.evaluate(ANIMATION_STATE))
        raise AssertionError(f"{error}; the page: {state}") from None


def _animation_rate(browser: EpisodeBrowser) -> float:
    return float(browser.session.run(browser.tabs.page.evaluate("document.getAnimations()[0].playbackRate")))


def test_a_frozen_animation_stands_still_while_script_runs(session: BrowserSession, busy_site: str) -> None:
    """Frozen after 0.3 s of thinking: the CSS animation's clock stops while the counter (every
    50 ms) counts 10 more and the poll (every 100 ms) comes 5 more times; at the thaw the
    animation runs again. Each wait is on the page itself (bounded generously), so a loaded
    machine — a first frame late, a slow thaw — makes it slower, not wrong."""
    browser = session.episode(None)
    try:
        browser.open((busy_site,))
        _first_frames(browser)
        entered = time.monotonic()
        with browser.thinking(0.3) as frozen:
            wait_until(lambda: _animation_rate(browser) == 0, LOADED_S, "the freeze reaching the page")
            animation, ticks, frozen_from = _animation_ms(browser), _ticks(browser), time.monotonic()
            wait_until(
                lambda: _ticks(browser) >= ticks + 10,
                LOADED_S,
                "the page's script counting on while its animations are frozen",
            )
            wait_until(
                lambda: _polls_between(frozen_from, time.monotonic()) >= 5,
                LOADED_S,
                "the page's polls going on while its animations are frozen",
            )
            assert _animation_ms(browser) == animation, "the animation ran while it was frozen"
            frozen_for = time.monotonic() - frozen_from
        assert frozen_for * 1000 <= frozen["frozen_ms"] <= (time.monotonic() - entered) * 1000
        wait_until(
            lambda: _animation_ms(browser) > animation + 100,
            LOADED_S,
            "the animation running again after the thaw",
        )
    finally:
        browser.close()


def _still(browser: EpisodeBrowser, clock: str) -> float | None:
    """The page's ``clock`` if it did not move over 0.1 s, else None."""
    before = browser.session.run(browser.tabs.page.evaluate(clock))
    time.sleep(0.1)
    return before if browser.session.run(browser.tabs.page.evaluate(clock)) == before else None


def test_an_animation_in_a_shadow_root_stands_still_by_the_timeline(
    session: BrowserSession, busy_site: str
) -> None:
    """The document timeline at rate 0 holds what the hold script cannot see, without the
    Animation domain turned on."""
    browser = session.episode(None)
    spinner = (
        "document.querySelector('x-spinner').shadowRoot.querySelector('div').getAnimations()[0].currentTime"
    )
    try:
        browser.open((busy_site + "shadow",))
        wait_until(
            lambda: browser.session.run(browser.tabs.page.evaluate(spinner)) > 0,
            LOADED_S,
            "the spinner's first frames",
        )
        with browser.thinking(0.0):
            held = wait_until(lambda: _still(browser, spinner), LOADED_S, "the spinner standing still")
            time.sleep(0.5)  # what is measured: the spinner stands still over half a second
            assert browser.session.run(browser.tabs.page.evaluate(spinner)) == held
        wait_until(
            lambda: browser.session.run(browser.tabs.page.evaluate(spinner)) > held + 100,
            LOADED_S,
            "the spinner running again after the thaw",
        )
    finally:
        browser.close()


def _freeze_calls(
    session: BrowserSession, url: str, monkeypatch: pytest.MonkeyPatch, observed: bool, freezing_calls: int
) -> list[str]:
    """The DevTools calls of one freeze and thaw of ``url`` (observed first as a step does, or
    not), the thaw once the freeze's ``freezing_calls`` were sent."""
    calls: list[str] = []
    original = freezing.send

    async def counted(devtools_session: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        calls.append(method)
        return await original(devtools_session, method, params)

    monkeypatch.setattr(freezing, "send", counted)
    browser = session.episode(None)
    try:
        browser.open((url,))
        if observed:
            browser.observe(0, "look")
        with browser.thinking(0.0) as frozen:
            wait_until(lambda: len(calls) >= freezing_calls, LOADED_S, "the freeze's DevTools calls")
            time.sleep(0.1)  # a hold that was (wrongly) coming would be sent by now
    finally:
        browser.close()
    assert frozen["frozen_ms"] > 0
    return calls


def test_freezing_a_page_where_nothing_moves_takes_three_devtools_calls(
    session: BrowserSession, busy_site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline's rate each way and the hold script (which holds nothing, so nothing is
    given back or let go); the Animation domain stays off."""
    assert _freeze_calls(session, busy_site + "still", monkeypatch, observed=False, freezing_calls=2) == [
        "Animation.setPlaybackRate",
        "Runtime.evaluate",
        "Animation.setPlaybackRate",
    ]


def test_a_page_its_observation_saw_still_is_frozen_by_the_timeline_alone(
    session: BrowserSession, busy_site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observation asked the page whether anything animates: nothing did, so no hold script
    (the timeline still stands still for what starts meanwhile); a page seen animating is held."""
    assert _freeze_calls(session, busy_site + "still", monkeypatch, observed=True, freezing_calls=1) == [
        "Animation.setPlaybackRate",
        "Animation.setPlaybackRate",
    ]
    assert _freeze_calls(session, busy_site + "animated", monkeypatch, observed=True, freezing_calls=2) == [
        "Animation.setPlaybackRate",
        "Runtime.evaluate",
        "Runtime.callFunctionOn",
        "Runtime.releaseObjectGroup",
        "Animation.setPlaybackRate",
    ]


def test_a_page_that_sets_a_global_length_is_observed_and_held(
    session: BrowserSession, busy_site: str
) -> None:
    """``window.length`` (the number of frames) is the page's to replace: a global ``length`` of
    a billion neither hangs the observation nor keeps the freeze from holding the animation."""
    browser = session.episode(None)
    try:
        browser.open((busy_site + "animated",))
        browser.session.run(browser.tabs.page.evaluate("window.length = 1e9"))
        started = time.monotonic()
        observation, _ = browser.observe(0, "look")
        # a loop over a billion frames would take minutes; the observation takes ~0.3 s (seconds loaded)
        assert time.monotonic() - started < LOADED_S and observation.screenshot is not None
        with browser.thinking(0.0):
            held = (
                "(r => r.length > 0 && r.every(a => a.playbackRate === 0))"
                "(document.getAnimations().filter(a => a.playState === 'running'))"
            )
            assert (
                wait_until(
                    lambda: browser.session.run(browser.tabs.page.evaluate(held)),
                    LOADED_S,
                    "every running animation held at rate 0",
                )
                is True
            )
    finally:
        browser.close()


RATES = """() => ({page: document.getAnimations().map(a => `${a.playState} ${a.playbackRate}`).join(', '),
  inner: document.getElementById('inner').contentDocument.getAnimations()\
.map(a => `${a.playState} ${a.playbackRate}`).join(', '),
  globals: Object.keys(window).length, mutations: window.mutations})"""
"""What a script of the page can read of the freeze: its animations' play states and rates (the
spinner, the held one, the Web Animation), the frame's, its globals, DOM changes since it counted them."""
COUNT_MUTATIONS = """() => { window.mutations = 0; new MutationObserver(m => {
  window.mutations += m.filter(r => r.target.id !== 'ticks').length; }).observe(document.documentElement,
  {subtree: true, childList: true, attributes: true}); }"""


def _rates(browser: EpisodeBrowser) -> dict[str, object]:
    return dict(browser.session.run(browser.tabs.page.evaluate(RATES)))


def _rates_once_frozen(browser: EpisodeBrowser, running: dict[str, object]) -> dict[str, object]:
    """The page's rates once the freeze has reached it (they differ from ``running``)."""

    def changed() -> dict[str, object] | None:
        rates = _rates(browser)
        return rates if rates != running else None

    return wait_until(changed, LOADED_S, "the freeze reaching the page's animations")


def test_a_frozen_pages_animations_are_held_at_rate_zero_and_its_own_rules_decide_after(
    session: BrowserSession, busy_site: str
) -> None:
    """Frozen: each running animation (CSS, Web Animations, a same-origin frame's) at rate 0, the
    one the page holds paused left alone, nothing of the page's document or globals changed;
    thawed: every rate back but one the page set meanwhile, and the page's own
    ``animation-play-state`` still decides (an animation paused through its API would ignore it)."""
    browser = session.episode(None)
    try:
        browser.open((busy_site,))
        page = browser.tabs.page
        browser.session.run(page.evaluate(COUNT_MUTATIONS))
        running = _rates(browser)
        with browser.thinking(0.1):
            frozen = _rates_once_frozen(browser, running)
            browser.session.run(page.evaluate("window.pulse.playbackRate = 2"))
        thawed = _rates(browser)
        browser.session.run(
            page.evaluate("document.getElementById('spin').style.animationPlayState = 'paused'")
        )
        paused_by_the_page = _rates(browser)
    finally:
        browser.close()
    assert running == {
        "page": "running 1, paused 1, running 1",
        "inner": "running 1",
        "globals": running["globals"],
        "mutations": 0,
    }
    assert frozen == {**running, "page": "running 0, paused 1, running 0", "inner": "running 0"}
    assert thawed == {**running, "page": "running 1, paused 1, running 2"}
    assert paused_by_the_page["page"] == "paused 1, paused 1, running 2"


def test_a_thaw_that_comes_as_the_freeze_is_sent_leaves_nothing_held(
    session: BrowserSession, busy_site: str
) -> None:
    """Agents answering just as their pages freeze (0 to 30 ms after it begins): whatever the
    moment, every animation runs at its own rate after the thaw (a thaw that cancelled the
    freeze's script after Chromium ran it would never learn what to give back)."""
    browser = session.episode(None)
    try:
        browser.open((busy_site,))
        for delay in [i / 1000 for i in range(0, 31, 2)] * 2:
            with browser.thinking(0.0):
                time.sleep(delay)
            assert _rates(browser)["page"] == "running 1, paused 1, running 1", (
                f"held after a thaw at {delay:.3f} s"
            )
    finally:
        browser.close()


SLOW_FIRST_LOOK = """() => { const native = Document.prototype.getAnimations; let first = true;
  Document.prototype.getAnimations = function () {
    if (first) { first = false; const until = Date.now() + 6000; while (Date.now() < until); }
    return native.call(this);
  }; }"""
"""The page's next ``getAnimations`` (the freeze's) keeps its renderer busy for 6 s, past
``devtools.SEND_TIMEOUT_S``: the freeze's script runs, its answer is given up on."""


def test_a_freeze_whose_answer_was_given_up_on_still_thaws_every_animation(
    session: BrowserSession, busy_site: str
) -> None:
    browser = session.episode(None)
    try:
        browser.open((busy_site,))
        browser.session.run(browser.tabs.page.evaluate(SLOW_FIRST_LOOK))
        with browser.thinking(0.1):
            time.sleep(0.3)
        assert _rates(browser)["page"] == "running 1, paused 1, running 1"
    finally:
        browser.close()


def test_an_agent_quicker_than_the_delay_never_freezes_the_page(
    session: BrowserSession, busy_site: str
) -> None:
    browser = session.episode(None)
    try:
        browser.open((busy_site,))
        _first_frames(browser)
        with browser.thinking(LOADED_S + 30) as frozen:  # longer than any wait below
            before = _animation_ms(browser)
            wait_until(lambda: _animation_ms(browser) > before + 200, LOADED_S, "the animation running on")
        assert frozen["frozen_ms"] == 0.0
    finally:
        browser.close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU counters from /proc (Linux)")
def test_a_frozen_animation_costs_the_compositor_a_fraction(session: BrowserSession, busy_site: str) -> None:
    """The GPU and renderer processes' CPU over the same wait on the same animated page, running
    and frozen: frozen it must cost under a fifth (measured here: 0–1 ticks of 10 ms against 22–27
    in 3 s; with the timeline alone at rate 0, 10 of 26–27)."""
    browser = session.episode(None)
    try:
        browser.open((busy_site + "animated",))
        costs = []
        for freeze_after in (None, 0.0):
            with browser.thinking(freeze_after):
                time.sleep(0.2)
                start = chromium_ticks("gpu", "renderer")
                time.sleep(3.0)
                costs.append(chromium_ticks("gpu", "renderer") - start)
        running, frozen = costs
        assert running >= 6, f"the animated page cost only {running} ticks: nothing to compare"
        assert frozen * 5 < running, f"frozen {frozen} ticks vs running {running}"
    finally:
        browser.close()


def test_a_recording_stores_how_long_each_step_was_frozen(tmp_path: Path) -> None:
    """A model answering after 0.6 s with the freeze after 0.1 s: every step of the (completed)
    episode was frozen for part of the agent's time (about 0.5 s on an idle machine), and
    ``agent_ms`` is the model's time; with the freeze off, ``frozen_ms`` is null."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI(delay_s=0.6) as server:
        for name, freeze_after in (("on", 0.1), ("off", None)):
            config = RecordConfig(
                agent="openai",
                task_ids=("normal/1",),
                run_id=f"freeze-{name}",
                agent_settings=AgentSettings(model="fake-model", base_url=server.url),
                browser=BrowserConfig(freeze_after_s=freeze_after),
            )
            summary = record_run(Store.open(tmp_path / "store", create=True), config)
            assert summary.episodes[0].status == "completed"
    rows = run_query(
        Store.open(tmp_path / "store"),
        "select run_id, frozen_ms, agent_ms from steps order by run_id, step_index",
    ).rows
    frozen = [(f, a) for run, f, a in rows if run == "freeze-on"]
    # frozen from the freeze to the wake, which comes just after the agent's answer
    assert frozen and all(0 < f < a + 2000 and a >= 600 for f, a in frozen), frozen
    assert max(f for f, _a in frozen) >= 300, frozen
    assert all(f is None for run, f, _a in rows if run == "freeze-off")
