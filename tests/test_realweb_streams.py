"""Every response body captured, streams included (issue 23, item 2).

A page reads server-sent events over ``fetch`` as Gradio's queue does — event by event from
the body's reader — and aborts the stream when it reads the closing event, while the server
still holds the connection open. Chromium's HAR keeps no body for such a response; the body
tap (``streams.BodyTaps``) does, with the time each chunk arrived. The replay hands the body to
the page in its recorded chunks, so the page shows each step of the stream as it did; without
the tap the request is stored as missing its body and the replay counts it as a defect.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mmina.recorder import har
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.har import BODY_HEADER, CHUNKS_HEADER, read_har
from mmina.recorder.recording import RecordConfig, record_run
from mmina.recorder.streams import BodyTaps
from mmina.replayer.replays import replay_run
from mmina.replayer.turns import OVERDUE_S
from mmina.store import Store
from tests.local_site import LocalSite, hand_chunks_late, pages_handler

EVENTS = ["loading 1 of 3", "loading 2 of 3", "loading 3 of 3"]
PAGE = """<!doctype html><title>Queue</title><h1>Queue</h1><button id=go>Run job</button><p id=out>Idle</p>
<script>
document.getElementById('go').onclick = async () => {
  const out = document.getElementById('out');
  const controller = new AbortController();
  const response = await fetch('/queue/data?session=' + Math.random(), {signal: controller.signal});
  const reader = response.body.getReader(), decoder = new TextDecoder();
  let buffer = '', seen = [];
  while (true) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    const messages = buffer.split('\\n\\n');
    buffer = messages.pop();
    for (const message of messages) {
      const data = JSON.parse(message.replace(/^data: /, ''));
      if (data.msg === 'close') { controller.abort(); out.textContent = 'Done: ' + seen.join(', '); return; }
      seen.push(data.text);
      out.textContent = 'Progress: ' + data.text;
    }
  }
};
</script>"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if self.path.startswith("/queue/data"):
            self._stream()
            return
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self) -> None:
        """Events 150 ms apart, then the closing event, then the connection held open (the
        page aborts it), as an SSE-over-fetch queue does."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for data in [*({"msg": "progress", "text": t} for t in EVENTS), {"msg": "close"}]:
            self._chunk(f"data: {json.dumps(data)}\n\n".encode())
            time.sleep(0.15)
        time.sleep(5)

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


RUN_JOB = [
    {"action": "click", "target": {"role": "button", "name": "Run job"}},
    {"action": "stop", "answer": "Done"},
]


def _record(folder: Path, url: str, script: list[dict[str, Any]] = RUN_JOB) -> tuple[Store, str]:
    suite = folder / "tasks" / "queue"
    suite.mkdir(parents=True)
    (suite / "1.json").write_text(
        json.dumps(
            {
                "task_id": 1,
                "intent": "Run the job.",
                "start_url": url,
                "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["Done"]}},
                "procedure": ["queue", "end"][-len(script) :],
                "reference_script": script,
            }
        )
    )
    store = Store.open(folder / "store", create=True)
    summary = record_run(
        store,
        RecordConfig(
            tasks=str(suite), agent="oracle", browser=BrowserConfig(screenshots=False, set_of_marks=False)
        ),
    )
    return store, summary.run_id


def _stream_row(store: Store, run_id: str) -> dict[str, Any]:
    rows = [r for r in store.read("requests", run_id=run_id).to_pylist() if "/queue/data" in r["url"]]
    assert len(rows) == 1
    return rows[0]


def _headers(row: dict[str, Any]) -> dict[str, str]:
    return {h["name"]: h["value"] for h in row["response_headers"]}


def test_an_aborted_fetch_stream_keeps_its_body_and_chunks_and_replays_as_a_stream(
    tmp_path: Path, site: str
) -> None:
    store, run_id = _record(tmp_path, site)
    steps = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda r: r["step_index"])
    assert "Done: loading 1 of 3, loading 2 of 3, loading 3 of 3" in steps[1]["tree_text"]
    row = _stream_row(store, run_id)
    body = store.read_blobs([row["response_body"]])[row["response_body"]]
    assert b'"close"' in body and all(t.encode() in body for t in EVENTS)
    chunks = _headers(row)[CHUNKS_HEADER].split(",")
    assert len(chunks) >= 3  # the events arrived apart, and that is kept
    offsets = [float(c.split("@")[1]) for c in chunks]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] >= 200
    assert BODY_HEADER not in _headers(row)

    report = replay_run(store, run_id, browser=BrowserConfig(screenshots=False, set_of_marks=False))
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert episode.requests.missing_body == 0 and episode.requests.unmatched == 0


CHUNK_LATE_S = 1.0
"""How late the replay below hands each chunk over: the 0.45 s stream reaches the page over 4 s."""


def test_a_stream_slowed_by_a_loaded_replay_is_waited_for_while_the_page_s_time_stands(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk of the queue's stream reaches the page ``CHUNK_LATE_S`` late (a loaded machine
    answers the page's call for each chunk late; Gradio's queue, 275 ms when recorded, took 3.4 s
    under load 9-13). The observation after the click reaches its moment while the stream is
    still coming and waits there, the page's time standing, so the chunks grow no later on the
    page's time and it waits for all of them: the page shows "Done" as recorded. Before, it gave
    up on a chunk more than ``OVERDUE_S`` late on the machine's clock and read "Progress"."""
    store, run_id = _record(tmp_path, site)
    offsets = [float(c.split("@")[1]) for c in _headers(_stream_row(store, run_id))[CHUNKS_HEADER].split(",")]
    assert len(offsets) * CHUNK_LATE_S - offsets[-1] / 1e3 > OVERDUE_S + 1.0  # the last one 3 s late or more
    hand_chunks_late(monkeypatch, CHUNK_LATE_S)
    report = replay_run(store, run_id, browser=BrowserConfig(screenshots=False, set_of_marks=False))
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    steps = sorted(store.read("steps", run_id=report.replay_run).to_pylist(), key=lambda r: r["step_index"])
    assert "Done: loading 1 of 3, loading 2 of 3, loading 3 of 3" in steps[1]["tree_text"]


def test_a_stream_recorded_without_its_body_is_a_defect_in_the_replay(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_tap(self: BodyTaps, session: Any) -> None:
        return None

    monkeypatch.setattr(BodyTaps, "listen", no_tap)
    store, run_id = _record(tmp_path, site)
    row = _stream_row(store, run_id)
    assert row["response_body"] is None and _headers(row)[BODY_HEADER] == "missing"
    monkeypatch.undo()
    report = replay_run(store, run_id, browser=BrowserConfig(screenshots=False, set_of_marks=False))
    episode = report.episodes[0]
    assert episode.requests.missing_body == 1
    assert not episode.steps[1].tree_equal  # served empty, the page never saw the events


BOUNCE = {
    "/bounce": "<title>bounce</title><script>location.replace('/arrived')</script>",
    "/arrived": "<title>arrived</title><p>Done",
}


def test_a_page_that_moved_on_as_it_loaded_keeps_its_body_where_the_har_lost_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page that replaces itself by script as it loads: Playwright's HAR lost its body in 4 of
    20 recordings (a race no test can call up), so here the HAR loses it every time. mmina's
    session read it as the page asked for its next document (``streams.BodyTaps.kept``): the row
    has its body and the replay serves it, so the replayed page moves on as the recorded one did."""
    losing = []

    def read_losing(path: Path) -> tuple[list[dict[str, Any]], Any]:
        entries, archive = read_har(path)
        for entry in (e for e in entries if e["request"]["url"].endswith("/bounce")):
            content = entry["response"]["content"]
            content.pop("_file", None), content.pop("text", None)
            losing.append(content.get("size"))
        return entries, archive

    monkeypatch.setattr(har, "read_har", read_losing)
    with LocalSite(pages_handler(BOUNCE)) as site:
        store, run_id = _record(tmp_path, site.url + "bounce", [{"action": "stop", "answer": "Done"}])
    assert losing and all(
        size != 0 for size in losing
    )  # the HAR had the entry (-1: it had lost the body itself)
    [row] = [r for r in store.read("requests", run_id=run_id).to_pylist() if r["url"].endswith("/bounce")]
    assert BODY_HEADER not in _headers(row)
    assert store.read_blobs([row["response_body"]])[row["response_body"]] == BOUNCE["/bounce"].encode()

    report = replay_run(store, run_id, browser=BrowserConfig(screenshots=False, set_of_marks=False))
    episode = report.episodes[0]
    assert episode.fidelity == 1.0, [s.tree_diff for s in episode.steps]
    assert episode.requests.missing_body == 0 and episode.requests.unmatched == 0
