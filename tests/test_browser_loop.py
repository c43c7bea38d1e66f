"""The browser's event loop: a call cut short by the session stopping is an error of its episode
(an ``MminaError``, which ends that episode and lets the run go on), never a bare CancelledError."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mmina.errors import MminaError
from mmina.recorder.browser_loop import BrowserLoop, SessionStopped
from tests.polling import wait_until


async def _running() -> bool:
    """Whether a task other than this one runs on the loop (the call under test has started)."""
    return len(asyncio.all_tasks()) > 1


def test_a_call_running_when_the_loop_stops_raises_session_stopped() -> None:
    loop = BrowserLoop()
    raised: list[BaseException] = []

    def episode() -> None:
        try:
            loop.run(asyncio.sleep(30), time.monotonic() + 30, "observing the page")
        except BaseException as exc:  # noqa: BLE001 - what it raised is what the test checks
            raised.append(exc)

    thread = threading.Thread(target=episode)
    thread.start()
    wait_until(
        lambda: asyncio.run_coroutine_threadsafe(_running(), loop.loop).result(10),
        30,
        "the call running on the loop",
    )
    loop.stop()
    thread.join(10)
    assert len(raised) == 1 and isinstance(raised[0], SessionStopped) and isinstance(raised[0], MminaError)
    assert "observing the page" in str(raised[0]) and "could not start" not in str(raised[0])


def test_a_call_after_the_loop_stopped_raises_session_stopped() -> None:
    """An episode closing its context after its session was replaced (the loop closed)."""
    loop = BrowserLoop()
    loop.stop()
    with pytest.raises(SessionStopped, match="closing the context could not start"):
        loop.run(asyncio.sleep(0), time.monotonic() + 5, "closing the context")


def test_a_call_that_finishes_returns_its_result() -> None:
    loop = BrowserLoop()
    try:
        assert loop.run(asyncio.sleep(0.01, result=7), time.monotonic() + 5) == 7
    finally:
        loop.stop()


def test_a_call_past_its_deadline_still_says_so() -> None:
    loop = BrowserLoop()
    try:
        with pytest.raises(MminaError, match="passed its deadline"):
            loop.run(asyncio.sleep(5), time.monotonic() + 0.2, "a slow call")
    finally:
        loop.stop()
