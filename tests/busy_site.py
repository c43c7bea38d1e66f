"""Pages whose main thread is busy after ``load`` (issue 56): one that builds its interface in long
tasks for about a second, scheduled over a ``MessageChannel`` as React's scheduler does (no timer,
no request: nothing but the main thread says it is still working), one whose long tasks and
animation never end, one that fetches for about 4 s after ``load`` and builds its interface after a
pause, one that fetches as long and then builds it in long tasks (a notebook's cold open: its
network busy past settling's bound, its interface built with the CPU), one that holds a
long-poll open from ``load`` and is otherwise still, the same with a clock that ticks for good,
and a plain one.

``tests/test_long_tasks.py`` checks that settling waits for the first and stays within its bound
on the second; ``python -m bench --only quiet`` measures what the wait costs a step. Served by a
plain ``http.server`` on a free port.
"""

from __future__ import annotations

from tests.local_site import HTML, LocalSite, answering_handler

SPIN = "const spin = ms => { const end = performance.now() + ms; while (performance.now() < end); };"
FETCHES = 90
"""Requests one after another, 30 ms apart, for about 4 s after ``load`` (never 50 ms without one)."""
PAUSE_MS = 700
"""Then the page builds its interface after this pause (longer than a timer settling waits for)."""
BUILT = "Interface ready"
BUILD_TASKS = 14
"""Long tasks of 80 ms each that build the page (about 1.1 s of CPU)."""
BUILT_PARTS = 12
"""After its fetches, ``/compiling`` builds its interface in this many long tasks of 80 ms, one part
each, scheduled over a ``MessageChannel`` (no timer, no request: only the CPU is still at work)."""
POLL_PATH = "/poll"
"""A long-poll the site never answers (the request stays open until the page goes)."""
PAGES = {
    "/build": "<!doctype html><title>Notebook</title><h1 id=state>Building</h1><script>"
    + SPIN
    + "const channel = new MessageChannel(); let built = 0;"
    "channel.port1.onmessage = () => { spin(80);"
    f" if (++built < {BUILD_TASKS}) channel.port2.postMessage(0);"
    " else document.getElementById('state').textContent = 'Interface ready'; };"
    "addEventListener('load', () => channel.port2.postMessage(0));</script>",
    "/busy": "<!doctype html><title>Ticker</title><h1>Ticker</h1><div id=bar>Moving</div><script>"
    + SPIN
    + "setInterval(() => spin(70), 150);"
    "const frame = () => { document.getElementById('bar').style.marginLeft = (performance.now() % 300) + 'px';"
    " requestAnimationFrame(frame); }; frame();</script>",
    "/plain": "<!doctype html><title>Harbour</title><h1>Harbour</h1><p>Tides at noon.</p>",
    "/compiling": "<!doctype html><title>Notebook</title><h1 id=state>Fetching</h1><ol id=parts></ol><script>"
    + SPIN
    + "const channel = new MessageChannel(); let built = 0;"
    "channel.port1.onmessage = () => { spin(80); const part = document.createElement('li');"
    " part.textContent = 'Part ' + (++built); document.getElementById('parts').append(part);"
    f" if (built < {BUILT_PARTS}) channel.port2.postMessage(0);"
    f" else document.getElementById('state').textContent = '{BUILT}'; }};"
    f"let asked = 0; const next = () => ++asked < {FETCHES} ? fetch('/plain?part=' + asked)"
    ".then(() => setTimeout(next, 30)) : channel.port2.postMessage(0);"
    "addEventListener('load', next);</script>",
    "/polling": "<!doctype html><title>Docs</title><h1>Docs</h1><p>Reloads when the sources change.</p>"
    f"<script>addEventListener('load', () => fetch('{POLL_PATH}'));</script>",
    "/ticking": "<!doctype html><title>Clock</title><h1>Clock</h1><p id=now>0</p><script>"
    "setInterval(() => { document.getElementById('now').textContent = String(performance.now()); }, 100);"
    f"addEventListener('load', () => fetch('{POLL_PATH}'));</script>",
    "/fetching": "<!doctype html><title>Notebook</title><h1 id=state>Fetching</h1><script>"
    f"let asked = 0; const next = () => ++asked < {FETCHES} ? fetch('/plain?part=' + asked)"
    ".then(() => setTimeout(next, 30)) : setTimeout(() => {"
    f" document.getElementById('state').textContent = '{BUILT}'; }}, {PAUSE_MS});"
    "addEventListener('load', next);</script>",
}


class BusySite(LocalSite):
    """``with BusySite() as site: site.url + "build"``."""

    def __init__(self) -> None:
        super().__init__(answering_handler(_answer))


def _answer(path: str) -> tuple[int, str, bytes] | None:
    """A page, a 404, or for ``POLL_PATH`` no answer at all."""
    route = path.split("?")[0]
    if route == POLL_PATH:
        return None
    return (200 if route in PAGES else 404), HTML, PAGES.get(route, "no such page").encode()
