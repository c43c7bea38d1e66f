"""From the browser's HAR archive to ``requests`` rows and body blobs, secrets redacted.

Bodies the HAR lacks come from ``streams.py``: EventSource messages, fetch/XHR bodies tapped
as they arrived (a stream the page aborted, which Chromium's HAR keeps without a body), the
bodies of a page that moved on right after loading them, read by mmina's session as it did, and
a SharedWorker's traffic (``shared_workers.py``: its script's response, and the requests the
worker makes itself, which the HAR does not have at all).
Two headers of mmina's own go into a row's ``response_headers`` (no store column needed):

* ``x-mmina-chunks``: how the body arrived, ``size@ms`` per chunk (milliseconds after the
  headers), comma-separated, for a fetch/XHR body that came in more than one chunk; replay
  hands it to the page in the same chunks at the same pace.
* ``x-mmina-body: missing``: a response that had a body which neither the HAR nor a tap kept;
  its replay is a fidelity defect, and the report counts it as one.
* ``x-mmina-taken``: for a fetch/XHR answer, when the page's own code got it (its ``fetch``
  promise resolved, its XHR reached ``readyState`` 4), in milliseconds after the request started
  (``streams.TAKEN``): later than the response arrived when the page was busy with its own work
  then; a replay on the recording's timeline hands the answer over at that moment.
* ``x-mmina-handed``: in a replay's row, when its router began handing the response over (after
  any hold for the recorded pace or the timeline), in milliseconds after the request started:
  ``time_ms`` less it is how long the hand-over itself took, until the browser had it all.
"""

from __future__ import annotations

import base64
import bisect
import json
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mmina.redaction.redact import Redactor
from mmina.redaction.secret_rules import SOCKET_TYPE, is_text_type
from mmina.store.blobs import sha256

MMINA_HEADERS = "x-mmina-"
"""The prefix of the headers mmina adds to a row (see the module): a replay never serves them."""
CHUNKS_HEADER = MMINA_HEADERS + "chunks"
BODY_HEADER = MMINA_HEADERS + "body"
HANDED_HEADER = MMINA_HEADERS + "handed"
TAKEN_HEADER = MMINA_HEADERS + "taken"
TAKEN_MATCH_S = 0.5
"""A page's report of an answer it got belongs to the request of its method and URL that started
closest to when the page asked, within this long."""
MISSING = "missing"
NO_BODY_STATUSES = frozenset({101, 204, 205, 304})

if (
    TYPE_CHECKING
):  # the recorder's browser modules; this one stays free of Playwright (replay reads its names)
    from mmina.recorder.left_behind import LeftBody
    from mmina.recorder.shared_workers import WorkerExchange
    from mmina.recorder.streams import EventStreams, Taken, Tapped

PutBlob = Callable[[bytes, str], str]
T = TypeVar("T")
NO_COLUMNS: Mapping[str, Any] = {}


@dataclass(frozen=True)
class RoutedTraffic:
    """What a context's router did that its HAR cannot show: ``entries`` in the HAR's format for
    traffic the browser never saw on the network (a replay's sockets, which its router played),
    and ``aliases``, the addresses the router continued requests to, each with the URL the page
    asked for (the HAR names the former: a replay's large bodies, ``mmina.replayer.body_server``)."""

    entries: Sequence[dict[str, Any]] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    """Further ``requests`` columns by method and URL, in the order the page asked (a replay's
    ``replay_match`` and its source): the n-th request for a method and URL gets the n-th."""
    handed: Mapping[tuple[str, str], Sequence[float | None]] = field(default_factory=dict)
    """When the router began handing each response over (wall-clock seconds; None: it did not), by
    method and URL in the order asked as ``columns``: the row's ``x-mmina-handed`` header."""


def read_har(path: Path) -> tuple[list[dict[str, Any]], zipfile.ZipFile | None]:
    """The HAR entries and, for a ``.zip`` archive, the zip holding attached bodies; none when
    the browser wrote no (or no whole) archive, e.g. when it died before closing the context."""
    if not path.exists():
        return [], None
    try:
        if path.suffix == ".zip":
            archive = zipfile.ZipFile(path)
            try:
                return json.loads(archive.read("har.har"))["log"]["entries"], archive
            except (KeyError, ValueError):
                archive.close()
                raise
        return json.loads(path.read_text())["log"]["entries"], None
    except (zipfile.BadZipFile, KeyError, ValueError, OSError):
        return [], None


def capture(
    path: Path,
    step_starts: list[datetime],
    put_blob: PutBlob,
    redactor: Redactor,
    streams: EventStreams | None = None,
    routed: RoutedTraffic = RoutedTraffic(),
) -> list[dict[str, Any]]:
    """Request rows (one per HAR entry, in start order, assigned to the step that issued them).

    ``streams`` gives the bodies the HAR lacks (see the module); ``routed`` what the context's
    router did that the browser's HAR cannot show (see :class:`RoutedTraffic`). ``redactor`` first learns every
    secret of the traffic (credentials in headers, secret query values, tokens in JSON and form
    bodies), then redacts every row and body with all of them, so a token a page echoes
    elsewhere is gone there too; the caller redacts the episode's other rows with the same
    redactor afterwards."""
    entries, archive = read_har(path)
    try:
        entries = completed(entries, archive, streams, routed)
        for entry in entries:
            learn_entry(redactor, entry, archive)
        extra = {key: list(columns) for key, columns in routed.columns.items()}
        handed = {key: list(times) for key, times in routed.handed.items()}
        taken = streams.taken() if streams is not None else {}
        rows = []
        for seq, e in enumerate(entries):
            further: Mapping[str, Any] = _next_for(e, extra, NO_COLUMNS)
            row = {**_row(seq, e, step_starts, put_blob, archive, redactor), **further}
            row = _with_moment(row, TAKEN_HEADER, _taken_for(e, row, taken))
            rows.append(_with_moment(row, HANDED_HEADER, _next_for(e, handed, None)))
        return rows
    finally:
        if archive is not None:
            archive.close()


def completed(
    entries: list[dict[str, Any]],
    archive: zipfile.ZipFile | None,
    streams: EventStreams | None = None,
    routed: RoutedTraffic = RoutedTraffic(),
) -> list[dict[str, Any]]:
    """The HAR's entries with what it misses: the router's traffic, each request named by the URL
    the page asked for, in start order, and the bodies ``streams`` kept (see the module)."""
    workers = streams.shared.entries() if streams is not None else []
    entries = sorted(
        [*unaliased(entries, routed.aliases), *routed.entries, *workers], key=lambda e: e["startedDateTime"]
    )
    if streams is not None:
        entries = fill_scripts(entries, streams.shared.scripts_fetched, archive)
        fill_streams(entries, streams.bodies())
        fill_tapped(entries, streams.taps.bodies(), archive)
        fill_left(entries, streams.left.bodies(), archive)
    return entries


def _next_for(entry: dict[str, Any], given: dict[tuple[str, str], list[T]], none_left: T) -> T:
    """The next of what is ``given`` for this entry's method and URL (taken from it), or ``none_left``."""
    request = entry.get("request") or {}
    waiting = given.get((request.get("method", "GET"), request.get("url", "")))
    return waiting.pop(0) if waiting else none_left


def _taken_for(
    entry: dict[str, Any], row: dict[str, Any], taken: dict[tuple[str, str], list[Taken]]
) -> float | None:
    """When the page's code got this fetch/XHR entry's answer (wall-clock seconds; taken from
    ``taken``: the page's report whose asking is closest to the entry's start, within
    ``TAKEN_MATCH_S``), or None."""
    if entry.get("_resourceType") not in ("fetch", "xhr") or row.get("started_at") is None:
        return None
    request = entry.get("request") or {}
    reports = taken.get((request.get("method", "GET"), request.get("url", "")))
    started = row["started_at"].timestamp()
    near = [r for r in reports or () if abs(r.asked - started) <= TAKEN_MATCH_S and r.taken >= started]
    if not near or reports is None:
        return None
    chosen = min(near, key=lambda r: abs(r.asked - started))
    reports.remove(chosen)
    return chosen.taken


def _with_moment(row: dict[str, Any], header: str, at: float | None) -> dict[str, Any]:
    """``row`` with mmina's own ``header`` (``x-mmina-taken``: when the page's code got its answer;
    ``x-mmina-handed``: when its router handed it over) for the moment ``at`` (wall-clock seconds),
    in whole milliseconds after the request started (see the module); unchanged without one."""
    if at is None:
        return row
    after_ms = max(0.0, 1e3 * (at - row["started_at"].timestamp()))
    return {
        **row,
        "response_headers": [*row["response_headers"], {"name": header, "value": f"{after_ms:.0f}"}],
    }


def unaliased(entries: list[dict[str, Any]], aliases: Mapping[str, str]) -> list[dict[str, Any]]:
    """``entries`` with each request to an alias named by the URL the page asked for."""
    for entry in entries:
        request = entry.get("request") or {}
        if request.get("url") in aliases:
            request["url"] = aliases[request["url"]]
    return entries


def learn_entry(redactor: Redactor, entry: dict[str, Any], archive: zipfile.ZipFile | None) -> None:
    """Teach ``redactor`` the secrets of one exchange: URL, headers, redirect and both bodies."""
    request, response = entry["request"], entry.get("response") or {}
    redactor.learn_text(request.get("url", ""))
    redactor.learn_text(response.get("redirectURL"))
    redactor.learn_headers(_pairs(request) + _pairs(response))
    text, mime = request_text(request, archive)
    if text:
        redactor.learn_body(text.encode("utf-8", "surrogatepass"), mime, response=False)
    content = response.get("content") or {}
    mime = redaction_type(entry)
    body = response_body(content, archive) if is_text_type(mime) else None  # a video is not read twice
    if body:
        redactor.learn_body(body, mime, response=True)


def redaction_type(entry: dict[str, Any]) -> str:
    """The type the redactor reads a response body as: its own, or a socket's recorded messages
    (``SOCKET_TYPE``; the archive calls them ``x-unknown``)."""
    if entry.get("_resourceType") == "websocket":
        return SOCKET_TYPE
    return ((entry.get("response") or {}).get("content") or {}).get("mimeType") or ""


def _pairs(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["name"], h["value"]) for h in message.get("headers", [])]


def fill_streams(entries: list[dict[str, Any]], streams: dict[str, list[bytes]]) -> None:
    """Give each EventSource entry without a body the next body captured for its URL."""
    pending = {url: list(bodies) for url, bodies in streams.items()}
    for entry in entries:
        content = (entry.get("response") or {}).get("content") or {}
        bodies = pending.get(entry["request"].get("url", ""))
        if (
            entry.get("_resourceType") != "eventsource"
            or content.get("_file")
            or content.get("text")
            or not bodies
        ):
            continue
        _give_body(entry.setdefault("response", {}), bodies.pop(0))
        entry["response"]["status"] = entry["response"].get("status") or 200


def fill_tapped(
    entries: list[dict[str, Any]],
    tapped: dict[tuple[str, str], list[Tapped]],
    archive: zipfile.ZipFile | None,
) -> None:
    """Give each fetch/XHR entry the next body tapped for its method and URL: as its body when
    the HAR kept none, and its chunk timing when it came in more than one chunk."""
    pending = {key: list(bodies) for key, bodies in tapped.items()}
    for entry in entries:
        if entry.get("_resourceType") not in ("fetch", "xhr"):
            continue
        bodies = pending.get((entry["request"].get("method", "GET"), entry["request"].get("url", "")))
        if not bodies:
            continue
        tap = bodies.pop(0)
        response = entry.setdefault("response", {})
        content = response.get("content") or {}
        if response_body(content, archive) is None and tap.body:
            _give_body(response, tap.body)
        if len(tap.timing()) > 1:
            timing = ",".join(f"{size}@{at:g}" for size, at in tap.timing())
            response["headers"] = [*response.get("headers", []), {"name": CHUNKS_HEADER, "value": timing}]


def fill_scripts(
    entries: list[dict[str, Any]], scripts: Sequence[WorkerExchange], archive: zipfile.ZipFile | None
) -> list[dict[str, Any]]:
    """Give each SharedWorker script the HAR keeps without a response (its request only, see
    ``shared_workers.py``) the response read as the worker got it: the first such entry of its
    method and URL sent before it; one without an entry (a redirect's target) becomes an entry."""
    added: list[dict[str, Any]] = []
    for script in scripts:
        entry = next(
            (
                e
                for e in entries
                if e["request"].get("url") == script.url
                and e["request"].get("method", "GET") == script.method
                and int((e.get("response") or {}).get("status") or 0) <= 0
                and response_body((e.get("response") or {}).get("content") or {}, archive) is None
                and _started(e).timestamp() <= script.started
            ),
            None,
        )
        answered = script.har_entry()
        if entry is None:
            added.append(answered)
            continue
        entry["response"] = answered["response"]
        entry["time"] = max(0.0, (script.started - _started(entry).timestamp()) * 1e3)
    return sorted([*entries, *added], key=lambda e: e["startedDateTime"]) if added else entries


LEFT_MATCH_S = 1.0
"""A body read as its page moved on goes to the entry of its method and URL sent nearest it, at
most this far apart."""


def fill_left(
    entries: list[dict[str, Any]],
    left: dict[tuple[str, str], list[LeftBody]],
    archive: zipfile.ZipFile | None,
) -> None:
    """Give each entry whose body the HAR lost the body mmina's session read as its page moved
    on (``left_behind.py``): of those for its method and URL, the one sent nearest it."""
    pending = {key: list(bodies) for key, bodies in left.items()}
    for entry in entries:
        response = entry.get("response") or {}
        candidates = pending.get((entry["request"].get("method", "GET"), entry["request"].get("url", "")))
        if (
            not candidates
            or response_body(response.get("content") or {}, archive) is not None
            or not body_missing(entry, None)
        ):
            continue
        sent = _started(entry).timestamp()
        nearest = min(candidates, key=lambda k: abs(k.sent - sent))
        if abs(nearest.sent - sent) <= LEFT_MATCH_S:
            candidates.remove(nearest)
            _give_body(response, nearest.body)


def _give_body(response: dict[str, Any], body: bytes) -> None:
    response["content"] = {
        **(response.get("content") or {}),
        "size": len(body),
        "encoding": "base64",
        "text": base64.b64encode(body).decode(),
    }


def _started(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["startedDateTime"].replace("Z", "+00:00"))


def body_missing(entry: dict[str, Any], body: bytes | None) -> bool:
    """A response that had a body none of the captures kept (HAR size -1, or a size without bytes)."""
    response = entry.get("response") or {}
    status = int(response.get("status") or 0)
    if body or status <= 0 or status in NO_BODY_STATUSES or 300 <= status < 400:
        return False
    if entry["request"].get("method") == "HEAD":
        return False
    size = int((response.get("content") or {}).get("size") or 0)
    return size != 0


def _row(
    seq: int,
    entry: dict[str, Any],
    step_starts: list[datetime],
    put_blob: PutBlob,
    archive: zipfile.ZipFile | None,
    redactor: Redactor,
) -> dict[str, Any]:
    request, response = entry["request"], entry.get("response") or {}
    started = _started(entry)
    content = response.get("content") or {}
    mime = content.get("mimeType") or ""
    received = response_body(content, archive)
    body = redactor.body(received, redaction_type(entry)) if received else None
    request_body, request_size = _request_body(request, put_blob, redactor, archive)
    response_headers = _pairs(response)
    if body_missing(entry, body):
        response_headers.append((BODY_HEADER, MISSING))
    return {
        "seq": seq,
        "step_index": bisect.bisect_right(step_starts, started) - 1,
        "started_at": started,
        "method": request.get("method", "GET"),
        "url": redactor.traffic_text(request.get("url", "")),
        "status": max(0, int(response.get("status") or 0)),  # the HAR says -1 for no response
        "request_headers": redactor.headers(_pairs(request)),
        "response_headers": redactor.headers(response_headers),
        "request_body": request_body,
        "request_body_size": request_size,
        "response_body": put_blob(body, mime or "application/octet-stream") if body else None,
        "response_body_size": len(body) if body else max(int(content.get("size") or 0), 0),
        "received_body_sha256": sha256(received) if received else None,
        "received_body_size": len(received) if received else None,
        "mime_type": mime,
        "redirect_url": redactor.traffic_text(response.get("redirectURL") or ""),
        "time_ms": float(entry.get("time") or 0.0),
    }


def response_body(content: dict[str, Any], archive: zipfile.ZipFile | None) -> bytes | None:
    if archive is not None and content.get("_file"):
        try:
            return archive.read(content["_file"])
        except KeyError:
            return None
    text = content.get("text")
    if text is None:
        return None
    if content.get("encoding") == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate from the HAR JSON stays a byte


def request_text(request: dict[str, Any], archive: zipfile.ZipFile | None) -> tuple[str | None, str]:
    """The request body as text and its type; with attached content Playwright keeps it in the zip (``_file``)."""
    post = request.get("postData") or {}
    text = post.get("text")
    if not text and archive is not None and post.get("_file"):
        try:
            text = archive.read(post["_file"]).decode("utf-8", "replace")
        except KeyError:
            text = None
    return text or None, post.get("mimeType") or "application/octet-stream"


def _request_body(
    request: dict[str, Any], put_blob: PutBlob, redactor: Redactor, archive: zipfile.ZipFile | None
) -> tuple[str | None, int]:
    """The redacted request body's blob and the size the browser sent."""
    text, mime = request_text(request, archive)
    if not text:
        return None, 0
    data = text.encode("utf-8", "surrogatepass")
    return put_blob(redactor.body(data, mime, response=False), mime), len(data)
