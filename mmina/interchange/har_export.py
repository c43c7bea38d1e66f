"""``mmina export har``: one episode's archived traffic as a HAR 1.2 file.

Every stored request becomes an entry with its headers, bodies (text as text, anything else in
base64), status, redirect and timing. Each step is a ``page`` (``step_<index>``, titled by the
page it observed, with the step's action and URL in ``_mmina_step``), and each entry names the
page its request loaded (``pageref``: the initial load and what step k's action issued load
the observation of step 0 and k + 1) and the step that issued it (``_mmina_step``, -1 for the
initial load). Bodies are as stored: decoded, so ``Content-Encoding`` and ``Content-Length``
are dropped from the headers (a HAR's ``content`` is decoded too), and secrets redacted
(``_mmina_redacted`` lists the parts of an entry that carry a marker; the log's ``comment``
says what redaction does). mmina's own headers (``x-mmina-*``) move to ``_mmina_chunks`` and
``_mmina_body_missing``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from mmina import __version__
from mmina.errors import SEE_EPISODES, not_found
from mmina.interchange.stored import (
    REDACTION_NOTE,
    BlobReader,
    InterchangeError,
    Row,
    Selection,
    StoredEpisode,
    body_missing,
    provenance,
    redacted_parts,
    stream_episodes,
    written_whole,
)
from mmina.interchange.warc_records import reason
from mmina.recorder.har import CHUNKS_HEADER, MMINA_HEADERS
from mmina.redaction.secret_rules import is_text_type
from mmina.store import Store

DROPPED = frozenset({"content-encoding", "content-length", "transfer-encoding"})


@dataclass
class HarExport:
    path: str
    episode_id: str
    entries: int = 0
    pages: int = 0
    redacted: int = 0
    missing_bodies: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def export_har(store: Store, episode_id: str, output: Path) -> HarExport:
    """Write episode ``episode_id`` as HAR 1.2 to ``output`` (entries written one at a time;
    the file appears whole or not at all)."""
    episode = next(stream_episodes(store, Selection(episodes=(episode_id,))), None)
    if episode is None:
        raise InterchangeError(not_found("episode", episode_id, str(store.root), see=SEE_EPISODES))
    run = store.read("runs", run_id=episode.run_id, columns=["browser_version"]).to_pylist()
    report = HarExport(str(output), episode_id)
    with written_whole(output) as partial, partial.open("w", encoding="utf-8") as sink:
        _write(store, episode, run[0]["browser_version"] if run else None, sink, report)
    report.bytes = output.stat().st_size
    return report


def _write(
    store: Store, episode: StoredEpisode, browser: str | None, sink: TextIO, report: HarExport
) -> None:
    """The log object with its entries streamed into the ``entries`` array."""
    name, _space, version = (browser or "chromium").partition(" ")
    head = {
        "version": "1.2",
        "creator": {"name": "mmina", "version": __version__},
        "browser": {"name": name, "version": version},
        "comment": REDACTION_NOTE,
        "_mmina": {
            **provenance(store),
            "run_id": episode.run_id,
            "episode_id": episode.episode_id,
            "task_id": episode.row["task_id"],
        },
        "pages": [_page(step) for step in episode.steps],
    }
    report.pages = len(head["pages"])
    text = json.dumps({"log": {**head, "entries": []}}, ensure_ascii=False, default=str)
    opening, closing = text.rsplit('"entries": []', 1)
    sink.write(opening + '"entries": [')
    for number, entry in enumerate(_entries(store, episode, report)):
        sink.write(("," if number else "") + "\n" + json.dumps(entry, ensure_ascii=False))
    sink.write("\n]" + closing + "\n")


def _page(step: Row) -> dict[str, Any]:
    return {
        "startedDateTime": _iso(step["started_at"]),
        "id": f"step_{step['step_index']}",
        "title": step.get("title") or step.get("url") or "",
        "pageTimings": {},
        "_mmina_step": {
            k: step.get(k)
            for k in (
                "step_index",
                "url",
                "action",
                "action_error",
                "model_output",
                "live_hops",
                "screenshot",
            )
        },
    }


def _entries(store: Store, episode: StoredEpisode, report: HarExport) -> Iterator[dict[str, Any]]:
    blobs = BlobReader(store).read(
        episode, [r[c] for r in episode.requests for c in ("request_body", "response_body")]
    )
    last = max((s["step_index"] for s in episode.steps), default=0)
    for request in episode.requests:
        request_body = blobs.get(request["request_body"] or "")
        response_body = blobs.get(request["response_body"] or "")
        entry = _entry(request, request_body, response_body, min(request["step_index"] + 1, last))
        report.entries += 1
        report.redacted += bool(entry.get("_mmina_redacted"))
        report.missing_bodies += bool(entry.get("_mmina_body_missing"))
        yield entry


def _entry(
    request: Row, request_body: bytes | None, response_body: bytes | None, page: int
) -> dict[str, Any]:
    url = request["url"]
    entry: dict[str, Any] = {
        "pageref": f"step_{page}",
        "startedDateTime": _iso(request["started_at"]),
        "time": request["time_ms"] or 0,
        "request": {
            "method": request["method"],
            "url": url,
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _headers(request.get("request_headers"), DROPPED - {"content-length"}),
            "queryString": [
                {"name": n, "value": v} for n, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)
            ],
            "headersSize": -1,
            "bodySize": request["request_body_size"] or 0,
        },
        "response": _response(request, response_body),
        "cache": {},
        "timings": {"send": 0, "wait": request["time_ms"] or 0, "receive": 0},
        "_mmina_step": request["step_index"],
        "_mmina_seq": request["seq"],
    }
    if request_body is not None:
        entry["request"]["postData"] = {
            "mimeType": _header(request.get("request_headers"), "content-type"),
            "text": request_body.decode("utf-8", "replace"),
        }
    redacted = redacted_parts(request, request_body, response_body)
    if redacted:
        entry["_mmina_redacted"] = redacted
    chunks = _header(request.get("response_headers"), CHUNKS_HEADER)
    if chunks:
        entry["_mmina_chunks"] = chunks
    if body_missing(request):
        entry["_mmina_body_missing"] = True
    return entry


def _response(request: Row, body: bytes | None) -> dict[str, Any]:
    mime = request.get("mime_type") or _header(request.get("response_headers"), "content-type") or "x-unknown"
    content: dict[str, Any] = {"size": len(body) if body else 0, "mimeType": mime}
    if body:
        text = _text(body, mime)
        content.update(
            {"text": text}
            if text is not None
            else {"text": base64.b64encode(body).decode(), "encoding": "base64"}
        )
    status = request["status"]
    return {
        "status": status,
        "statusText": reason(status) if status else "",
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _headers(request.get("response_headers"), DROPPED),
        "content": content,
        "redirectURL": request.get("redirect_url") or "",
        "headersSize": -1,
        "bodySize": len(body) if body else 0,
    }


def _text(body: bytes, mime: str) -> str | None:
    if not is_text_type(mime):
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _headers(headers: list[dict[str, str]] | None, dropped: frozenset[str]) -> list[dict[str, str]]:
    return [
        {"name": h["name"], "value": h["value"]}
        for h in headers or ()
        if h["name"].lower() not in dropped and not h["name"].lower().startswith(MMINA_HEADERS)
    ]


def _header(headers: list[dict[str, str]] | None, name: str) -> str:
    return next((h["value"] for h in headers or () if h["name"].lower() == name), "")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None
