"""From the browser's HAR archive to ``requests`` rows and body blobs, secrets redacted."""
from __future__ import annotations

import base64
import bisect
import json
import zipfile
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from mmina.redact import REDACTED, SECRET_HEADERS, clean_text, redact_body, redact_headers, scrub

PutBlob = Callable[[bytes, str], str]


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


def capture(path: Path, step_starts: list[datetime], put_blob: PutBlob, typed_secrets: Iterable[str] = (),
            streams: dict[str, list[bytes]] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Request rows (one per HAR entry, in start order, assigned to the step that issued them)
    and every secret known for the episode: typed passwords plus the credentials the headers
    carried, which are then scrubbed from URLs and bodies too (a page may echo a token).
    ``streams`` gives the bodies the HAR lacks for EventSource streams (see ``streams.py``)."""
    entries, archive = read_har(path)
    try:
        entries = sorted(entries, key=lambda e: e["startedDateTime"])
        fill_streams(entries, streams or {})
        secrets = sorted({*typed_secrets, *header_secrets(entries)}, key=len, reverse=True)
        return [_row(seq, e, step_starts, put_blob, archive, secrets) for seq, e in enumerate(entries)], secrets
    finally:
        if archive is not None:
            archive.close()


def fill_streams(entries: list[dict[str, Any]], streams: dict[str, list[bytes]]) -> None:
    """Give each EventSource entry without a body the next body captured for its URL."""
    pending = {url: list(bodies) for url, bodies in streams.items()}
    for entry in entries:
        content = (entry.get("response") or {}).get("content") or {}
        bodies = pending.get(entry["request"].get("url", ""))
        if entry.get("_resourceType") != "eventsource" or content.get("_file") or content.get("text") or not bodies:
            continue
        body = bodies.pop(0)
        entry.setdefault("response", {})["content"] = {**content, "size": len(body), "encoding": "base64",
                                                        "text": base64.b64encode(body).decode()}
        entry["response"]["status"] = entry["response"].get("status") or 200


MIN_SECRET = 8
"""Shorter header values (``lang=en``) are too common to scrub from every text."""


def header_secrets(entries: list[dict[str, Any]]) -> set[str]:
    """Credential values in the traffic: Authorization tokens and cookie values."""
    found: set[str] = set()
    for entry in entries:
        headers = [*entry["request"].get("headers", []), *(entry.get("response") or {}).get("headers", [])]
        for header in headers:
            found |= _credential_values(header["name"].lower(), header["value"])
    return {v for v in found if len(v) >= MIN_SECRET}


def _credential_values(name: str, value: str) -> set[str]:
    if name in ("authorization", "proxy-authorization"):
        return {value, value.partition(" ")[2]}
    if name == "cookie":
        return {pair.partition("=")[2].strip() for pair in value.split(";")}
    if name == "set-cookie":
        return {value.split(";")[0].partition("=")[2].strip()}
    return {value} if name in SECRET_HEADERS else set()


def _row(seq: int, entry: dict[str, Any], step_starts: list[datetime], put_blob: PutBlob,
         archive: zipfile.ZipFile | None, secrets: list[str]) -> dict[str, Any]:
    request, response = entry["request"], entry.get("response") or {}
    started = datetime.fromisoformat(entry["startedDateTime"].replace("Z", "+00:00"))
    content = response.get("content") or {}
    body = _scrub_bytes(_response_body(content, archive), secrets)
    request_body, request_size = _request_body(request, put_blob, secrets, archive)
    return {
        "seq": seq,
        "step_index": bisect.bisect_right(step_starts, started) - 1,
        "started_at": started,
        "method": request.get("method", "GET"),
        "url": clean_text(request.get("url", ""), secrets) or "",
        "status": max(0, int(response.get("status") or 0)),  # the HAR says -1 for no response
        "request_headers": redact_headers((h["name"], h["value"]) for h in request.get("headers", [])),
        "response_headers": redact_headers((h["name"], h["value"]) for h in response.get("headers", [])),
        "request_body": request_body,
        "request_body_size": request_size,
        "response_body": put_blob(body, content.get("mimeType") or "application/octet-stream") if body else None,
        "response_body_size": len(body) if body else max(int(content.get("size") or 0), 0),
        "mime_type": content.get("mimeType") or "",
        "redirect_url": response.get("redirectURL") or "",
        "time_ms": float(entry.get("time") or 0.0),
    }


def _response_body(content: dict[str, Any], archive: zipfile.ZipFile | None) -> bytes | None:
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
    return text.encode()


def _scrub_bytes(body: bytes | None, secrets: list[str]) -> bytes | None:
    """Typed secrets echoed back by a page are removed from stored bodies too."""
    for secret in secrets:
        if body and secret:
            body = body.replace(secret.encode(), REDACTED.encode())
    return body


def _request_body(request: dict[str, Any], put_blob: PutBlob, secrets: list[str],
                  archive: zipfile.ZipFile | None) -> tuple[str | None, int]:
    """The redacted request body; with attached content Playwright keeps it in the zip (``_file``)."""
    post = request.get("postData") or {}
    text = post.get("text")
    if not text and archive is not None and post.get("_file"):
        try:
            text = archive.read(post["_file"]).decode("utf-8", "replace")
        except KeyError:
            text = None
    if not text:
        return None, 0
    mime = post.get("mimeType") or "application/octet-stream"
    clean = scrub(redact_body(text, mime), secrets) or ""
    return put_blob(clean.encode(), mime), len(text.encode())
