"""``mmina export warc``: stored episodes as a WARC 1.1 file (one gzip member per record).

What is written, in order:

* a ``warcinfo`` record: the software (mmina and the store's schema version), the runs, and
  what redaction did to the content (:data:`stored.REDACTION_NOTE`);
* per episode, a ``metadata`` record (``urn:mmina:episode:<id>``: task, status, answer, and
  the record ids of the initial page load), then every archived exchange as a ``request``
  record and a ``response`` record (HTTP/1.1 messages: the stored headers, the body as the
  browser received it, decoded, so ``Content-Encoding`` and ``Transfer-Encoding`` are dropped
  and ``Content-Length`` is the body's). A body already written earlier in the file becomes a
  ``revisit`` record (identical-payload-digest profile), as web archives deduplicate. A request
  that got no response has its request record only;
* per step, the screenshot as a ``resource`` record (``urn:mmina:screenshot:<sha256>``, once
  per file) and a ``metadata`` record (``urn:mmina:step:<episode>/<index>``: index, URL,
  title, action, model output, tree, the screenshot's record, the records its action issued).

Every record of an exchange says which episode, request and step it belongs to
(``WARC-Mmina-Episode``, ``-Seq``, ``-Step``), which of its parts a redaction marker is in
(``WARC-Mmina-Redacted: url, response-body``...), and a body the recording could not keep is
marked ``WARC-Truncated: unspecified`` (``WARC-Mmina-Body: missing``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmina.interchange.row_json import row_to_json
from mmina.interchange.stored import (
    REDACTION_NOTE,
    BlobReader,
    Row,
    Selection,
    StoredEpisode,
    body_missing,
    provenance,
    redacted_parts,
    selected_runs,
    stream_episodes,
    written_whole,
)
from mmina.interchange.warc_records import (
    WarcWriter,
    digest,
    http_request,
    http_response,
    record_id,
    warc_date,
)
from mmina.interchange.warc_sockets import FRAMES_TYPE, RESOURCE_KIND, frames_block, http_form, is_socket
from mmina.recorder.har import CHUNKS_HEADER, MMINA_HEADERS
from mmina.store import Store
from mmina.store.store import utcnow

DROPPED = frozenset({"content-encoding", "transfer-encoding", "content-length", "connection", "keep-alive"})
"""Framing headers that no longer describe the stored (decoded) body."""
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
REVISIT_WINDOW = 100_000
"""Bodies remembered for revisit records: bounded, so a long export keeps bounded memory."""
STEP_FIELDS = (
    "step_index",
    "started_at",
    "url",
    "title",
    "action",
    "action_kind",
    "action_error",
    "model_output",
    "live_hops",
    "live_hop_completed",
    "tree_text",
)
EPISODE_FIELDS = (
    "episode_id",
    "task_id",
    "attempt",
    "status",
    "stop_reason",
    "final_answer",
    "n_steps",
    "n_hops",
    "started_at",
    "ended_at",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "error",
)
OnEpisode = Callable[[StoredEpisode], None]
EPISODE_LEFT_OUT = ("run_id", "blob_packs")
"""Not in an episode record's ``row``: where the store kept it (an import has its own)."""
STEP_LEFT_OUT = ("episode_id", "run_id", "tree_text")
"""Not in a step record's ``row``: what the record says already."""


@dataclass
class WarcExport:
    """What an export wrote."""

    path: str
    episodes: int = 0
    records: int = 0
    exchanges: int = 0
    revisits: int = 0
    redacted: int = 0
    """Records with a redaction marker in some part."""
    missing_bodies: int = 0
    sockets: int = 0
    """WebSockets written as IIPC #115 proposes (``warc_sockets``)."""
    socket_frames: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Written:
    rid: str
    uri: str
    date: str


class _Exporter:
    """Writes episodes to one WARC, remembering recent bodies and screenshots for revisits."""

    def __init__(self, store: Store, writer: WarcWriter, report: WarcExport, revisits: bool = True) -> None:
        self.store, self.writer, self.report, self.revisits = store, writer, report, revisits
        self.blobs = BlobReader(store)
        self.info_id = record_id("warcinfo", report.path)
        self.seen: OrderedDict[str, _Written] = OrderedDict()

    def warcinfo(self, runs: list[str]) -> None:
        fields = {
            **provenance(self.store),
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
            "mmina-runs": ", ".join(runs),
            "redaction": REDACTION_NOTE,
        }
        block = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode()
        self.writer.write(
            "warcinfo",
            self.info_id,
            warc_date(utcnow()),
            [("Content-Type", "application/warc-fields"), ("WARC-Filename", Path(self.report.path).name)],
            block,
        )

    def run(self, run_id: str) -> None:
        """The run's row and its tasks (``urn:mmina:run:<id>``), so an import restores them."""
        row = self.store.read("runs", run_id=run_id).to_pylist()[0]
        tasks = self.store.read("tasks", run_id=run_id).to_pylist()
        self.json_record(
            record_id(run_id, "run"),
            f"urn:mmina:run:{run_id}",
            row["created_at"],
            {
                "run_id": run_id,
                "run": row_to_json(row, ("run_id",)),
                "tasks": [row_to_json(t, ("run_id",)) for t in tasks],
            },
        )

    def episode(self, episode: StoredEpisode) -> None:
        digests = [r[c] for r in episode.requests for c in ("request_body", "response_body")]
        shots = [*(s.get("screenshot") for s in episode.steps), episode.row.get("final_screenshot")]
        blobs = self.blobs.read(episode, [*digests, *shots])
        ids = [self.exchange(episode, request, blobs) for request in episode.requests]
        by_step: dict[int, list[str]] = {}
        for request, rid in zip(episode.requests, ids):
            by_step.setdefault(request["step_index"], []).append(rid)
        final = episode.row.get("final_screenshot")
        final_shot = self.screenshot(final, blobs[final], episode.row["ended_at"]) if final in blobs else None
        self.json_record(
            record_id(episode.episode_id, "episode"),
            f"urn:mmina:episode:{episode.episode_id}",
            episode.row["started_at"],
            {
                **{k: episode.row.get(k) for k in EPISODE_FIELDS},
                "run_id": episode.run_id,
                "initial_requests": by_step.get(-1, []),
                "final_screenshot_record": final_shot,
                "row": row_to_json(episode.row, EPISODE_LEFT_OUT),
            },
        )
        for step in episode.steps:
            self.step(episode, step, blobs, by_step.get(step["step_index"], []))
        self.report.episodes += 1

    def exchange(self, episode: StoredEpisode, request: Row, blobs: dict[str, bytes]) -> str:
        """The request record, and the response (or revisit) record when one came; the request's id."""
        request_body = blobs.get(request["request_body"] or "")
        response_body = blobs.get(request["response_body"] or "", b"")
        names = (episode.episode_id, str(request["seq"]))
        rid, response_id = record_id(*names, "request"), record_id(*names, "response")
        date, url = warc_date(request["started_at"]), request["url"]
        common = _exchange_headers(episode, request, redacted_parts(request, request_body, response_body))
        self.report.redacted += bool(redacted_parts(request, request_body, response_body))
        if is_socket(request):
            self.socket(request, names, date, common, response_body)
            self.report.exchanges += 1
            return rid
        answered = request["status"] > 0
        concurrent = [("WARC-Concurrent-To", response_id)] if answered else []
        block = http_request(request["method"], _target(url), _request_headers(request), request_body or b"")
        self.writer.write(
            "request",
            rid,
            date,
            [
                ("WARC-Target-URI", url),
                *self._info(),
                ("Content-Type", "application/http;msgtype=request"),
                ("WARC-Payload-Digest", digest(request_body or b"")),
                *common,
                *concurrent,
            ],
            block,
        )
        if answered:
            self.response(request, response_id, rid, date, common, response_body)
        self.report.exchanges += 1
        return rid

    def response(
        self, request: Row, rid: str, request_id: str, date: str, common: list[tuple[str, str]], body: bytes
    ) -> None:
        url, payload = request["url"], digest(body)
        headers = _response_headers(request, body)
        extra = [
            ("WARC-Target-URI", url),
            *self._info(),
            ("Content-Type", "application/http;msgtype=response"),
            ("WARC-Payload-Digest", payload),
            ("WARC-Concurrent-To", request_id),
            *common,
        ]
        if body_missing(request):
            extra.append(("WARC-Truncated", "unspecified"))
            self.report.missing_bodies += 1
        earlier = self.seen.get(payload) if body and self.revisits else None
        if earlier is not None:
            self.seen.move_to_end(payload)
            self.writer.write(
                "revisit",
                rid,
                date,
                [
                    *extra,
                    ("WARC-Profile", REVISIT_PROFILE),
                    ("WARC-Refers-To", earlier.rid),
                    ("WARC-Refers-To-Target-URI", earlier.uri),
                    ("WARC-Refers-To-Date", earlier.date),
                ],
                http_response(request["status"], headers, b""),
            )
            self.report.revisits += 1
            return
        self.writer.write("response", rid, date, extra, http_response(request["status"], headers, body))
        if body:
            self._remember(payload, _Written(rid, url, date))

    def socket(
        self, request: Row, names: tuple[str, str], date: str, common: list[tuple[str, str]], stored: bytes
    ) -> None:
        """A WebSocket as IIPC #115 has it (``warc_sockets``): the handshake's request and
        ``101`` response (headers only, at the ``http(s)`` URL) and a ``resource`` record at the
        ``ws(s)`` URL holding the frames, each pointing at the others (``WARC-Concurrent-To``)."""
        ids = {kind: record_id(*names, kind) for kind in ("request", "response", "frames")}
        url, handshake = request["url"], http_form(request["url"])
        block, frames = frames_block(stored, request["started_at"])
        self.writer.write(
            "request",
            ids["request"],
            date,
            [
                ("WARC-Target-URI", handshake),
                *self._info(),
                ("Content-Type", "application/http;msgtype=request"),
                *common,
                ("WARC-Concurrent-To", ids["response"]),
                ("WARC-Concurrent-To", ids["frames"]),
            ],
            http_request("GET", _target(url), _request_headers(request), b""),
        )
        headers = [
            (n, v)
            for n, v in _response_headers(request, b"")
            if n.lower() not in ("content-length", "content-type")
        ]
        self.writer.write(
            "response",
            ids["response"],
            date,
            [
                ("WARC-Target-URI", handshake),
                *self._info(),
                ("Content-Type", "application/http;msgtype=response"),
                ("WARC-Payload-Digest", digest(b"")),
                *common,
                ("WARC-Concurrent-To", ids["request"]),
                ("WARC-Concurrent-To", ids["frames"]),
            ],
            http_response(101, headers, b""),
        )
        self.writer.write(
            "resource",
            ids["frames"],
            date,
            [
                ("WARC-Target-URI", url),
                *self._info(),
                ("Content-Type", FRAMES_TYPE),
                ("WARC-Resource", RESOURCE_KIND),
                *common,
                ("WARC-Concurrent-To", ids["request"]),
                ("WARC-Concurrent-To", ids["response"]),
            ],
            block,
        )
        self.report.sockets += 1
        self.report.socket_frames += frames

    def step(self, episode: StoredEpisode, step: Row, blobs: dict[str, bytes], issued: list[str]) -> None:
        shot = step.get("screenshot")
        screenshot = None
        if shot and shot in blobs:
            screenshot = {
                "sha256": shot,
                "uri": f"urn:mmina:screenshot:{shot}",
                "record": self.screenshot(shot, blobs[shot], step["started_at"]),
            }
        name = f"{episode.episode_id}/{step['step_index']}"
        self.json_record(
            record_id(name, "step"),
            f"urn:mmina:step:{name}",
            step["started_at"],
            {
                "episode_id": episode.episode_id,
                **{k: step.get(k) for k in STEP_FIELDS},
                "screenshot": screenshot,
                "requests": issued,
                "row": row_to_json(step, STEP_LEFT_OUT),
            },
        )

    def screenshot(self, sha: str, data: bytes, when: Any) -> str:
        """The screenshot's resource record (written once per file while remembered); its id."""
        key = f"screenshot:{sha}"
        if key in self.seen:
            return self.seen[key].rid
        rid, uri, date = record_id("screenshot", sha), f"urn:mmina:screenshot:{sha}", warc_date(when)
        self.writer.write(
            "resource",
            rid,
            date,
            [("WARC-Target-URI", uri), *self._info(), ("Content-Type", "image/jpeg")],
            data,
        )
        self._remember(key, _Written(rid, uri, date))
        return rid

    def json_record(self, rid: str, uri: str, when: Any, content: dict[str, Any]) -> None:
        block = json.dumps(content, default=str, ensure_ascii=False, indent=1).encode()
        self.writer.write(
            "metadata",
            rid,
            warc_date(when),
            [("WARC-Target-URI", uri), *self._info(), ("Content-Type", "application/json")],
            block,
        )

    def _info(self) -> list[tuple[str, str]]:
        return [("WARC-Warcinfo-ID", self.info_id)]

    def _remember(self, key: str, written: _Written) -> None:
        self.seen[key] = written
        if len(self.seen) > REVISIT_WINDOW:
            self.seen.popitem(last=False)


def export_warc(
    store: Store, selection: Selection, output: Path, on_episode: OnEpisode | None = None
) -> WarcExport:
    """Write the selected episodes to ``output`` (a ``.warc.gz``), streaming: episodes are read
    and written one at a time. The file appears whole or not at all (written under a temporary
    name, then renamed)."""
    runs = selected_runs(store, selection)
    report = WarcExport(str(output))
    with written_whole(output) as partial, partial.open("wb") as sink:
        write_warc(store, selection, WarcWriter(sink), report, runs, on_episode)
    report.bytes = output.stat().st_size
    return report


def write_warc(
    store: Store,
    selection: Selection,
    writer: WarcWriter,
    report: WarcExport,
    runs: list[str],
    on_episode: OnEpisode | None,
    revisits: bool = True,
) -> None:
    """The records of the export (see the module) through ``writer``; ``revisits`` False writes
    every body in full (for a package whose player looks each record up alone)."""
    exporter = _Exporter(store, writer, report, revisits)
    exporter.warcinfo(runs)
    for run_id in runs:
        exporter.run(run_id)
    for episode in stream_episodes(store, selection):
        exporter.episode(episode)
        if on_episode:
            on_episode(episode)
    report.records = writer.records


def _exchange_headers(episode: StoredEpisode, request: Row, redacted: list[str]) -> list[tuple[str, str]]:
    headers = [
        ("WARC-Mmina-Episode", episode.episode_id),
        ("WARC-Mmina-Seq", str(request["seq"])),
        ("WARC-Mmina-Step", str(request["step_index"])),
    ]
    chunks = next(
        (h["value"] for h in request.get("response_headers") or () if h["name"].lower() == CHUNKS_HEADER), ""
    )
    if chunks:
        headers.append(("WARC-Mmina-Chunks", chunks))
    if body_missing(request):
        headers.append(("WARC-Mmina-Body", "missing"))
    headers.append(("WARC-Mmina-Time-Ms", repr(float(request.get("time_ms") or 0.0))))
    if request.get("received_body_sha256") not in (None, request.get("response_body")):  # redacted: what came
        headers.append(
            (
                "WARC-Mmina-Received",
                f"{request['received_body_sha256']} {request.get('received_body_size') or 0}",
            )
        )
    if redacted:
        headers.append(("WARC-Mmina-Redacted", ", ".join(redacted)))
    return headers


def _target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _request_headers(request: Row) -> list[tuple[str, str]]:
    """The stored request headers as HTTP/1.1 sends them (no HTTP/2 pseudo-headers; a Host)."""
    headers = [
        (h["name"], h["value"]) for h in request.get("request_headers") or () if not h["name"].startswith(":")
    ]
    if not any(n.lower() == "host" for n, _v in headers):
        headers.insert(0, ("Host", urlsplit(request["url"]).netloc))
    return headers


def _response_headers(request: Row, body: bytes) -> list[tuple[str, str]]:
    """The stored response headers framing the stored (decoded) body; mmina's own moved out."""
    headers = [
        (h["name"], h["value"])
        for h in request.get("response_headers") or ()
        if h["name"].lower() not in DROPPED and not h["name"].lower().startswith(MMINA_HEADERS)
    ]
    if request.get("mime_type") and not any(n.lower() == "content-type" for n, _v in headers):
        headers.append(("Content-Type", request["mime_type"]))
    return [*headers, ("Content-Length", str(len(body)))]
