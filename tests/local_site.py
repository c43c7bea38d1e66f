"""A hand-written test site on a local port: a threaded ``http.server`` serving while in ``with``."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

HTML = "text/html; charset=utf-8"

Site = TypeVar("Site", bound="LocalSite")


class LocalSite:
    """``handler`` on ``127.0.0.1:port`` (0: a free port), answering from a daemon thread; over
    TLS with ``tls`` (a server context: the site is then ``https:``)."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._server.server_address[1]}/"

    def __enter__(self: Site) -> Site:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


Answer = Callable[[str], "tuple[int, str, bytes] | None"]
"""A request's path (query included) → (status, content type, body); None: no answer at all (the
request is left to hang, as a long-poll nobody answers)."""


def answering_handler(answer: Answer) -> type[BaseHTTPRequestHandler]:
    """A handler answering every GET with ``answer(path)``, with its length over HTTP/1.1."""

    class Answering(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            answered = answer(self.path)
            if answered is None:
                return
            status, kind, body = answered
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Answering


def pages_handler(
    pages: Mapping[str, str], kind: Callable[[str], str] = lambda path: HTML
) -> type[BaseHTTPRequestHandler]:
    """A handler serving ``pages`` (path, without its query, to body) with their length over
    HTTP/1.1, as ``kind(path)``; another path is a 404."""

    def answer(path: str) -> tuple[int, str, bytes]:
        route = path.split("?")[0]
        return (200 if route in pages else 404), kind(route), pages.get(route, "no such page").encode()

    return answering_handler(answer)


def scripted_suite(
    folder: Path,
    name: str,
    url: str,
    intent: str,
    script: Sequence[Mapping[str, Any]],
    answer: str = "done",
    repeats: int = 1,
) -> Path:
    """A suite of ``repeats`` one-hop tasks (``name/1.json`` ...) starting at ``url``, each played by
    the oracle from ``script``, judged by ``answer``; returns the suite's folder."""
    suite = folder / name
    suite.mkdir(parents=True, exist_ok=True)
    for number in range(1, repeats + 1):
        (suite / f"{number}.json").write_text(
            json.dumps(
                {
                    "task_id": number,
                    "intent": intent,
                    "start_url": url,
                    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": [answer]}},
                    "procedure": [name, "end"],
                    "reference_script": list(script),
                }
            )
        )
    return suite


def record_scripted(
    folder: Path,
    url: str,
    name: str,
    intent: str,
    script: Sequence[Mapping[str, Any]],
    browser: Any,
    agent: str = "oracle",
) -> tuple[Any, Any]:
    """A store in ``folder`` with one run: the oracle (or ``agent``, e.g. one that thinks as the
    script says) playing ``script`` on a one-hop task at ``url`` (see :func:`scripted_suite`) with
    ``browser`` (a ``BrowserConfig``); the store and the run's summary."""
    from mmina.recorder.recording import RecordConfig, record_run
    from mmina.store import Store

    store = Store.open(folder / "store", create=True)
    suite = scripted_suite(folder / "tasks", name, url, intent, script)
    return store, record_run(store, RecordConfig(tasks=str(suite), agent=agent, browser=browser))


def record_thinking(
    folder: Path, answer: Answer, name: str, intent: str, script: Sequence[Mapping[str, Any]], browser: Any
) -> tuple[Any, str]:
    """:func:`record_scripted` on a site answering with ``answer``, by an agent that thinks before
    each action for its step's ``think`` seconds (``tests.realweb.agents.ThinkingOracle``): the
    store and the run, whose one episode completed."""
    with LocalSite(answering_handler(answer)) as site:
        store, summary = record_scripted(
            folder, site.url, name, intent, script, browser, agent="tests.realweb.agents:ThinkingOracle"
        )
    assert summary.episodes[0].status == "completed", summary.episodes[0]
    return store, summary.run_id


def tree_lines(store: Any, run_id: str, *words: str) -> list[str]:
    """The lines of a run's accessibility trees, step by step, that hold any of ``words``."""
    rows = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])
    return [
        line.strip() for r in rows for line in r["tree_text"].splitlines() if any(w in line for w in words)
    ]


def serve_late(monkeypatch: Any, suffix: str, seconds: float) -> None:
    """Make a replay hand the page every response whose URL ends with ``suffix`` ``seconds`` later
    than it would, the page's time standing still meanwhile (as a loaded machine serves a large
    body late, its cap held until delivered), for the rest of the test."""
    import asyncio

    from mmina.replayer.router import ArchiveRouter

    deliver = ArchiveRouter._deliver

    async def late(self: ArchiveRouter, route: Any, reply: Any) -> None:
        if route.request.url.endswith(suffix):
            late_cap = ("late", route.request.url)
            if self.timeline is not None:
                self.timeline.hold(late_cap)
            try:
                await asyncio.sleep(seconds)
            finally:
                if self.timeline is not None:
                    self.timeline.lift(late_cap)
        await deliver(self, route, reply)

    monkeypatch.setattr(ArchiveRouter, "_deliver", late)


def hand_chunks_late(monkeypatch: Any, seconds: float) -> None:
    """Make a paced replay hand the page each chunk of a stream recorded in chunks ``seconds``
    later than it would (as a loaded machine answers each chunk's ``__mminaChunk`` call late: the
    page asks for the next one only once it has this one), the page's time running meanwhile, for
    the rest of the test."""
    import asyncio

    from mmina.replayer.router import ArchiveRouter

    hand = ArchiveRouter._chunk

    async def late(self: ArchiveRouter, source: object, stream: str, index: int) -> None:
        if index >= 0:
            await asyncio.sleep(seconds)
        await hand(self, source, stream, index)

    monkeypatch.setattr(ArchiveRouter, "_chunk", late)
