"""A replay's stored requests say when its router began handing each answer over (issue 56,
item 2): ``x-mmina-handed``, in ms after the request started, so that the time the answer was held
on purpose (for the recorded pace) and the time the hand-over itself took (``time_ms`` less it)
are told apart. ``python -m bench --only realweb`` compares the latter with the recorded exchange
for large bodies (``bench.realweb.add_handover``; its arithmetic: ``tests/test_bench.py``).

Real Chromium, a real paced ``ArchiveRouter`` and its body server, the context's real HAR turned
into rows by the recorder's ``capture``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from mmina.recorder.chromium import find_chromium, launch_chromium
from mmina.recorder.har import HANDED_HEADER, capture
from mmina.redaction.redact import Redactor
from mmina.replayer.archive import Archive, Exchange
from mmina.replayer.body_server import LARGE_BODY
from mmina.replayer.router import ArchiveRouter
from mmina.store.blobs import sha256
from tests.realweb.check import handed_ms

SITE = "http://tides.test/"
HOLD_MS = 1500.0
"""How long each fetch took when recorded: a paced replay holds its answer that long."""
LARGE = json.dumps([f"station {n:06d}" for n in range(LARGE_BODY // 10)]).encode()
SMALL = b'["one station"]'
PAGE = b"""<!doctype html><title>Tides</title><p id=out>waiting</p><script>
Promise.all(['large.json', 'small.json'].map(name => fetch(name).then(r => r.json())))
  .then(([large, small]) => { document.getElementById('out').textContent = large.length + ' and ' + small.length; });
</script>"""


def _archive(started_ms: float) -> Archive:
    json_headers = (("content-type", "application/json"),)
    return Archive(
        [
            Exchange(0, "GET", SITE, 200, (("content-type", "text/html"),), PAGE, mime_type="text/html"),
            *(
                Exchange(
                    order,
                    "GET",
                    SITE + name,
                    200,
                    json_headers,
                    body,
                    request_type="fetch",
                    mime_type="application/json",
                    started_ms=started_ms,
                    time_ms=HOLD_MS,
                )
                for order, (name, body) in enumerate((("large.json", LARGE), ("small.json", SMALL)), 1)
            ),
        ]
    )


async def _replayed(har: Path) -> tuple[ArchiveRouter, str]:
    started = datetime.now(UTC)
    router = ArchiveRouter(_archive(started.timestamp() * 1e3), started, paced=True)
    async with async_playwright() as playwright:
        browser = await launch_chromium(playwright, find_chromium(None, playwright), (), False)
        context = await browser.new_context(record_har_path=str(har), record_har_content="attach")
        await router.prepare(context)
        page = await context.new_page()
        await page.goto(SITE)
        await page.wait_for_function(
            "document.getElementById('out').textContent !== 'waiting'", timeout=30_000
        )
        shown = await page.inner_text("#out")
        await context.close()
        await browser.close()
    return router, shown


def _rows(tmp_path: Path) -> tuple[dict[str, dict[str, Any]], str, list[str]]:
    har = tmp_path / "replay.har.zip"
    router, shown = asyncio.run(_replayed(har))
    rows = capture(har, [], lambda body, _mime: sha256(body), Redactor(), routed=router.traffic())
    offered = [url for url in router.aliases.values()]
    return {r["url"].rsplit("/", 1)[1]: r for r in rows}, shown, offered


def test_a_replayed_row_says_when_its_answer_was_handed_over_after_the_hold(tmp_path: Path) -> None:
    rows, shown, offered = _rows(tmp_path)
    assert shown == f"{len(json.loads(LARGE))} and 1"
    assert offered == [SITE + "large.json"]  # the large one through the body server, the small one fulfilled
    for name in ("large.json", "small.json"):
        row = rows[name]
        handed = handed_ms(row)
        assert handed is not None, row["response_headers"]
        assert handed >= HOLD_MS - 100, (name, handed)  # held for the recorded pace: before the hand-over
        handover = row["time_ms"] - handed
        assert -5 <= handover < HOLD_MS / 2, (name, handed, row["time_ms"])  # the hand-over alone
        assert [h["name"] for h in row["response_headers"]].count(HANDED_HEADER) == 1
    assert handed_ms(rows[""]) is not None and handed_ms(rows[""]) < HOLD_MS  # a document is not held
