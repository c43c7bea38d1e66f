"""A recording and a replay that cannot hang (issue 23, item 7).

Every call into the browser has a deadline on the caller's side. Three ways to get stuck, each
done for real: a page whose script never returns (``while(true){}`` blocks its renderer), a
Playwright driver that stops answering (SIGSTOP), and a route handler that never answers (the
replay's own router, made to wait forever). In each, the stuck step is stored with its cause,
the episode goes on or ends with a reason, and the run finishes and reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mmina.agents.protocol import AgentReply
from mmina.observations.observation import Observation
from mmina.recorder import settling
from mmina.recorder.browser import (
    ACTION_DEADLINE_S,
    OBSERVE_DEADLINE_S,
    BrowserConfig,
    BrowserSession,
    DeadlinePassed,
    RestartingSession,
)
from mmina.recorder.recording import RecordConfig, record_run
from mmina.recorder.settling import GRACE_S, LIVENESS_S, PROBE_DEADLINE_S
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.heavy import sized
from tests.local_site import HTML, LocalSite, pages_handler
from tests.test_independent_site import _driver_pids

PAGES = {
    "/": "<h1>Start</h1><a href='/next'>Next page</a> <button onclick='while (true) {}'>Spin forever</button>",
    "/next": "<h1>Next</h1><p id=late>Loading</p><script>fetch('/api/late').then(r => r.text())"
    ".then(t => { document.getElementById('late').textContent = t; })</script><a href='/'>Home</a>",
    "/api/late": "Arrived",
}


def _kind(path: str) -> str:
    return "text/plain" if path.startswith("/api/") else HTML


@pytest.fixture(scope="module")
def site() -> Any:
    with LocalSite(pages_handler(PAGES, _kind)) as pages:
        yield pages.url.rstrip("/")


def _suite(folder: Path, site: str, scripts: list[list[dict]]) -> Path:
    for number, script in enumerate(scripts, start=1):
        path = folder / "stuck" / f"{number}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "task_id": number,
                    "intent": "Follow the script.",
                    "start_url": f"{site}/",
                    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["x"]}},
                    "procedure": ["stuck", "end"],
                    "reference_script": script,
                }
            )
        )
    return folder / "stuck"


def _click(name: str, role: str = "link") -> dict:
    return {"action": "click", "target": {"role": role, "name": name}}


NEXT_AND_STOP = [_click("Next page"), {"action": "stop", "answer": "x"}]
BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)


def shortened(monkeypatch: pytest.MonkeyPatch, **short: float) -> dict[str, float]:
    """The browser's deadlines named, set to ``short`` for the test (with MMINA_HEAVY=1 left as
    they are): what a stuck case waits out, on the caller's side as ever, passed sooner. The
    test site's pages are tiny: a step that does not get stuck takes a fraction of them. Each
    recorder module that imported a deadline by name gets the short one."""
    modules = [module for name, module in sys.modules.items() if name.startswith("mmina.recorder.")]
    for name, value in sized(short, {}).items():
        for module in modules:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, value)
    return {name: getattr(settling, name) for name in short}


def _steps(store: Store, run_id: str) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"]):
        grouped.setdefault(row["task_id"] if "task_id" in row else row["episode_id"], []).append(row)
    return grouped


def test_a_page_stuck_in_a_script_loop_ends_its_episode_with_the_cause_and_the_run_goes_on(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the click's own waits for the stuck page to load and settle end first (sooner by default,
    # the test's pages being tiny): its deadline stays
    deadlines = shortened(monkeypatch, OBSERVE_DEADLINE_S=10.0, CLOSE_DEADLINE_S=10.0, LOAD_MAX_S=3.0)
    suite = _suite(
        tmp_path / "tasks", site, [[_click("Spin forever", "button"), *NEXT_AND_STOP], NEXT_AND_STOP]
    )
    store = Store.open(tmp_path / "store", create=True)
    started = time.monotonic()
    summary = record_run(store, RecordConfig(tasks=str(suite), agent="oracle", browser=BROWSER))
    elapsed = time.monotonic() - started
    stuck, fine = sorted(summary.episodes, key=lambda e: e.task_id)
    assert stuck.status == "error" and "observing the page passed its deadline" in stuck.error
    assert "waiting" in stuck.error  # where it waited is named
    assert stuck.n_steps == 1  # the click on the spinning button was stored before the episode ended
    assert (fine.status, fine.stop_reason, fine.n_steps) == ("completed", "stop", 2)
    bound = (
        ACTION_DEADLINE_S
        + deadlines["OBSERVE_DEADLINE_S"]
        + deadlines["CLOSE_DEADLINE_S"]
        + 4 * GRACE_S
        + 120
    )
    assert elapsed < bound


class StopsTheDriver:
    """A user's agent that, at its second step of the first episode, stops Playwright's driver
    (SIGSTOP) and then asks for a click; afterwards it plays ``NEXT_AND_STOP`` by name."""

    name = "stops-the-driver"
    uses_marks = False
    stopped: list[int] = []

    def reset(self, task: object) -> None:
        self.position = 0

    def act(self, observation: Observation) -> AgentReply:
        self.position += 1
        if self.position == 2:
            return AgentReply(output="stop [x]")
        if not StopsTheDriver.stopped:
            StopsTheDriver.stopped.extend(_driver_pids())
            for pid in StopsTheDriver.stopped:
                os.kill(pid, signal.SIGSTOP)
        element = observation.find("link", "Next page")
        return AgentReply(output=f"click [{element.id if element else 'missing'}]")


def test_a_driver_that_stops_answering_costs_its_episode_never_the_run(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deadlines = shortened(monkeypatch, ACTION_DEADLINE_S=15.0, CLOSE_DEADLINE_S=10.0)
    suite = _suite(tmp_path / "tasks", site, [NEXT_AND_STOP, NEXT_AND_STOP])
    store = Store.open(tmp_path / "store", create=True)
    StopsTheDriver.stopped.clear()
    try:
        summary = record_run(
            store, RecordConfig(tasks=str(suite), agent=f"{__name__}:StopsTheDriver", browser=BROWSER)
        )
    finally:
        for pid in StopsTheDriver.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    assert len(StopsTheDriver.stopped) == 1
    stuck, fine = sorted(summary.episodes, key=lambda e: e.task_id)
    assert stuck.status == "error" and "the browser stopped answering" in stuck.error
    assert "network trace (HAR) is lost" in stuck.error or "stopped answering" in stuck.error
    assert (fine.status, fine.stop_reason) == ("completed", "stop")
    steps = store.read("steps", run_id=summary.run_id).to_pylist()
    first = [s for s in steps if s["episode_id"] == stuck.episode_id]
    assert len(first) == 1 and "passed its deadline" in first[0]["action_error"]
    assert first[0]["action_ms"] < (deadlines["ACTION_DEADLINE_S"] + GRACE_S + PROBE_DEADLINE_S + 5) * 1e3
    assert not any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in StopsTheDriver.stopped)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_call_into_a_stopped_driver_returns_at_its_deadline_naming_where_it_waited(site: str) -> None:
    session = BrowserSession(BROWSER)
    try:
        browser = session.episode(None)
        browser.open((f"{site}/",))
        pids = _driver_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(DeadlinePassed, match="waiting for Page.title"):
                session.run(browser.tabs.page.title(), time.monotonic() + 2, "reading the title")
            assert time.monotonic() - started < 2 + PROBE_DEADLINE_S + 5
            assert not session.answers() and not session.connected
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
    finally:
        session.close()


def test_a_session_slow_to_answer_between_episodes_is_kept_not_restarted() -> None:
    """A driver that answers late (a loaded machine; here stopped for longer than a stuck call's
    probe may take, then going on) is not taken for dead before the next episode: restarting it
    would end every episode in flight on it."""
    session = BrowserSession(BROWSER)
    browsers = RestartingSession(BROWSER, session)
    pids = _driver_pids()
    resume = threading.Timer(PROBE_DEADLINE_S + 1, lambda: [os.kill(pid, signal.SIGCONT) for pid in pids])
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        resume.start()
        started = time.monotonic()
        assert browsers.alive() is session and session.connected
        assert PROBE_DEADLINE_S < time.monotonic() - started < LIVENESS_S
    finally:
        resume.join()
        browsers.close()


def test_a_route_handler_that_never_answers_is_answered_by_its_deadline(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay's router waits forever on one request (the XHR of /next): the request still
    gets an answer (a 504 naming the cause) by the router's deadline, the step is stored,
    the replay finishes and reports the request as a defect."""
    from mmina.replayer import router as router_module

    suite = _suite(tmp_path / "tasks", site, [NEXT_AND_STOP])
    store = Store.open(tmp_path / "store", create=True)
    recorded = record_run(store, RecordConfig(tasks=str(suite), agent="oracle", browser=BROWSER))
    reply = router_module.ArchiveRouter._reply

    async def never_for_late(self: Any, request: Any) -> Any:
        if "/api/late" in request.url:
            await asyncio.Event().wait()
        return await reply(self, request)

    monkeypatch.setattr(router_module.ArchiveRouter, "_reply", never_for_late)
    monkeypatch.setattr(router_module, "ROUTE_DEADLINE_S", 1.0)
    started = time.monotonic()
    report = replay_run(store, recorded.run_id)
    assert time.monotonic() - started < 2 * (ACTION_DEADLINE_S + OBSERVE_DEADLINE_S)
    episode = report.episodes[0]
    assert (episode.status, episode.replayed_steps) == ("completed", 2)
    assert not episode.steps[1].tree_equal  # the XHR's text never arrived: the router's 504 did
    assert episode.requests.failed == 1 and episode.requests.unmatched == 0
    replayed = sorted(
        store.read("steps", run_id=report.replay_run).to_pylist(), key=lambda r: r["step_index"]
    )
    assert (
        "could not answer" in replayed[1]["tree_text"] and "no answer within 1 s" in replayed[1]["tree_text"]
    )
