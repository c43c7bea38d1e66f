"""What seeding costs a page's draws (``mmina.recorder.seeding``), in real Chromium: a loop of a
million ``Math.random()`` calls in one turn, one draw in each of 20,000 turns (scheme 2 reads
the calling stack at a turn's draws, up to its budget), and 10,000 ``crypto.randomUUID()`` calls;
unseeded, scheme 1 (one stream per document) and scheme 2 (a stream per calling place). Each
figure is the best of ``ROUNDS`` rounds (the machine is shared). Then what seeding Web Workers
(scheme 3) costs each worker's start (``bench.web_workers``)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Request, Route, sync_playwright

from bench.results import Section, Target
from bench.web_workers import add_worker_starts
from mmina.recorder.chromium import find_chromium
from mmina.recorder.seeding import PER_CALL_SITE, PER_EPISODE, Seeding

ROUNDS = 3
DRAWS = """async () => {
  const out = {};
  let t = performance.now(), x = 0;
  for (let i = 0; i < 1e6; i++) x += Math.random();
  out.loop_ns = (performance.now() - t) * 1e6 / 1e6;
  await new Promise(resolve => setTimeout(resolve, 0));
  t = performance.now();
  for (let i = 0; i < 2e4; i++) { await null; x += Math.random(); }
  out.turn_us = (performance.now() - t) * 1e3 / 2e4;
  t = performance.now();
  for (let i = 0; i < 1e4; i++) crypto.randomUUID();
  out.uuid_us = (performance.now() - t) * 1e3 / 1e4;
  return out;
}"""
SCHEMES: dict[str, int | None] = {"unseeded": None, "scheme 1": PER_EPISODE, "scheme 2": PER_CALL_SITE}


def seeding_section() -> Section:
    """Per draw, each scheme against the unseeded browser."""
    costs = _costs()
    section = Section("seeding")
    base, old, new = costs["unseeded"], costs["scheme 1"], costs["scheme 2"]
    section.add(
        "Math.random in a loop, scheme 2",
        round(new["loop_ns"], 1),
        "ns/draw",
        None,
        f"unseeded {base['loop_ns']:.1f}, scheme 1 {old['loop_ns']:.1f} ns (the stack read at most "
        f"256 times a turn)",
    )
    section.add(
        "a draw alone in its turn, scheme 2",
        round(new["turn_us"], 2),
        "µs",
        None,
        f"scheme 1 {old['turn_us']:.2f}, unseeded {base['turn_us']:.2f} µs: the calling stack read "
        f"({new['turn_us'] / old['turn_us']:.0f}×)",
    )
    section.add(
        "crypto.randomUUID, scheme 2",
        round(new["uuid_us"], 2),
        "µs",
        Target(50.0),
        f"unseeded {base['uuid_us']:.2f}, scheme 1 {old['uuid_us']:.2f} µs",
    )
    add_worker_starts(section)
    return section


def _costs() -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(None, playwright))
        for _round in range(ROUNDS):
            for name, scheme in SCHEMES.items():
                measured = _measure(browser, scheme)
                best[name] = {k: min(v, best.get(name, measured)[k]) for k, v in measured.items()}
        browser.close()
    return best


def _measure(browser: Any, scheme: int | None) -> dict[str, float]:
    context = browser.new_context()
    if scheme is not None:
        context.add_init_script(Seeding.of("bench", scheme).script())
    context.route("http://localhost/", _page)  # localhost is a secure context: crypto.randomUUID exists
    page = context.new_page()
    page.goto("http://localhost/")
    measured: dict[str, float] = page.evaluate(DRAWS)
    context.close()
    return measured


def _page(route: Route, _request: Request) -> None:
    route.fulfill(body="<title>draws</title>", content_type="text/html")
