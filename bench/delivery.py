"""How fast a large archived body reaches the page, against the live server that sent it.

A page loads a 6 MB script (the size of the Dash application's plotly.js bundle) three ways, in
fresh contexts of one Chromium, alternating, under whatever load the machine has:

* live: from a local HTTP server (Python's ``ThreadingHTTPServer``), no route at all;
* replay: from an archive holding the same exchange, through mmina's ``ArchiveRouter``, which
  hands a body that large to the page through its loopback body server;
* fulfilled: the same router with the body server off (``large_body`` above the body's size),
  the body handed over by ``route.fulfill`` (what every replay did before).

Each time is from ``goto`` to the script having run (median of ``ROUNDS``), over HTTP and over
TLS (the live server with a certificate the contexts take; the replay's ``https:`` body served by
the body server's TLS side). Target: the replay's within 1.2 of live (issue 56: "serve as fast as
the original server").
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from playwright.async_api import BrowserContext, async_playwright

from bench.results import Section, Target
from mmina.recorder.chromium import find_chromium, launch_chromium
from mmina.replayer.archive import Archive, Exchange
from mmina.replayer.loopback_tls import server_context
from mmina.replayer.router import ArchiveRouter
from tests.local_site import LocalSite, answering_handler

ROUNDS = 15
"""Loads of each way per scheme; under load a median of 7 swung by a third from run to run."""
BUNDLE = b"window.done = true; /*" + b"plotly " * 900_000 + b"*/"
PAGE = b"<!doctype html><title>Tides</title><script src='/bundle.js'></script><p>Tides</p>"
Prepare = Callable[[BrowserContext], Awaitable[None]]


def _answer(path: str) -> tuple[int, str, bytes]:
    if path.startswith("/bundle.js"):
        return 200, "application/javascript", BUNDLE
    return 200, "text/html", PAGE


def _archive(url: str) -> Archive:
    return Archive(
        [
            Exchange(0, "GET", url, 200, (("content-type", "text/html"),), PAGE, mime_type="text/html"),
            Exchange(
                1,
                "GET",
                url + "bundle.js",
                200,
                (("content-type", "application/javascript"),),
                BUNDLE,
                mime_type="application/javascript",
            ),
        ]
    )


async def _load(context: BrowserContext, url: str) -> float:
    page = await context.new_page()
    started = time.perf_counter()
    await page.goto(url)
    await page.wait_for_function("window.done === true")
    return time.perf_counter() - started


async def _measure(url: str, tls: bool) -> dict[str, float]:
    ways: dict[str, Prepare | None] = {
        "live": None,
        "replay": lambda context: ArchiveRouter(_archive(url), datetime.now(UTC), trusted_tls=tls).prepare(
            context
        ),
        "fulfilled": lambda context: ArchiveRouter(
            _archive(url), datetime.now(UTC), large_body=len(BUNDLE) + 1
        ).prepare(context),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright, find_chromium(None, playwright), (), False)
        for _ in range(ROUNDS):
            for way, prepare in ways.items():
                context = await browser.new_context(ignore_https_errors=tls)
                if prepare is not None:
                    await prepare(context)
                times[way].append(await _load(context, url))
                await context.close()
        await browser.close()
    return {way: statistics.median(values) for way, values in times.items()}


def delivery_section() -> Section:
    """``python -m bench --only delivery``: these figures alone, in the ``realweb`` section they
    belong to (they replace only themselves in ``results.json``)."""
    section = Section("realweb", partial=True)
    add_delivery(section)
    return section


def add_delivery(section: Section) -> None:
    for scheme in ("http", "https"):
        tls = server_context() if scheme == "https" else None
        with LocalSite(answering_handler(_answer), tls=tls) as site:
            medians = asyncio.run(_measure(site.url, tls is not None))
        note = (
            f"{len(BUNDLE) / 1e6:.1f} MB script over {scheme}, median of {ROUNDS}: live "
            f"{1e3 * medians['live']:.0f} ms, replay {1e3 * medians['replay']:.0f} ms, fulfilled "
            f"{1e3 * medians['fulfilled']:.0f} ms"
        )
        over = " over TLS" if tls else ""
        section.add(
            f"large body{over}: replay / live server",
            round(medians["replay"] / medians["live"], 2),
            "",
            Target(1.2),
            note,
        )
        section.add(
            f"large body{over}: fulfilled by Playwright / live server",
            round(medians["fulfilled"] / medians["live"], 2),
            "",
            None,
            "what a replay took before the body server (no target: the figure it replaced)",
        )
