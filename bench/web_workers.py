"""What holding a Web Worker at its start costs (``mmina.recorder.web_workers``): a page starts
``STARTS`` dedicated workers one after another, and one SharedWorker, each answering at once; the
time from ``new Worker`` to its first message, in a context with worker scripts (seeding scheme 3,
as every recording since) and without (scheme 2), best of ``ROUNDS`` rounds, in one mmina browser
session. Also how long mmina held each worker (from DevTools' attach to letting it go). A
SharedWorker is held by its script's response in both (``mmina.recorder.shared_workers`` follows
every context's SharedWorkers, scripts or not)."""

from __future__ import annotations

import statistics

from bench.results import Section
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.seeding import PER_CALL_SITE, WORKERS_TOO, Seeding
from mmina.recorder.web_workers import worker_scripts
from tests.local_site import LocalSite, pages_handler

ROUNDS = 3
STARTS = 20
PAGE = """<!doctype html><title>starts</title><script>
window.starts = (async () => {
  const times = [];
  for (let i = 0; i < %(starts)d; i++) {
    const began = performance.now();
    const worker = new Worker('/worker.js?' + i);
    await new Promise(resolve => { worker.onmessage = resolve; });
    times.push(performance.now() - began);
    worker.terminate();
  }
  const began = performance.now();
  const shared = new SharedWorker('/shared.js');
  const seeded = await new Promise(resolve => {
    shared.port.onmessage = ({data}) => resolve(data);
    shared.port.start();
  });
  return {dedicated: times, shared: performance.now() - began, seeded};
})();
</script>""" % {"starts": STARTS}
WORKER = "postMessage(Math.random());"
SHARED = """const seeded = Math.random.toString().includes('draw');
onconnect = (event) => event.ports[0].postMessage(seeded);"""


def add_worker_starts(section: Section) -> None:
    """The median start of a dedicated worker and a SharedWorker's, with and without worker scripts."""
    best: dict[int, dict[str, float]] = {}
    held: list[float] = []
    first_turns: list[bool] = []
    pages = {"/": PAGE, "/worker.js": WORKER, "/shared.js": SHARED}
    kinds = lambda path: "text/javascript" if path.endswith(".js") else "text/html"  # noqa: E731
    session = BrowserSession(BrowserConfig(screenshots=False, set_of_marks=False))
    try:
        with LocalSite(pages_handler(pages, kinds)) as site:
            for _round in range(ROUNDS):
                for scheme in (PER_CALL_SITE, WORKERS_TOO):
                    measured, hold_s = _starts(session, site.url, scheme)
                    held += hold_s
                    if scheme == WORKERS_TOO:
                        first_turns.append(bool(measured.pop("seeded")))
                    measured.pop("seeded", None)
                    best[scheme] = {k: min(v, best.get(scheme, measured)[k]) for k, v in measured.items()}
    finally:
        session.close()
    plain, scripted = best[PER_CALL_SITE], best[WORKERS_TOO]
    section.add(
        "a dedicated worker's start, held and seeded",
        round(scripted["dedicated"], 1),
        "ms",
        None,
        f"{plain['dedicated']:.1f} ms not held (median of {STARTS} starts, best of {ROUNDS} rounds); "
        f"held {1e3 * statistics.median(held):.1f} ms (median of {len(held)})",
    )
    section.add(
        "a SharedWorker's start, held and seeded",
        round(scripted["shared"], 1),
        "ms",
        None,
        f"{plain['shared']:.1f} ms held, unseeded (every context holds a SharedWorker by its script's "
        f"response: mmina.recorder.shared_workers); its first turn seeded in {sum(first_turns)} of "
        f"{len(first_turns)} starts",
    )


def _starts(session: BrowserSession, url: str, scheme: int) -> tuple[dict[str, float], list[float]]:
    browser = session.episode(None, seed=Seeding(1, scheme))
    try:
        browser.open((url,))
        times = session.run(browser.context.pages[0].evaluate("window.starts"))
        measured = {"dedicated": statistics.median(times["dedicated"]), "shared": times["shared"]}
        return {**measured, "seeded": float(times["seeded"])}, list(worker_scripts(browser.context).hold_s)
    finally:
        browser.close()
