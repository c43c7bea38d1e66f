"""Large archived bodies reach the page through the loopback body server (issue 56, item 2):
a multi-MB script and a large cross-origin JSON reply, recorded live from a real server (over
HTTP, and over TLS), replayed to 100 % with each body served once by
``mmina.replayer.body_server`` (not through Playwright's protocol; an ``https:`` body by its TLS
side), and the replay's ``requests`` naming the URLs the page asked for.
``python -m bench --only realweb`` compares served with recorded time for the largest bodies."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RunSummary
from mmina.replayer import body_server
from mmina.replayer.archive import Reply
from mmina.replayer.body_server import LARGE_BODY, BodyServer, response_head
from mmina.replayer.loopback_tls import server_context
from mmina.replayer.replays import replay_run
from mmina.store import Store
from tests.local_site import LocalSite, answering_handler, record_scripted, tree_lines
from tests.realweb.check import handed_ms
from tests.serve_helpers import Served

BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
WORDS = " ".join(f"tide{n % 977}" for n in range(400_000))
BUNDLE = f"window.WORDS = {json.dumps(WORDS)};".encode()
ROWS = json.dumps(
    [{"station": f"S{n:05d}", "high": f"{n % 24:02d}:{n % 60:02d}"} for n in range(30_000)]
).encode()
PAGE = """<!doctype html><title>Tide atlas</title><h1>Tide atlas</h1><script src="/bundle.js"></script>
<p id="bundle">Bundle missing</p><button id="load">Load stations</button><p id="rows">No stations</p><script>
document.getElementById('bundle').textContent = 'Bundle of ' + window.WORDS.length + \
' characters, ending ' + window.WORDS.slice(-8);
document.getElementById('load').addEventListener('click', () => {
  fetch(API + '/stations').then(r => r.json().then(rows => [r.headers.get('x-tide'), rows])).then(([tide, rows]) => {
    document.getElementById('rows').textContent = rows.length + ' stations (' + tide + \
'), last ' + rows[rows.length - 1].station;
  });
});
</script>"""
SCRIPT = [
    {"action": "click", "target": {"role": "button", "name": "Load stations"}},
    {"action": "stop", "answer": "done"},
]


def _api(path: str) -> tuple[int, str, bytes] | None:
    return (200, "application/json", ROWS) if urlsplit(path).path == "/stations" else None


def _site(api_url: str):
    def answer(path: str) -> tuple[int, str, bytes]:
        if urlsplit(path).path == "/bundle.js":
            return 200, "application/javascript", BUNDLE
        return 200, "text/html; charset=utf-8", PAGE.replace("API + '", f"'{api_url}").encode()

    return answer


def _cors(handler: type) -> type:
    class Cors(handler):  # type: ignore[misc, valid-type]
        def end_headers(self) -> None:
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Expose-Headers", "x-tide")
            self.send_header("x-tide", "spring")
            super().end_headers()

    return Cors


@pytest.fixture(scope="module", params=["http", "https"])
def recorded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, RunSummary]]:
    """The atlas recorded live: over HTTP, or over TLS (the recording's browser told to take the
    site's certificate; the replay's needs no such flag)."""
    tls = server_context() if request.param == "https" else None
    browser = replace(BROWSER, extra_args=("--ignore-certificate-errors",)) if tls else BROWSER
    with (
        LocalSite(_cors(answering_handler(_api)), tls=tls) as api,
        LocalSite(answering_handler(_site(api.url.rstrip("/"))), tls=tls) as site,
    ):
        yield record_scripted(
            tmp_path_factory.mktemp("large"), site.url, "atlas", "Load the stations.", SCRIPT, browser
        )


def _lines(store: Store, run_id: str) -> list[str]:
    return tree_lines(store, run_id, "Bundle", "stations")


def test_large_bodies_are_served_by_the_body_server_and_replay_to_100(recorded, monkeypatch) -> None:
    store, summary = recorded
    assert any("Bundle of" in line and "tide" in line for line in _lines(store, summary.run_id))
    assert any("30000 stations (spring), last S29999" in line for line in _lines(store, summary.run_id))
    offered: list[int] = []
    offer = BodyServer.offer

    async def counted(self: BodyServer, url: str, reply: Reply) -> tuple[str, str]:
        offered.append(len(reply.body))
        return await offer(self, url, reply)

    monkeypatch.setattr(BodyServer, "offer", counted)
    report = replay_run(store, summary.run_id, browser=BROWSER)
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert _lines(store, report.replay_run) == _lines(store, summary.run_id)
    assert sorted(offered) == sorted([len(ROWS), len(BUNDLE)])
    urls = [r["url"] for r in store.read("requests", run_id=report.replay_run).to_pylist()]
    assert any(u.endswith("/bundle.js") for u in urls) and any(u.endswith("/stations") for u in urls)
    assert not [u for u in urls if body_server.PATH_PREFIX in u]
    replayed = {
        r["url"].rsplit("/", 1)[1]: r for r in store.read("requests", run_id=report.replay_run).to_pylist()
    }
    assert replayed["bundle.js"]["response_body_size"] == len(BUNDLE)
    assert replayed["stations"]["response_body_size"] == len(ROWS)
    # the router says when it began handing each answer over: within the request's time
    for row in replayed.values():
        handed = handed_ms(row)
        assert handed is not None and 0 <= handed <= row["time_ms"] + 1, (row["url"], handed, row["time_ms"])
    # item 6: every replayed request says how it was matched and by which recorded request
    source = {
        r["url"].rsplit("/", 1)[1]: r for r in store.read("requests", run_id=summary.run_id).to_pylist()
    }
    for name in ("bundle.js", "stations", ""):
        assert replayed[name]["replay_match"] == "exact"
        assert (replayed[name]["replay_source_episode"], replayed[name]["replay_source_seq"]) == (
            source[name]["episode_id"],
            source[name]["seq"],
        )
    assert all(
        r["replay_match"] is None for r in source.values()
    )  # a recording answered nothing from an archive
    with Served(store.root) as app:
        shown = app.json(f"/api/episodes/{episode.replay_episode}")
    answered = {r["url"].rsplit("/", 1)[1]: r for step in shown["steps"] for r in step["requests"]}
    assert (
        answered["stations"]["replay_match"] == "exact"
        and answered["stations"]["replay_source_seq"] == source["stations"]["seq"]
    )


def test_small_bodies_and_other_schemes_are_fulfilled() -> None:
    big = Reply(200, {}, b"x" * LARGE_BODY)
    assert BodyServer.takes("http://a.test/app.js", big) and BodyServer.takes("https://a.test/app.js", big)
    assert not BodyServer.takes(
        "https://a.test/app.js", big, tls=False
    )  # a context that would refuse its certificate
    assert not BodyServer.takes("data:text/plain,x", big) and not BodyServer.takes(
        "blob:https://a.test/1", big
    )
    assert not BodyServer.takes("http://a.test/app.js", Reply(200, {}, b"x" * (LARGE_BODY - 1)))


def test_the_head_keeps_recorded_headers_and_frames_the_body_itself() -> None:
    reply = Reply(
        201,
        {"content-type": "text/csv", "set-cookie": "a=1\nb=2", "content-length": "9", "x-trace": "tide"},
        b"a,b\n1,2\n",
    )
    head = response_head(reply).decode()
    assert head.startswith("HTTP/1.1 201 Created\r\n") and head.endswith("\r\n\r\n")
    lines = head.split("\r\n")
    assert {
        "content-type: text/csv",
        "set-cookie: a=1",
        "set-cookie: b=2",
        "x-trace: tide",
        "content-length: 8",
        "connection: close",
    } <= set(lines)
    assert "content-length: 9" not in lines


def test_an_offer_is_served_once_and_a_stranger_gets_nothing() -> None:
    async def scenario() -> tuple[bytes, bytes, bytes, bool]:
        server = BodyServer()
        body = hashlib.sha256(b"tide").hexdigest().encode() * 20_000
        url, key = await server.offer(
            "http://a.test/tide.txt", Reply(200, {"content-type": "text/plain"}, body)
        )
        port = int(urlsplit(url).port or 0)

        async def get(path: str) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            await writer.drain()
            answer = await reader.read()
            writer.close()
            return answer

        first = await get(urlsplit(url).path)
        sent = await server.sent(key, 5.0)
        again, stranger = await get(urlsplit(url).path), await get("/mmina-body/guess")
        await server.close()
        return first, again, stranger, sent

    first, again, stranger, sent = asyncio.run(scenario())
    assert (
        sent
        and first.startswith(b"HTTP/1.1 200 OK")
        and first.endswith(hashlib.sha256(b"tide").hexdigest().encode())
    )
    assert first.split(b"\r\n\r\n", 1)[1] == hashlib.sha256(b"tide").hexdigest().encode() * 20_000
    assert again.startswith(b"HTTP/1.1 404") and stranger.startswith(b"HTTP/1.1 404")


def test_a_request_body_is_read_before_the_answer() -> None:
    async def scenario() -> bytes:
        server = BodyServer()
        url, key = await server.offer(
            "http://a.test/r.txt", Reply(200, {"content-type": "text/plain"}, b"r" * LARGE_BODY)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", int(urlsplit(url).port or 0))
        upload = b"u" * 3_000_000
        writer.write(
            f"POST {urlsplit(url).path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(upload)}\r\n\r\n".encode()
        )
        writer.write(upload)
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert await server.sent(key, 5.0)
        await server.close()
        return answer

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"r" * 100)


@given(
    head=st.binary(max_size=300),
    headers=st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=6),
    status=st.integers(100, 999),
)
@settings(max_examples=300, deadline=None)
def test_any_request_head_and_any_recorded_headers_are_handled(
    head: bytes, headers: dict[str, str], status: int
) -> None:
    assert isinstance(body_server._key(head), str) and body_server._request_body_size(head) >= 0
    written = response_head(Reply(status, headers, b"body")).decode()
    lines = written.split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} ") and written.endswith("\r\n\r\n")
    assert "content-length: 4" in lines and "connection: close" in lines
    assert not any(
        "\r" in line or "\n" in line for line in lines
    )  # no value can add a header line of its own
    assert [line for line in lines[1:-2] if line.lower().startswith("content-length")] == [
        "content-length: 4"
    ]
