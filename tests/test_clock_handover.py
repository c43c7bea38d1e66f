"""A page's data handed over while its clock stands at a cap it knows (issue 56): the page works on
it with its clock running, as the recording's page did.

The flake this pins down (``test_replay_slower_than_the_recording_reads_the_recorded_clock`` in
``tests/test_timeline_clock.py``, under load): a replay holds τ at the recorded end of an action's
input until the replayed input is dispatched (``steps.dispatch_ms``), and every frame hears of that
cap. A click's round trip is slower on a loaded machine, so what the click made the page ask for
came back while τ stood at the input's end, or just after the input's hold was lifted, which no
frame heard of (a lift only answers a frame's question). Either way the page's clock stood at the
input's end while it worked on its data: a page busy with what it was handed asks for news only
once its work is done, and its work read 0 s on its clock (0.2-0.5 s recorded).

Real Chromium and a real paced ``ArchiveRouter`` on a real :class:`Timeline`; the test plays the
pacer's part (holds the input's cap, lifts it as a dispatch that ended would). Each case has its
control: the hand-over as it was (the page told only where the response's own cap held τ) reads 0.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from playwright.async_api import Page, async_playwright

from mmina.recorder.chromium import find_chromium, launch_chromium
from mmina.replayer.archive import Archive, Exchange
from mmina.replayer.router import ArchiveRouter
from mmina.replayer.timeline import Timeline

SITE = "http://board.test/"
WORK = 60_000_000
"""Steps of work the page does on its data between two readings of its clock (tens of milliseconds
on an idle machine, hundreds on a loaded one)."""
PAGE = (
    b"""<!doctype html><title>Board</title><button id=go>Refresh</button><p id=out>waiting</p>
<table id=rows></table><script>
document.getElementById('go').addEventListener('click', () => fetch('data').then(r => r.json()).then(data => {
  const arrived = Date.now();
  let h = 0;
  for (let i = 0; i < %d; i++) h = (h * 31 + i) | 0;
  document.getElementById('rows').dataset.built = h;
  document.getElementById('out').textContent = 'worked ' + (Date.now() - arrived) + ' ms on ' + data.length + ' rows';
}));
</script>"""
    % WORK
)
INPUT = ("action", 0)
INPUT_S = 0.05
"""How long the recorded input took to dispatch: τ is held that long after it begins."""
BOUND_S = 30.0


def _archive() -> Archive:
    """The page and its data, neither with a recorded moment (nothing expected on the timeline), the
    data's exchange instantaneous: it is due as soon as the page asks."""
    return Archive(
        [
            Exchange(0, "GET", SITE, 200, (("content-type", "text/html"),), PAGE, mime_type="text/html"),
            Exchange(
                1,
                "GET",
                SITE + "data",
                200,
                (("content-type", "application/json"),),
                b"[1, 2, 3]",
                request_type="fetch",
                mime_type="application/json",
            ),
        ]
    )


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not await check():
        assert time.monotonic() < deadline, f"never {what}"
        await asyncio.sleep(0.01)


async def _worked_ms(lifted_first: bool) -> tuple[int, list[bool]]:
    """The page's reading of its work on the data it asked for by a click, τ held at the click's
    input (lifted before the page asks when ``lifted_first``, else once the page has worked), and
    whether a frame might go by a lifted cap (``PageClock.behind``) before the click and after."""
    started = datetime.now(UTC)
    timeline = Timeline()
    router = ArchiveRouter(_archive(), started, paced=True, timeline=timeline)
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright, find_chromium(None, playwright), (), False)
        try:
            context = await browser.new_context()
            await router.prepare(context)
            page = await context.new_page()
            await page.goto(SITE)
            at = timeline.now() + INPUT_S
            timeline.hold(INPUT, at, yields=True, window=True)  # as PacedSteps._hold_dispatch does
            cap_ms = math.floor((started.timestamp() + at) * 1e3)  # as a page's clock reads it

            async def heard() -> bool:  # the page knows the input's cap
                return await page.evaluate("globalThis.__mminaTimeline.cap") == cap_ms

            await _until(heard, "heard of the input's cap")
            await _until(_standing(timeline), "stood at the input's cap")
            if lifted_first:
                timeline.lift(INPUT)  # the dispatch ended (the pacer's after_dispatch): no frame is told
            assert router.clock is not None
            behind = [router.clock.behind()]
            await page.click("#go")
            text = await _shown(page)
            behind.append(router.clock.behind())
            timeline.lift(INPUT)
            await context.close()
        finally:
            await browser.close()
    return int(text.split()[1]), behind


def _standing(timeline: Timeline) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return timeline.standing_at(INPUT)

    return check


async def _shown(page: Page) -> str:
    await page.wait_for_function(
        "document.getElementById('out').textContent.startsWith('worked')", timeout=BOUND_S * 1e3
    )
    return await page.inner_text("#out")


def _as_before(self: ArchiveRouter, cap: object, kind: str) -> list[object] | None:
    """The hand-over before: frames told only where the response's own cap held τ."""
    assert self.timeline is not None
    return [cap] if kind != "document" and self.timeline.standing_at(cap) else None


def test_a_page_handed_its_data_while_time_stands_at_an_input_works_on_a_running_clock() -> None:
    worked, behind = asyncio.run(_worked_ms(lifted_first=False))
    assert worked >= 10 and behind == [False, False]


def test_a_page_handed_its_data_after_a_lift_it_did_not_hear_of_works_on_a_running_clock() -> None:
    worked, behind = asyncio.run(_worked_ms(lifted_first=True))
    assert behind == [True, False]  # the frame knew the input's cap, lifted since; told before its data
    assert worked >= 10


def test_control_told_only_at_its_own_cap_the_page_works_at_a_standing_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Its twin after a lift the frame did not hear of is no control: the response's own cap, held
    where τ is as the page asks, may come down below the cap the frame knows and be pushed to it —
    or not, as τ ran on meanwhile: the race the test of the timeline's clock lost under load.)"""
    monkeypatch.setattr(ArchiveRouter, "_caps_to_lift", _as_before)
    assert asyncio.run(_worked_ms(lifted_first=False))[0] == 0
