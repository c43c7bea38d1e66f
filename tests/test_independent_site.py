"""Replay of a site mmina did not write: an independent shop (tests/independent_site/).

The six-step episode of the issue — click, go_back, click through a 302 -> 301 chain with a
random query, go_back, type + Enter into a POST form with a random CSRF field, stop — is
recorded against the live shop, the shop is restarted with new random state on a new port
under the same host name, and the episode is replayed from the archive while the browser could
reach the restarted shop. Real Chromium, real servers: with and without ``Cache-Control:
no-store`` on every response, with the back-forward cache off (Playwright's default) and on.

Before the fix the replay died at the first go_back (Playwright's wait for a load the page
never fires) or killed Playwright's driver in the redirect chain (an unhandled
``NavigationAbortedError`` from ``Route._redirect_navigation_request``), losing the run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from playwright.sync_api import sync_playwright

from mmina.cli import cli
from mmina.recorder.browser import ACTION_DEADLINE_S, OBSERVE_DEADLINE_S, BrowserConfig, find_chromium
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.recorder.settling import SETTLE_MAX_S
from mmina.replayer.fidelity import summarize
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.independent_site import IndieShop
from tests.independent_site.agent import SCRIPT, write_task

STEPS = len(SCRIPT)
URLS = [
    "http://shop.indie.test/",
    "http://shop.indie.test/catalog",
    "http://shop.indie.test/",
    "http://shop.indie.test/deals/today",
    "http://shop.indie.test/",
    "http://shop.indie.test/search",
]


def _steps(store: Path, run_id: str) -> list[dict]:
    table = Store.open(store).read("steps", run_id=run_id)
    return sorted(table.to_pylist(), key=lambda r: r["step_index"])


def _within_deadlines(steps: list[dict]) -> None:
    for step in steps:
        assert step["action_ms"] is None or step["action_ms"] < ACTION_DEADLINE_S * 1e3, step["step_index"]
        assert step["observe_ms"] < OBSERVE_DEADLINE_S * 1e3, step["step_index"]


@pytest.mark.parametrize(
    ("no_store", "back_forward_cache"),
    [
        pytest.param(
            False, True, id="plain-headers-bfcache-on"
        ),  # going back restores the page from the cache
        pytest.param(True, False, id="no-store-bfcache-off"),  # going back fetches the page again
        pytest.param(False, False, id="plain-headers-bfcache-off", marks=pytest.mark.heavy),
        pytest.param(True, True, id="no-store-bfcache-on", marks=pytest.mark.heavy),
    ],
)
def test_the_six_step_episode_replays_exactly_after_the_shop_restarted(
    tmp_path: Path, no_store: bool, back_forward_cache: bool
) -> None:
    suite = write_task(tmp_path / "tasks")
    with IndieShop(no_store=no_store) as shop:
        browser = BrowserConfig(extra_args=tuple(shop.chromium_args()), back_forward_cache=back_forward_cache)
        recorded = _record(tmp_path / "store", suite, browser)
        episode = recorded.episodes[0]
        assert (episode.status, episode.stop_reason, episode.n_steps, episode.error) == (
            "completed",
            "stop",
            STEPS,
            None,
        )
        steps = _steps(tmp_path / "store", recorded.run_id)
        assert [s["url"] for s in steps] == URLS
        assert [s["action_error"] for s in steps] == [None] * STEPS
        assert "Oolong Breeze" in steps[-1]["tree_text"]
        featured = steps[0]["tree_text"]

        old_port = shop.port
        shop.restart()
        assert shop.port != old_port
        # the restarted shop is reachable under the same name, and serves other content
        with sync_playwright() as playwright:
            restarted = playwright.chromium.launch(
                executable_path=find_chromium(None, playwright), args=list(shop.chromium_args())
            )
            page = restarted.new_page()
            page.goto(shop.url)
            page.wait_for_function("!document.body.innerText.includes('Loading featured')")
            assert page.locator("#featured").inner_text() not in featured
            restarted.close()
        before = len(shop.hits)

        browser = BrowserConfig(extra_args=tuple(shop.chromium_args()), back_forward_cache=back_forward_cache)
        report = replay_run(Store.open(tmp_path / "store"), recorded.run_id, browser=browser)
        assert shop.hits[before:] == [], "a replay must not ask the live site anything"

    fidelity = report.episodes[0]
    assert (fidelity.status, fidelity.error) == ("completed", None)
    summary = summarize(report.episodes)
    assert (summary["steps"], summary["url_equal"], summary["tree_equal"], summary["fidelity"]) == (
        STEPS,
        STEPS,
        STEPS,
        1.0,
    ), [s.tree_diff for s in fidelity.steps]
    assert summary["requests"].unmatched == 0 and fidelity.unmatched_urls == ()
    assert summary["requests"].exact > 0
    replayed = _steps(tmp_path / "store", report.replay_run)
    assert [s["url"] for s in replayed] == URLS
    assert [s["action_error"] for s in replayed] == [None] * STEPS
    _within_deadlines(replayed)
    _within_deadlines(steps)


def _chromium_wrapper(folder: Path, args: list[str]) -> Path:
    """A Chromium executable that maps the shop's host name, for the CLI (which has no flag for it)."""
    with sync_playwright() as playwright:
        chromium = find_chromium(None, playwright)
    wrapper = folder / "chromium-indie"
    quoted = " ".join(f"'{a}'" for a in args)
    wrapper.write_text(f'#!/bin/sh\nexec "{chromium}" {quoted} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


def test_the_cli_records_and_replays_the_shop_with_a_users_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mmina record --agent module:Class` then `mmina replay --run`: the issue's own path (no-store,
    whose replay crashed Playwright's driver), the replay browser unable to reach the shop."""
    monkeypatch.delenv("MMINA_CHROMIUM", raising=False)
    suite = write_task(tmp_path / "tasks")
    store = tmp_path / "store"
    runner = CliRunner()
    with IndieShop(no_store=True) as shop:
        wrapper = _chromium_wrapper(tmp_path, shop.chromium_args())
        recorded = runner.invoke(
            cli,
            [
                "record",
                "--tasks",
                str(suite),
                "--agent",
                "tests.independent_site.agent:SixSteps",
                "--store",
                str(store),
                "--browser",
                str(wrapper),
                "--run-id",
                "indie",
                "--format",
                "json",
            ],
        )
        assert recorded.exit_code == 0, recorded.output
        shop.restart()
        before = len(shop.hits)
        replayed = runner.invoke(
            cli,
            [
                "replay",
                "--run",
                "indie",
                "--store",
                str(store),
                "--min-fidelity",
                "1",
                "--run-id",
                "indie-replay",
                "--format",
                "json",
            ],
        )
        assert shop.hits[before:] == []
    assert replayed.exit_code == 0, replayed.output
    report = json.loads(replayed.output[replayed.output.index("{") :])
    assert report["passed"] is True
    steps = _steps(store, "indie-replay")
    assert [s["url"] for s in steps] == URLS and [s["action_error"] for s in steps] == [None] * STEPS


def _driver_pids() -> list[int]:
    """Playwright drivers (node) this test process started."""
    pids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            command = (stat_file.parent / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and command.endswith(b"/driver/node"):
            pids.append(int(stat_file.parent.name))
    return pids


def test_a_driver_that_dies_mid_episode_costs_that_episode_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the redirect race did to Playwright's driver, done on purpose: the driver is killed
    while the first episode goes through the redirect. That episode is stored as an error with
    the steps it had; the next one replays in a fresh browser."""
    from mmina.replayer.router import ArchiveRouter

    suite = write_task(tmp_path / "tasks")
    (suite / "2.json").write_text((suite / "1.json").read_text())
    with IndieShop() as shop:
        recorded = _record(tmp_path / "store", suite, BrowserConfig(extra_args=tuple(shop.chromium_args())))
    assert [e.status for e in recorded.episodes] == ["completed", "completed"]
    killed: list[int] = []
    answer = ArchiveRouter._answer

    def killing_answer(self, request):
        if request.url.endswith("/deals") and not killed:
            killed.extend(_driver_pids())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        return answer(self, request)

    monkeypatch.setattr(ArchiveRouter, "_answer", killing_answer)
    report = replay_run(Store.open(tmp_path / "store"), recorded.run_id)
    assert len(killed) == 1
    first, second = report.episodes
    assert first.status == "error" and "connection closed" in first.error
    assert 0 < first.replayed_steps < STEPS
    assert (second.status, second.fidelity) == ("completed", 1.0)
    stored = Store.open(tmp_path / "store").read("episodes", run_id=report.replay_run).to_pylist()
    assert sorted(e["status"] for e in stored) == ["completed", "error"]


def test_a_request_the_router_fails_on_is_answered_not_left_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A routed request left unanswered never loads its page (go_back and tree reads then time
    out): a failure inside the router answers 500 instead, and the step finishes at once."""
    from mmina.replayer.router import ArchiveRouter

    suite = write_task(tmp_path / "tasks", SCRIPT[:2] + SCRIPT[-1:])
    with IndieShop() as shop:
        recorded = _record(tmp_path / "store", suite, BrowserConfig(extra_args=tuple(shop.chromium_args())))
    answer = ArchiveRouter._answer

    def failing_on_stock(self, request):
        if "/api/stock" in request.url:
            raise RuntimeError("a matcher bug")
        return answer(self, request)

    monkeypatch.setattr(ArchiveRouter, "_answer", failing_on_stock)
    report = replay_run(Store.open(tmp_path / "store"), recorded.run_id)
    episode = report.episodes[0]
    assert (episode.status, episode.replayed_steps) == ("completed", 3)
    steps = _steps(tmp_path / "store", report.replay_run)
    assert [s["action_error"] for s in steps] == [None] * 3
    assert (
        episode.steps[1].url_equal and not episode.steps[1].tree_equal
    )  # the stock line stayed "Checking stock"
    assert "Checking stock" in steps[1]["tree_text"]
    assert (
        steps[0]["action_ms"] < SETTLE_MAX_S * 1_000
    )  # a request left paused would hold settling for its 3 s
    _within_deadlines(steps)


def _record(store: Path, suite: Path, browser: BrowserConfig) -> RunSummary:
    return record_run(
        Store.open(store, create=True), RecordConfig(tasks=str(suite), agent="oracle", browser=browser)
    )
