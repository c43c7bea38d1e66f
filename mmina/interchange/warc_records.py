"""WARC records, written and read (ISO 28500, WARC 1.1), and the HTTP messages inside them.

Written one gzip member per record (what pywb, warcio and Browsertrix write: a reader can seek
to any record). Read from a file gzipped per record, gzipped whole or plain, one record at a
time. Digests are ``sha256:`` in base32, the labelled form WARC 1.1 and warcio use.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, BinaryIO

from mmina.interchange.stored import InterchangeError

VERSION = b"WARC/1.1"
READABLE_VERSIONS = (b"WARC/1.0", b"WARC/1.1", b"WARC/0.18", b"WARC/0.17")
CRLF = b"\r\n"
RECORD_NAMESPACE = uuid.UUID("6d6d696e-612d-7761-7263-2d7265636f72")
"""uuid5 namespace of mmina's record ids: the same export gives the same ids."""
Headers = list[tuple[str, str]]


def record_id(*parts: str) -> str:
    """A deterministic ``<urn:uuid:...>`` for the record named by ``parts``."""
    return f"<urn:uuid:{uuid.uuid5(RECORD_NAMESPACE, '/'.join(parts))}>"


def digest(data: bytes) -> str:
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode()


def warc_date(moment: datetime) -> str:
    """WARC 1.1's date: UTC, ISO 8601, microseconds kept (a naive time is taken as UTC)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Written:
    """A record as written: what an index of the file needs (its place, its fields, its block)."""

    kind: str
    headers: dict[str, str]
    """Its WARC fields (names lowercased; a repeated field's last value)."""
    block: bytes
    offset: int
    length: int
    """Its gzip member's place in the file."""


class WarcWriter:
    """Writes records to a binary sink, each its own gzip member; ``on_record`` hears of each
    (an index being built)."""

    def __init__(self, sink: BinaryIO, on_record: Callable[[Written], None] | None = None) -> None:
        self.sink = sink
        self.records = 0
        self.offset = 0
        self.on_record = on_record

    def write(self, kind: str, rid: str, date: str, headers: Headers, block: bytes) -> None:
        """One record of ``kind`` with its id, date, further headers (a ``WARC-Payload-Digest``
        among them for HTTP records) and block."""
        lines = [
            ("WARC-Type", kind),
            ("WARC-Record-ID", rid),
            ("WARC-Date", date),
            *headers,
            ("WARC-Block-Digest", digest(block)),
            ("Content-Length", str(len(block))),
        ]
        head = VERSION + CRLF + b"".join(f"{n}: {_field(v)}".encode() + CRLF for n, v in lines) + CRLF
        member = gzip.compress(head + block + CRLF + CRLF, compresslevel=6, mtime=0)
        self.sink.write(member)
        if self.on_record is not None:
            self.on_record(Written(kind, {n.lower(): v for n, v in lines}, block, self.offset, len(member)))
        self.offset += len(member)
        self.records += 1


def _field(value: str) -> str:
    """A header value on one line (WARC fields are single-line here)."""
    return " ".join(value.split()) if any(c in value for c in "\r\n") else value


# ---------------------------------------------------------------- HTTP messages


def http_request(method: str, url_path: str, headers: Headers, body: bytes) -> bytes:
    start = f"{method} {url_path} HTTP/1.1".encode()
    return start + CRLF + _header_block(headers) + CRLF + body


def http_response(status: int, headers: Headers, body: bytes) -> bytes:
    start = f"HTTP/1.1 {status} {reason(status)}".encode()
    return start + CRLF + _header_block(headers) + CRLF + body


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _header_block(headers: Headers) -> bytes:
    return b"".join(f"{n}: {_field(v)}".encode("utf-8", "surrogateescape") + CRLF for n, v in headers)


@dataclass(frozen=True)
class HttpMessage:
    """An HTTP message read from a record: start line, headers and the entity as sent."""

    start: str
    headers: Headers
    body: bytes

    @property
    def status(self) -> int:
        parts = self.start.split(" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

    def header(self, name: str) -> str:
        return next((v for n, v in self.headers if n.lower() == name), "")


def parse_http(block: bytes) -> HttpMessage:
    """Start line, headers (continuation lines joined) and entity of an HTTP/1.x message."""
    head, separator, body = block.partition(b"\r\n\r\n")
    if not separator:
        head, separator, body = block.partition(b"\n\n")
    lines = head.decode("iso-8859-1").splitlines()
    if not lines:
        raise InterchangeError("an HTTP record has no start line")
    headers: Headers = []
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and headers:
            headers[-1] = (headers[-1][0], f"{headers[-1][1]} {line.strip()}")
        elif ":" in line:
            name, _colon, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return HttpMessage(lines[0].strip(), headers, body)


def dechunk(data: bytes) -> bytes:
    """A ``Transfer-Encoding: chunked`` entity's content (trailers dropped; a cut-off last chunk
    keeps what arrived). An entity that is not chunked after all is returned as it is: warcio
    and pywb store the payload de-chunked but keep the header."""
    out, position = io.BytesIO(), 0
    while position < len(data):
        end = data.find(b"\r\n", position)
        size_text = data[position:end].split(b";")[0].strip() if end >= 0 else b""
        if not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            return data if position == 0 else out.getvalue()
        size = int(size_text, 16)
        if size == 0:
            break
        out.write(data[end + 2 : end + 2 + size])
        position = end + 2 + size + 2
    return out.getvalue()


def decode_content(data: bytes, encodings: Sequence[str]) -> bytes:
    """The entity with its content codings undone, last applied first (gzip, deflate, and br
    when the ``brotli`` package is installed); raises for one that cannot be undone."""
    for coding in reversed(
        [c.strip().lower() for c in encodings if c.strip() and c.strip().lower() != "identity"]
    ):
        data = _decode_one(data, coding)
    return data


def _decode_one(data: bytes, coding: str) -> bytes:
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        if coding == "deflate":
            try:
                return zlib.decompress(data)
            except zlib.error:
                return zlib.decompress(data, -zlib.MAX_WBITS)  # raw deflate, as some servers send it
        if coding == "br":
            return _brotli().decompress(data)
    except (zlib.error, OSError) as exc:
        raise InterchangeError(f"a {coding} body does not decode: {exc}") from None
    raise InterchangeError(f"a body has the content coding {coding!r}, which mmina cannot decode")


def _brotli() -> Any:
    try:
        import brotli  # optional: only br bodies need it
    except ImportError:
        raise InterchangeError("a body is brotli-compressed (br): pip install brotli to import it") from None
    return brotli


# ---------------------------------------------------------------- reading records


@dataclass(frozen=True)
class WarcRecord:
    """One record: its type, its WARC headers (names lowercased) and its block."""

    number: int
    headers: dict[str, str]
    block: bytes

    @property
    def kind(self) -> str:
        return self.headers.get("warc-type", "")

    def get(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    def concurrent(self) -> list[str]:
        """Every ``WARC-Concurrent-To`` record id (the field may repeat)."""
        return self.get("warc-concurrent-to").split()


MAX_HEADER_LINES = 1000
REPEATABLE = frozenset({"warc-concurrent-to"})
"""Fields a record may repeat: their values are kept, space-separated (record ids hold no space)."""


def read_records(path: Path) -> Iterator[WarcRecord]:
    """The records of a WARC file in order (gzipped per record, gzipped whole, or plain)."""
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gzipped else path.open("rb") as stream:
            yield from _records(stream, path)  # type: ignore[arg-type]
    except (OSError, EOFError, zlib.error) as exc:
        raise InterchangeError(f"{path} cannot be read as WARC: {exc}") from None


def _records(stream: BinaryIO, path: Path) -> Iterator[WarcRecord]:
    number = 0
    while True:
        line = stream.readline()
        while line in (b"\r\n", b"\n"):
            line = stream.readline()
        if not line:
            return
        number += 1
        if line.strip() not in READABLE_VERSIONS:
            where = "it starts with" if number == 1 else f"record {number} starts with"
            raise InterchangeError(f"{path} is not a WARC file: {where} {line[:40]!r}")
        headers = _warc_headers(stream, path, number)
        yield WarcRecord(number, headers, _block(stream, headers, path, number))


def _warc_headers(stream: BinaryIO, path: Path, number: int) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        line = stream.readline()
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, colon, value = line.decode("utf-8", "replace").partition(":")
        key = name.strip().lower()
        if colon and key in REPEATABLE and key in headers:
            headers[key] = f"{headers[key]} {value.strip()}"
        elif colon:
            headers[key] = value.strip()
    raise InterchangeError(f"{path}: record {number} has more than {MAX_HEADER_LINES} header lines")


def _block(stream: BinaryIO, headers: dict[str, str], path: Path, number: int) -> bytes:
    try:
        length = int(headers.get("content-length", ""))
    except ValueError:
        raise InterchangeError(f"{path}: record {number} has no valid Content-Length") from None
    block = stream.read(length)
    if len(block) < length:
        raise InterchangeError(f"{path}: record {number} is cut off ({len(block)} of {length} bytes)")
    return block
