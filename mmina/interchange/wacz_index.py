"""The CDXJ index of a WACZ, built as its WARC is written, keyed as the players look URLs up.

One line per ``response`` record of an http(s) URL (a socket's handshake left out): the SURT
key, a 14-digit time and JSON (``url``, ``mime``, ``status``, ``digest``, ``offset``,
``length``, ``filename``). A request other than GET is looked up by its URL with its body as a
query (``__wb_method=POST&...``), so its line adds ``method`` and ``requestBody``, made from the
body as warcio.js's ``postToGetUrl`` makes it (what ReplayWeb.page's wabac.js computes for the
page's request): a form as it is, JSON flattened into its leaves' ``key=value`` (a repeated key
as ``key.2_``), a multipart form's fields, anything else ``__wb_post_data=`` in base64.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import quote_plus, urlsplit

from mmina.interchange.warc_records import Written, parse_http

INDEXED = ("response", "resource")
"""Record types a page's resources are looked up among (a WACZ's WARC has no revisits)."""
_WWW = re.compile(r"^(https?://)www\d*\.", re.IGNORECASE)
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_RESERVED = frozenset(";/?:@&=+$,#")
_MULTIPART_FIELD = re.compile(r'name="([^"]+)"\r\n\r\n(.*)', re.IGNORECASE | re.MULTILINE)


class CdxjIndex:
    """CDXJ lines for the records a WARC writer writes (``WarcWriter.on_record``)."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.lines: list[str] = []
        self.requests: dict[str, tuple[str, str]] = {}
        """A request record's id → its method and body as a query (non-GET requests only)."""

    def __call__(self, record: Written) -> None:
        uri = record.headers.get("warc-target-uri", "")
        if not uri.lower().startswith(("http://", "https://")):
            return
        if record.kind == "request":
            self._request(record)
        elif record.kind in INDEXED and not _upgrade(record):
            self.lines.append(self._line(record, uri))

    def _request(self, record: Written) -> None:
        message = parse_http(record.block)
        method = message.start.split(" ", 1)[0].upper()
        if method != "GET":
            self.requests[record.headers["warc-record-id"]] = (
                method,
                post_query(message.body, message.header("content-type")),
            )

    def _line(self, record: Written, uri: str) -> str:
        message = parse_http(record.block) if record.kind == "response" else None
        kind = message.header("content-type") if message else record.headers.get("content-type", "")
        entry: dict[str, Any] = {
            "url": uri,
            "mime": kind.split(";")[0].strip(),
            **({"status": str(message.status)} if message else {}),
            "digest": record.headers.get("warc-payload-digest")
            or record.headers.get("warc-block-digest", ""),
            "length": str(record.length),
            "offset": str(record.offset),
            "filename": self.filename,
        }
        key = uri
        request = self.requests.pop(record.headers.get("warc-concurrent-to", ""), None)
        if request is not None:
            entry.update(method=request[0], requestBody=request[1])
            key = with_request_query(uri, decode_uri(request[1]), request[0])
        return (
            f"{surt(key)} {_timestamp(record.headers['warc-date'])} {json.dumps(entry, ensure_ascii=False)}"
        )

    def text(self) -> bytes:
        return "".join(line + "\n" for line in sorted(self.lines)).encode()


def _upgrade(record: Written) -> bool:
    """A socket's handshake (its frames are at the ``ws(s)`` URL, which a player does not fetch)."""
    return record.kind == "response" and record.block.startswith(b"HTTP/1.1 101 ")


def surt(url: str) -> str:
    """The key pywb and warcio.js index a URL by: lower case, no ``www``, host reversed,
    port, ``)``, path, and the query's parameters sorted."""
    parts = urlsplit(_WWW.sub(r"\1", url).lower())
    host = ",".join(reversed((parts.hostname or "").split(".")))
    port = f":{parts.port}" if parts.port else ""
    query = "?" + "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    return f"{host}{port}){parts.path or '/'}{query}"


def with_request_query(url: str, query: str, method: str) -> str:
    """The URL a non-GET request is looked up by (warcio.js's ``appendRequestQuery``)."""
    return f"{url}{'&' if url.find('?') > 0 else '?'}__wb_method={method}&{query}"


def decode_uri(text: str) -> str:
    """JavaScript's ``decodeURI``: escapes decoded but those of reserved characters; "" for a
    malformed one (warcio.js keys a request so)."""

    def one(found: re.Match[str]) -> str:
        decoded = bytes(int(h, 16) for h in found[0][1:].split("%")).decode("utf-8")
        return (
            "".join(found[0][3 * i : 3 * i + 3] if c in _RESERVED else c for i, c in enumerate(decoded))
            if decoded.isascii()
            else decoded
        )

    try:
        return _ESCAPES.sub(one, text)
    except (UnicodeDecodeError, ValueError):
        return ""


def post_query(body: bytes, content_type: str) -> str:
    """A request body as a query, as warcio.js's ``postToGetUrl`` makes it (see the module)."""
    kind = content_type.split(";")[0].strip().lower()
    text = body.decode("utf-8", "replace")
    if kind == "application/x-www-form-urlencoded":
        return text
    if kind == "application/json":
        return _form(_Leaves().walk(_parsed(text)))
    if kind == "text/plain":
        try:
            return _form(_Leaves().walk(json.loads(text)))
        except ValueError:
            return _binary(body)
    if kind == "multipart/form-data":
        return _form(_multipart(text, content_type))
    return _binary(body)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return {}


class _Leaves:
    """A JSON document's leaves as (key, text), as warcio.js's ``jsonToQueryParams`` lists them:
    each under the name of the object member holding it (array items share their array's
    name), empty texts left out, a name met again numbered ``name.2_``, ``name.3_``..."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.taken: set[str] = set()
        self.dupes: dict[str, int] = {}

    def walk(self, value: Any, key: str = "") -> list[tuple[str, str]]:
        if isinstance(value, dict):
            for name, item in value.items():
                self.walk(item, name)
        elif isinstance(value, list):
            for item in value:
                self.walk(item, key)
        text = "null" if value is None else "" if isinstance(value, (dict, list)) else _js_text(value)
        if text:
            name = self._name(key)
            self.taken.add(name)
            self.pairs.append((name, text))
        return self.pairs

    def _name(self, key: str) -> str:
        if key not in self.taken:
            return key
        self.dupes[key] = self.dupes.get(key, 1) + 1
        return f"{key}.{self.dupes[key]}_"


def _js_text(value: Any) -> str:
    """A JSON scalar as JavaScript's ``toString`` writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _multipart(text: str, content_type: str) -> list[tuple[str, str]]:
    boundary = content_type.partition("boundary=")[2]
    if not boundary:
        return []
    fields = dict[str, str]()
    for part in re.split(f"-*{re.escape(boundary)}-*", text, flags=re.IGNORECASE):
        found = _MULTIPART_FIELD.search(part.strip())
        if found:
            fields[found[1]] = found[2]
    return list(fields.items())


def _form(pairs: list[tuple[str, str]]) -> str:
    """``URLSearchParams.toString()``: application/x-www-form-urlencoded (``*`` kept, ``~`` encoded)."""
    return "&".join(f"{_encoded(k)}={_encoded(v)}" for k, v in pairs)


def _encoded(text: str) -> str:
    return quote_plus(text, safe="*").replace("~", "%7E")


def _binary(body: bytes) -> str:
    return "__wb_post_data=" + base64.b64encode(body).decode()


def _timestamp(warc_date: str) -> str:
    return "".join(c for c in warc_date if c.isdigit())[:14]
