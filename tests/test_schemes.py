"""Agents stay on the web: a ``goto`` off http/https/about:blank is an action error (a
``javascript:`` URL never runs), a page cannot take a tab to a local file, and nothing of a
refused navigation reaches the store or the model — unless the user allows the scheme.

Real Chromium, a real local site, the openai agent talking to the local fake endpoint."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from playwright.sync_api import Error as PlaywrightError

from mmina.actions.grammar import SUMMARY_MARKER
from mmina.actions.navigation import NEVER_ALLOWED, refusal, scheme_of
from mmina.agents.settings import AgentSettings
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.budget import Limits
from tests.fake_openai import FakeOpenAI

LOCAL_SECRET = "root:x:0:0"
"""What /etc/passwd starts with: it must never reach a step or a model request."""
PAGE = """<!doctype html><title>Start</title><main>
<a href="file:///etc/passwd">passwd link</a> <a href="chrome://version">version link</a>
<button onclick="window.open('file:///etc/passwd')">open window</button>
<button onclick="location.href='file:///etc/passwd'">assign location</button>
<a href="/redirect">redirect link</a></main>"""


HALVES = """<!doctype html><title>x</title><button>b</button><script>
document.title = 'half \\ud83d'; document.querySelector('button').textContent = 'a\\udcffb';</script>"""
"""A page whose title and text hold lone surrogates (JavaScript strings may; no UTF-8 can)."""


class SiteHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.path == "/halves":
            self._send(HALVES)
            return
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
            return
        self._send(PAGE)

    def _send(self, page: str) -> None:
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SiteHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test-key")


def _script(actions: list[str]) -> Callable[[str], str]:
    """A model policy playing ``actions`` in order; ``{name}`` is the id of the element so named."""
    position = iter(range(len(actions)))

    def policy(observation: str) -> str:
        action = actions[min(next(position, len(actions) - 1), len(actions) - 1)]
        return re.sub(r"\{(.+?)\}", lambda m: _element(m.group(1), observation), action)

    return policy


def _element(name: str, observation: str) -> str:
    found = re.search(rf'\[(\d+)\] \w+ "{re.escape(name)}"', observation)
    return found.group(1) if found else "0"


def _record(
    tmp_path: Path, site: str, actions: list[str], allowed: tuple[str, ...] = (), start: str = "/"
) -> tuple[list, FakeOpenAI]:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "1.json").write_text(
        json.dumps(
            {"intent": "Look around.", "start_url": f"{site}{start}", "cnt_hop": 1, "procedure": ["end"]}
        )
    )
    with FakeOpenAI(policy=_script(actions)) as server:
        settings = AgentSettings(model="fake", base_url=server.url, max_retries=0)
        record_run(
            Store.open(tmp_path / "store", create=True),
            RecordConfig(
                tasks=str(folder),
                agent="openai",
                agent_settings=settings,
                limits=Limits(max_steps=len(actions) + 1),
                browser=BrowserConfig(screenshots=False, allowed_schemes=allowed),
            ),
        )
    steps = run_query(
        Store.open(tmp_path / "store"),
        "select step_index, url, title, tree_text, action, action_error from steps order by step_index",
    ).rows
    return steps, server


REFUSED = [
    "file:///etc/passwd",
    "chrome://version",
    "javascript:document.title='pwned'",
    "data:text/html,<title>DATA</title>",
    "about:version",
    "view-source:http://127.0.0.1/",
    "blob:http://127.0.0.1/0f0e",
    " JaVa\tScRiPt:document.title='pwned'",
    "filesystem:http://127.0.0.1/x",
    "chrome-error://chromewebdata/",
    "//127.0.0.1/",
]


def test_agents_stay_on_the_web_and_pages_cannot_open_local_files(tmp_path: Path, site: str) -> None:
    actions = [
        *(f"goto [{url}]" for url in REFUSED),
        "click [{passwd link}]",
        "click [{version link}]",
        "click [{open window}]",
        "click [{assign location}]",
        "click [{redirect link}]",
        "goto [about:blank]",
        f"goto [{site}/]",
        "stop [done]",
    ]
    steps, server = _record(tmp_path, site, [f"{SUMMARY_MARKER} ```{a}```" for a in actions])
    assert len(steps) == len(actions)
    for (_index, _url, _title, _tree, action, error), _refused in zip(steps, REFUSED):
        assert error is not None and "is refused" in error or "not an absolute URL" in error, (action, error)
    assert "allow more with --allow-scheme file" in steps[0][5]
    for javascript in (steps[2][5], steps[7][5]):  # no setting allows one: none is offered (issue 52)
        assert "runs a script in the page" in javascript and "--allow-scheme" not in javascript, javascript
    assert all(
        not (step[1] or "").startswith(("file:", "chrome:", "data:", "view-source:")) for step in steps
    )
    assert all("pwned" not in (step[2] or "") for step in steps), "a refused javascript: URL never runs"
    seen = json.dumps([(step[2], step[3]) for step in steps])  # what the agent saw: titles and trees
    assert LOCAL_SECRET not in seen and "About Version" not in seen and "DATA" not in seen
    assert LOCAL_SECRET not in json.dumps(server.requests) and "About Version" not in json.dumps(
        server.requests
    )
    clicks = steps[len(REFUSED) : len(REFUSED) + 5]
    assert all(
        step[1] == f"{site}/" and step[4].startswith("click [") and step[4] != "click [0]" for step in clicks
    )
    assert steps[-2][5] is None and steps[-1][1] == f"{site}/", "the web still works"


def test_a_scheme_the_user_allows_is_allowed(tmp_path: Path, site: str) -> None:
    page = tmp_path / "local.html"
    page.write_text("<!doctype html><title>Local</title><p>allowed local page</p>")
    steps, server = _record(
        tmp_path,
        site,
        [f"{SUMMARY_MARKER} ```goto [{page.as_uri()}]```", f"{SUMMARY_MARKER} ```stop [done]```"],
        allowed=("file",),
    )
    assert steps[0][5] is None and steps[1][1] == page.as_uri() and "allowed local page" in steps[1][3]


def test_a_page_with_half_characters_is_recorded_with_them_escaped(tmp_path: Path, site: str) -> None:
    steps, server = _record(tmp_path, site, [f"{SUMMARY_MARKER} ```stop [done]```"], start="/halves")
    [(_index, url, title, tree, action, error)] = steps
    assert title == "half \\ud83d" and "a\\udcffb" in tree and action == "stop [done]"
    assert "half" in json.dumps(server.requests), "the model was asked"


def test_a_tab_that_lands_off_the_web_is_brought_back_before_it_is_observed() -> None:
    """The guard on every tab, not only on ``goto``: a navigation the browser is asked for in any
    other way (here straight through Playwright) ends on about:blank, and its page is never observed."""
    session = BrowserSession(BrowserConfig(screenshots=False))
    try:
        browser = session.episode(None)
        browser.open(("about:blank",))
        for url in ("chrome://version", "file:///etc/passwd", "data:text/html,<title>DATA</title>"):
            landed = "about:blank"
            try:
                session.run(browser.tabs.page.goto(url, wait_until="commit"))
            except PlaywrightError:  # the headless shell has no chrome:// pages: a failed navigation
                landed = "chrome-error://chromewebdata/"
            browser.settle()
            observation, _ = browser.observe(0, "look")
            assert observation.url == landed, url
            assert "About Version" not in observation.tree_text and LOCAL_SECRET not in observation.tree_text
        browser.close()
    finally:
        session.close()


@given(
    prefix=st.sampled_from(["", " ", "\t", "\x00", "\n "]),
    scheme=st.sampled_from(
        [
            "file",
            "FILE",
            "fi\tle",
            "javascript",
            "JavaScript",
            "java\nscript",
            "chrome",
            "data",
            "view-source",
            "blob",
            "about",
        ]
    ),
    rest=st.text(max_size=20),
)
def test_off_web_urls_are_refused_however_they_are_spelled(prefix: str, scheme: str, rest: str) -> None:
    url = f"{prefix}{scheme}:{rest}"
    if scheme_of(url) == "about" and refusal(url) is None:
        assert rest.lower().startswith("blank")
        return
    allowed = refusal(url, (scheme_of(url),))
    assert refusal(url) is not None and (allowed is None) == (scheme_of(url) not in NEVER_ALLOWED)


@given(url=st.text(max_size=60))
def test_anything_is_allowed_or_refused_in_one_line(url: str) -> None:
    reason = refusal(url)
    assert reason is None or "\n" not in reason.replace(repr(url)[1:-1], "")
    if reason is None:
        assert (
            scheme_of(url) in ("http", "https")
            or url.strip().lower().startswith("about:blank")
            or scheme_of(url) == "about"
        )
