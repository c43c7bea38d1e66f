"""The archive of recorded traffic and the matcher that answers a browser's requests from it.

Pure: no browser, no store. ``router.py`` feeds it Playwright requests, ``run.py`` builds it
from the ``requests`` table and its body blobs.

Matching rules, tried in this order (the first rule with a candidate answers):

1. **exact** — same method, same URL string, same request body bytes (both absent is equal).
2. **fuzzy** — same method, scheme, host, port and path; the same query parameters and body
   fields once *volatile* ones are dropped, compared order-insensitively. A recorded value
   ``[REDACTED]`` (a secret the recorder removed) matches any value. Form bodies
   (``application/x-www-form-urlencoded``) and JSON bodies are compared field by field (JSON
   flattened to ``a.b[0].c`` paths); other bodies byte for byte. A recorded request whose body
   was not captured matches any body.
3. **nearest** — same method, scheme, host, port and path: the candidate sharing the most
   (name, value) pairs of stable query parameters and body fields wins; ties go to the one
   with the fewest differing pairs, then to recorded order.
4. **unmatched** — nothing on that method and path: the caller answers with an error.

Recorded requests that never got a response (status 0, or -1 in a HAR: a host that did not
resolve, a connection refused, a request the page aborted) are kept apart: a request on a path
no answered request has is matched to them, and the router fails it as it failed when recorded
(a web font from a host the recording could not reach fails again, rather than counting as a
request outside the archive). They never shadow an answered request: Playwright logs a
redirected navigation of a routed context with status 0 too.

A parameter or body field is *volatile* (a cache-buster, after mitmproxy's ignore-params and
pywb / wabac.js fuzzy rules) when its lowercased name is one of ``_ t ts timestamp cb cachebust
cachebuster rand random nocache nonce``, contains ``cache``, or starts with ``utm_``; or when its
value looks like a clock reading or ``Math.random()``: 10 digits that are a Unix time in seconds
between 2000 and 2100, 13 digits that are one in milliseconds, or ``0.`` followed by 6+ digits.

Recorded redirects are not fulfilled as 3xx responses: Chromium fetches the target of a
fulfilled redirect from the network without routing it (measured with Playwright 1.65). The
router follows a redirect chain inside the archive instead (see :func:`redirect_target`): a
subresource gets the chain's final response, a navigation a page that replaces itself by the
chain's final URL (whose request is routed in turn; :meth:`Matcher.peek` finds where the chain
ends without serving that last response early).

Repeated requests are answered first in, first out, as in mitmproxy's server replay: each
rule takes the earliest recorded candidate not served yet; when all of a rule's candidates have
been served, the last one is served again (a page may ask more often than it did when
recorded, e.g. because routing turns off the HTTP cache). A candidate whose body the recording
could not keep (a poll of a page that went into the back-forward cache while its answer came, a
fetch whose page navigated away before the recorder read the body) still takes its own place in
that order, with its own timing, but is answered with the body of the nearest candidate that kept
one (the next, else the previous; where a request matched it alone, exactly, of its own repeats):
the page that reads it gets a body, and the exchanges after it keep theirs. Passing it over
instead would hand its turn's request the *next* recorded answer, whose moment is an observation
later: a paced replay then holds it for that observation (``mmina.replayer.turns``), and the page
is observed still waiting for it.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from urllib.parse import parse_qsl, urljoin, urlsplit

from mmina.recorder.har import BODY_HEADER, CHUNKS_HEADER, MISSING, MMINA_HEADERS
from mmina.redaction.redact import REDACTED

VOLATILE_NAMES = frozenset(
    {"_", "t", "ts", "timestamp", "cb", "cachebust", "cachebuster", "rand", "random", "nocache", "nonce"}
)
EPOCH_S = (946_684_800, 4_102_444_800)
"""2000-01-01 and 2100-01-01 in Unix seconds: digits in this range look like a clock reading."""
_RANDOM_VALUE = re.compile(r"^0\.\d{6,}$")
_FORM_BODY = re.compile(r"^[^=&\s]+=[^&\s]*(&[^=&\s]+=[^&\s]*)*$")
DROPPED_HEADERS = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)
"""Bodies are stored decoded and the browser frames the fulfilled body itself."""


Pairs = tuple[tuple[str, str], ...]


class MatchKind(str, Enum):
    EXACT = "exact"
    FUZZY = "fuzzy"
    NEAREST = "nearest"
    UNMATCHED = "unmatched"


@dataclass(frozen=True)
class Exchange:
    """One recorded request with its response, as the archive keeps it."""

    order: int
    method: str
    url: str
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    request_body: bytes | None = None
    request_type: str = ""
    redirect_url: str = ""
    mime_type: str = ""
    episode_id: str = ""
    redacted_body: bool = False
    """Redaction changed the body: the browser received another one (a fidelity defect)."""
    started_ms: float | None = None
    """When the request started (wall-clock milliseconds): a socket's messages are timed from it."""
    time_ms: float = 0.0
    """How long the exchange took when recorded (a long-poll: how long the server held it)."""
    seq: int | None = None
    """The recorded request's ``requests.seq`` in its episode (``episode_id``)."""
    body_of: int | None = None
    """The recording lost this exchange's body: the order of the repeat whose response answers it
    (see :meth:`Matcher._with_body`)."""
    cache_hit: bool = False
    """It was a hit of the recording's browser cache (a page gone back to took its fonts from
    memory: no body reaches a capture), answered by the same resource (its URL, status and
    ``Content-Length``): nothing was lost (see :func:`_same_resource`)."""

    @property
    def chunks(self) -> str:
        """How the body arrived when recorded (``size@ms,...``; see ``mmina.recorder.har``), or ""."""
        return header_value(({"name": n, "value": v} for n, v in self.headers), CHUNKS_HEADER)

    @property
    def body_missing(self) -> bool:
        """The recording had a body for this response but could not keep it."""
        return header_value(({"name": n, "value": v} for n, v in self.headers), BODY_HEADER) == MISSING


@dataclass(frozen=True)
class Match:
    kind: MatchKind
    exchange: Exchange | None = None


@dataclass(frozen=True)
class Reply:
    """What the browser is given: status, headers and body (fulfilled as they are)."""

    status: int
    headers: dict[str, str]
    body: bytes
    recorded_s: float = 0.0
    """How long the recorded exchange took (a paced replay answers a fetch/XHR no sooner)."""
    arrived_at: float | None = None
    """When the recorded response arrived (wall-clock seconds; its headers, for a body that came
    in chunks): a paced replay keeps its order with the observations (``mmina.replayer.turns``)."""
    asked_at: float | None = None
    """When the recorded request was sent (wall-clock seconds): with ``arrived_at``, how many
    observations the recorded exchange spanned (``Turns.answer_slot``)."""
    landed_at: float | None = None
    """When the recorded response reached the page (wall-clock seconds; its headers, for a body
    that came in chunks), whatever its kind: a replay on the timeline answers no later than this
    where the page asked late (``ArchiveRouter._on_timeline``)."""


@dataclass(frozen=True)
class Shape:
    """A request reduced to what fuzzy matching compares."""

    method: str
    endpoint: str
    query: Pairs
    fields: Pairs | None
    body: bytes | None


def is_volatile(name: str, value: str) -> bool:
    """Cache-busters and clock/random readings: they differ on every load, so never compared
    (a bare clock reading too: JupyterLab asks ``/api/sessions?1796552964508``)."""
    lowered = name.lower()
    if lowered in VOLATILE_NAMES or "cache" in lowered or lowered.startswith("utm_"):
        return True
    return (
        _looks_like_clock(value)
        or bool(_RANDOM_VALUE.match(value))
        or (not value and _looks_like_clock(name))
    )


def _looks_like_clock(value: str) -> bool:
    if not value.isdigit() or len(value) not in (10, 13):
        return False
    seconds = int(value) // 1000 if len(value) == 13 else int(value)
    return EPOCH_S[0] <= seconds < EPOCH_S[1]


def stable(pairs: Iterable[tuple[str, str]]) -> Pairs:
    """The non-volatile pairs, sorted so order does not matter."""
    return tuple(sorted((n, v) for n, v in pairs if not is_volatile(n, v)))


def body_fields(body: bytes | None, content_type: str) -> Pairs | None:
    """Form or JSON body fields (stable, sorted); None for an absent or opaque body."""
    if not body:
        return None
    text = body.decode("utf-8", "replace")
    kind = content_type.lower()
    if "json" in kind or (not kind and text.lstrip()[:1] in ("{", "[")):
        try:
            return stable(_flatten(json.loads(text)))
        except ValueError:
            return None
    if "x-www-form-urlencoded" in kind or (not kind and _FORM_BODY.match(text)):
        return stable(parse_qsl(text, keep_blank_values=True))
    return None


def _flatten(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """JSON as (path, scalar) pairs: ``{"a": [{"b": 1}]}`` → ``[("a[0].b", "1")]``."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value if isinstance(value, str) else json.dumps(value))]


def shape(method: str, url: str, body: bytes | None, content_type: str = "") -> Shape:
    parts = urlsplit(url)
    endpoint = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path or '/'}"
    query = stable(parse_qsl(parts.query, keep_blank_values=True))
    return Shape(method.upper(), endpoint, query, body_fields(body, content_type), body or None)


def same_page(recorded: str, replayed: str) -> bool:
    """The same page, up to query values that differ on every load (a ``window.open`` with
    ``Date.now()`` in its URL replays at another time); the fragment must be equal (a
    viewer such as kiwix's routes by it)."""
    if recorded == replayed:
        return True
    if urlsplit(recorded).fragment != urlsplit(replayed).fragment:
        return False
    return shape("GET", recorded, None) == shape("GET", replayed, None)


def pairs_match(recorded: Pairs, live: Pairs) -> bool:
    """Equal as multisets, where a recorded ``[REDACTED]`` value stands for any value of its name."""
    left, right = Counter(recorded), Counter(live)
    common = left & right
    left, right = left - common, right - common
    if sum(left.values()) != sum(right.values()):
        return False
    wildcards = Counter(n for (n, v), c in left.items() if v == REDACTED for _ in range(c))
    names = Counter(n for (n, _v), c in right.items() for _ in range(c))
    return sum(left.values()) == sum(wildcards.values()) and wildcards == names


def bodies_match(recorded: Shape, live: Shape) -> bool:
    """Field-wise for form/JSON bodies; a recorded body that was not captured matches anything."""
    if recorded.body is None:
        return True
    if recorded.fields is not None and live.fields is not None:
        return pairs_match(recorded.fields, live.fields)
    return recorded.body == live.body


def _shared(left: Sequence[str], right: Sequence[str]) -> int:
    """How many leading items two sequences have in common."""
    return next((i for i, (a, b) in enumerate(zip(left, right)) if a != b), min(len(left), len(right)))


def common_pairs(recorded: Shape, live: Shape) -> tuple[int, int]:
    """(pairs in common, pairs that differ) over query and body fields: the nearest-match score."""
    left = Counter(recorded.query) + Counter(recorded.fields or ())
    right = Counter(live.query) + Counter(live.fields or ())
    common = sum((left & right).values())
    return common, sum(left.values()) + sum(right.values()) - 2 * common


class Archive:
    """Recorded exchanges indexed for matching (immutable; a :class:`Matcher` holds the state)."""

    def __init__(self, exchanges: Iterable[Exchange]) -> None:
        exchanges = sorted(exchanges, key=lambda e: e.order)
        self.exchanges = tuple(e for e in exchanges if e.status > 0)
        self.failures: dict[tuple[str, str], list[Exchange]] = {}
        """Requests that got no response when recorded, by method and endpoint (see the module)."""
        for failed in (e for e in exchanges if e.status <= 0):
            self.failures.setdefault(
                (failed.method.upper(), shape(failed.method, failed.url, None).endpoint), []
            ).append(failed)
        self.shapes = tuple(shape(e.method, e.url, e.request_body, e.request_type) for e in self.exchanges)
        self.bodiless = frozenset(i for i, e in enumerate(self.exchanges) if e.body_missing)
        """Exchanges whose body the recording could not keep (see :meth:`Matcher._with_body`)."""
        self.exact: dict[tuple[str, str, bytes | None], list[int]] = {}
        self.by_endpoint: dict[tuple[str, str], list[int]] = {}
        for index, (exchange, form) in enumerate(zip(self.exchanges, self.shapes)):
            key = (exchange.method.upper(), exchange.url, exchange.request_body or None)
            self.exact.setdefault(key, []).append(index)
            self.by_endpoint.setdefault((form.method, form.endpoint), []).append(index)

    def __len__(self) -> int:
        return len(self.exchanges)

    def kin(self, method: str, url: str) -> Exchange | None:
        """The recorded exchange nearest to a request the archive cannot answer: the same scheme
        and host, the most leading path segments in common (at least one), then the same method,
        then as many segments (``/api/sessions/{id}``), the earliest recorded of equals; None
        when there is none."""
        live = urlsplit(url)
        wanted = [part for part in live.path.split("/") if part]
        best: tuple[int, bool, bool] = (0, False, False)
        found: Exchange | None = None
        for exchange in self.exchanges:
            parts = urlsplit(exchange.url)
            if (parts.scheme, parts.netloc) != (live.scheme, live.netloc):
                continue
            segments = [part for part in parts.path.split("/") if part]
            score = (
                _shared(wanted, segments),
                exchange.method.upper() == method.upper(),
                len(segments) == len(wanted),
            )
            if score[0] and score > best:
                best, found = score, exchange
        return found

    def revalidated(self, exchange: Exchange) -> Exchange:
        """For a recorded ``304 Not Modified``, the full response it confirmed: the latest
        answered exchange of the same method and URL recorded before it, as a 200 (a replay's
        browser may not hold the cached copy the 304 referred to: routed responses are not
        cached alike). Any other exchange is itself."""
        if exchange.status != 304:
            return exchange
        earlier = [
            e
            for e in self.exchanges
            if e.order < exchange.order
            and e.method == exchange.method
            and e.url == exchange.url
            and 200 <= e.status < 300
            and e.body
        ]
        return replace(earlier[-1], status=200) if earlier else exchange


@dataclass
class Matcher:
    """Answers requests from one archive, first in first out; counts what it could not answer."""

    archive: Archive
    served: set[int] = field(default_factory=set)
    counts: Counter = field(default_factory=Counter)

    def match(self, method: str, url: str, body: bytes | None = None, content_type: str = "") -> Match:
        result = self._match(method, url, body or None, content_type, consume=True)
        self.counts[result.kind] += 1
        return result

    def peek(self, method: str, url: str, body: bytes | None = None, content_type: str = "") -> Match:
        """What :meth:`match` would answer now, without serving it (nothing counted or consumed)."""
        return self._match(method, url, body or None, content_type, consume=False)

    def _match(self, method: str, url: str, body: bytes | None, content_type: str, consume: bool) -> Match:
        take = self._take if consume else self._next
        exact = self.archive.exact.get((method.upper(), url, body))
        if exact and not all(i in self.served for i in exact):
            return Match(MatchKind.EXACT, take(exact))
        live = shape(method, url, body, content_type)
        candidates = self.archive.by_endpoint.get((live.method, live.endpoint), [])
        fuzzy = [i for i in candidates if self._fuzzy_equal(self.archive.shapes[i], live)]
        if exact:  # every one served: a repeat of the request not served yet comes first
            fresh = [i for i in fuzzy if i not in self.served]
            return Match(MatchKind.FUZZY, take(fresh)) if fresh else Match(MatchKind.EXACT, take(exact))
        if fuzzy:
            return Match(MatchKind.FUZZY, take(fuzzy))
        if candidates:
            return Match(MatchKind.NEAREST, take(self._nearest(candidates, live)))
        failures = self.archive.failures.get((live.method, live.endpoint))
        if failures:  # failed when recorded: fails again (see the module)
            same = next((f for f in failures if f.url == url), None)
            return Match(MatchKind.EXACT if same else MatchKind.FUZZY, same or failures[0])
        return Match(MatchKind.UNMATCHED)

    @staticmethod
    def _fuzzy_equal(recorded: Shape, live: Shape) -> bool:
        return pairs_match(recorded.query, live.query) and bodies_match(recorded, live)

    def _nearest(self, candidates: Sequence[int], live: Shape) -> list[int]:
        """The candidates with the best score (most pairs in common, then fewest differing)."""
        scores = {i: common_pairs(self.archive.shapes[i], live) for i in candidates}
        best = max((common, -differing) for common, differing in scores.values())
        return [i for i in candidates if (scores[i][0], -scores[i][1]) == best]

    def _take(self, candidates: Sequence[int]) -> Exchange:
        """The earliest candidate not served yet, else the last one again."""
        index = self._first_unserved(candidates)
        self.served.add(index)
        return self._with_body(index, candidates)

    def _next(self, candidates: Sequence[int]) -> Exchange:
        return self._with_body(self._first_unserved(candidates), candidates)

    def _first_unserved(self, candidates: Sequence[int]) -> int:
        """The earliest candidate not served yet, else the last one."""
        return next((i for i in candidates if i not in self.served), candidates[-1])

    def _with_body(self, index: int, candidates: Sequence[int]) -> Exchange:
        """The exchange at ``index``; if the recording lost its body, with the response of the
        nearest candidate that kept one (the next, else the previous) and its own request and
        timing (see the module). Without such a candidate, the exchange as it is."""
        exchange = self.archive.exchanges[index]
        if index not in self.archive.bodiless:
            return exchange
        kept = self._kept(candidates) or self._kept(self._repeats(index))
        if not kept:
            return exchange
        donor = self.archive.exchanges[next((i for i in kept if i > index), kept[-1])]
        return replace(
            exchange,
            status=donor.status,
            headers=donor.headers,
            body=donor.body,
            mime_type=donor.mime_type,
            redirect_url=donor.redirect_url,
            redacted_body=donor.redacted_body,
            body_of=donor.order,
            cache_hit=_same_resource(exchange, donor),
        )

    def _kept(self, candidates: Sequence[int]) -> list[int]:
        return [i for i in candidates if i not in self.archive.bodiless]

    def _repeats(self, index: int) -> list[int]:
        """The recorded exchanges that repeat the one at ``index`` (its endpoint, its query and body
        fuzzily equal): where a request matched it exactly (a page clock that reads the recorded
        time to the millisecond asks with the recorded ``_=<now>``), its only candidate, the lost
        body is still answered from a repeat that kept one."""
        lost = self.archive.shapes[index]
        group = self.archive.by_endpoint.get((lost.method, lost.endpoint), [])
        return [i for i in group if self._fuzzy_equal(self.archive.shapes[i], lost)]


CACHE_HIT_MS = 3.0
"""A recorded exchange this quick had no server behind it: the browser's memory cache answered."""


def _same_resource(lost: Exchange, donor: Exchange) -> bool:
    """Whether ``lost`` was a cache hit (``CACHE_HIT_MS``) that ``donor`` answers with the same
    resource: the same URL and status, a body as long as ``lost``'s headers said (``Exchange.cache_hit``)."""

    def length(exchange: Exchange) -> str:
        return header_value(({"name": n, "value": v} for n, v in exchange.headers), "content-length")

    return (
        0 <= lost.time_ms <= CACHE_HIT_MS
        and lost.url == donor.url
        and lost.status == donor.status
        and length(lost) != ""
        and length(lost) == length(donor)
    )


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 20
"""Chromium's own limit: past it the browser gives up with ``net::ERR_TOO_MANY_REDIRECTS``."""


def redirect_target(exchange: Exchange, request_url: str) -> str | None:
    """Where a recorded redirect points (its Location header, else ``redirect_url``), absolute."""
    if exchange.status not in REDIRECT_STATUSES:
        return None
    location = header_value(({"name": n, "value": v} for n, v in exchange.headers), "location")
    target = location or exchange.redirect_url  # the header keeps a fragment the HAR's redirectURL drops
    return urljoin(request_url, target) if target else None


def redirected_method(status: int, method: str) -> str:
    """The method a browser uses after a redirect (Fetch standard): POST becomes GET on 301/302,
    anything but GET/HEAD becomes GET on 303."""
    if (status in (301, 302) and method == "POST") or (status == 303 and method not in ("GET", "HEAD")):
        return "GET"
    return method


def reply_for(exchange: Exchange) -> Reply:
    """The recorded response: status, headers (minus framing and redacted values, each one
    deliverable: see :func:`header_parts`), body."""
    headers: dict[str, str] = {}
    for name, value in exchange.headers:
        lowered = name.lower()
        if lowered in DROPPED_HEADERS or lowered.startswith(MMINA_HEADERS) or not HEADER_NAME.match(name):
            continue
        joiner = "\n" if lowered == "set-cookie" else ", "
        for part in header_parts(value):
            headers[lowered] = f"{headers[lowered]}{joiner}{part}" if lowered in headers else part
    if exchange.mime_type and "content-type" not in headers:
        headers["content-type"] = exchange.mime_type
    return Reply(exchange.status, headers, exchange.body)


HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""A header name as HTTP defines it (a token): a recorded name that is not one is not served."""
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def header_parts(value: str) -> list[str]:
    """The values one recorded header stands for, each one a browser accepts.

    Chromium hands over a response it served from its cache (a history navigation's document,
    typically) with a repeated header's values joined by a newline (``Link: <a>\\n<b>``), and
    refuses to be answered with a value that holds a line break or a NUL: Playwright's
    ``route.fulfill`` then fails without a word and the request stays pending for good (its
    page never loads). So the value is split at line breaks, NULs dropped, and redacted parts
    (and the empty ones a split leaves) left out."""
    parts = [part.replace("\0", "") for part in LINE_BREAK.split(value)]
    return [part for part in parts if part != REDACTED and (part or len(parts) == 1)]


NOT_ARCHIVED_STATUS = 404


def redirect_loop_reply() -> Reply:
    """The answer to a request whose recorded redirects go on past ``MAX_REDIRECTS`` (a loop): no
    response, so the request fails as it did when recorded (Chromium gave up on it), never a
    404 saying it is not in the archive: it is."""
    return Reply(0, {"x-mmina-replay": "redirect-loop"}, b"")


def unmatched_reply(method: str, url: str, kin: Exchange | None = None) -> Reply:
    """The answer a request outside the archive gets (never the live network): a 404 saying so,
    or — when the recording has a request of the same site and path (``Archive.kin``) — the
    status and content type that one was answered with, and a body in that format that its
    client can read (a JSON error object for a JSON API: a page that parses the answer must not
    turn mmina's own words into its error dialog)."""
    why = f"mmina replay: {method} {url} is not in the archive"
    kind = (reply_for(kin).headers.get("content-type", "") if kin else "") or "text/plain; charset=utf-8"
    status = (
        kin.status if kin and (200 <= kin.status < 300 or 400 <= kin.status < 500) else NOT_ARCHIVED_STATUS
    )
    headers = {"content-type": kind, "x-mmina-replay": "not-archived"}
    return Reply(status, headers, b"" if status in (204, 205, 304) else _readable(why, kind))


def _readable(why: str, kind: str) -> bytes:
    """``why`` in the format ``kind`` names (nothing, for one no text fits in: an image, a font)."""
    lowered = kind.lower()
    if "json" in lowered:
        return json.dumps({"error": "not in the archive", "message": why}).encode()
    if "html" in lowered or "xml" in lowered:
        return f"<!doctype html><title>Not in the archive</title><p>{html.escape(why)}</p>\n".encode()
    if "javascript" in lowered or "ecmascript" in lowered or "css" in lowered:
        return f"/* {why.replace('*/', '* /')} */\n".encode()
    if lowered.startswith("text/"):
        return f"{why}\n".encode()
    return b""


def exchanges_from_rows(rows: Iterable[dict], blobs: dict[str, bytes], start: int = 0) -> list[Exchange]:
    """``requests`` rows (in recorded order) and their body blobs as archive exchanges."""
    return [
        Exchange(
            order=start + offset,
            method=row["method"],
            url=row["url"],
            status=row["status"],
            headers=tuple((h["name"], h["value"]) for h in row.get("response_headers") or ()),
            body=blobs.get(row["response_body"], b"") if row.get("response_body") else b"",
            request_body=blobs.get(row["request_body"]) if row.get("request_body") else None,
            request_type=header_value(row.get("request_headers") or (), "content-type"),
            redirect_url=row.get("redirect_url") or "",
            mime_type=row.get("mime_type") or "",
            episode_id=row.get("episode_id") or "",
            seq=row.get("seq"),
            redacted_body=body_redacted(row),
            started_ms=row["started_at"].timestamp() * 1e3 if row.get("started_at") else None,
            time_ms=float(row.get("time_ms") or 0.0),
        )
        for offset, row in enumerate(rows)
    ]


def body_redacted(row: dict) -> bool:
    """Whether a ``requests`` row's stored body differs from the one the browser received
    (known from schema version 7 on: ``received_body_sha256``)."""
    received = row.get("received_body_sha256")
    return received is not None and received != row.get("response_body")


def header_value(headers: Iterable[dict], name: str) -> str:
    return next((h["value"] for h in headers if h["name"].lower() == name), "")
