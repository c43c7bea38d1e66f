"""Pass real traffic through the redactor as the recorder does, with and without planted credentials.

The corpus is ``tests/realweb/traffic_corpus.py``'s: URLs, request and response bodies and socket
messages of real applications, and JSON shipped in packages. Two passes:

* **as it is**: each source's items through one redactor, as one episode's traffic is (it learns
  from every item, then redacts each: a value learned in one place is scrubbed from the others),
  after a realistic episode's secrets were learned (``redaction_check.episode_redactor``). Every
  value redaction replaced is listed with the name it sat under (:class:`Replaced`); one that is
  not a credential (:data:`CREDENTIAL_NAMES_SEEN` says which names in the corpus hold real ones)
  is a **changed non-secret**.
* **planted**: into every structured place of each item — a URL's query, a form body, every
  JSON object of a JSON, NDJSON or event-stream body and of a socket message — credentials are
  planted under credentials' names with values that do not look like one (18 letters and digits)
  and under ambiguous names (``key``, ``sid``, ``session_id``...) with values that do; each must
  be gone after redaction, and nothing else may change but what the first pass changed.

Shared by ``tests/test_redaction_traffic.py`` and ``bench --only redaction``.
"""

from __future__ import annotations

import json
import random
import re
import string
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import groupby

from mmina.redaction.redact import Redactor
from mmina.redaction.secret_names import connection_kind
from mmina.redaction.secret_rules import PACKET_SEPARATOR, SOCKET_TYPE, is_packets, json_start
from mmina.redaction.secret_shapes import KNOWN_KEYS, credential_shaped
from tests.realweb.redaction_check import TYPED, episode_redactor
from tests.realweb.traffic_corpus import REQUEST, SOCKET, URL, Item

MARKERS = re.compile(r"\[REDACTED\]|%5BREDACTED%5D")
CREDENTIAL_PLANTS = (
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "password",
    "api_key",
    "apiKey",
    "private_key",
    "privateKey",
    "auth_token",
    "authToken",
    "session_token",
    "sessionToken",
    "csrf_token",
    "csrfmiddlewaretoken",
    "X-CSRF-Token",
    "secret",
    "clientSecret",
    "passwd",
    "accessToken",
    "jwt",
)
"""Credentials' names: a value under one is a secret by place alone, whatever it looks like."""
AMBIGUOUS_PLANTS = (
    "key",
    "session",
    "sid",
    "sig",
    "signature",
    "pin",
    "auth",
    "session_id",
    "sessionId",
    "connect.sid",
    "access_key",
)
"""Ambiguous names: a value under one is a secret when it looks like a credential — but a
session's id in a WebSocket's own URL or messages names the connection (``connection_kind``)."""
CONNECTION_PLANTS = tuple(name for name in AMBIGUOUS_PLANTS if connection_kind(name))
CREDENTIAL_NAMES_SEEN = frozenset(
    {
        "__form_token",
        "trac_form_token",
        "csrftoken",
        "ds_csrftoken",
        "_xsrf",
        "xsrf",
        "secretaccesskey",
        "sessiontoken",
        "password",
        "newpassword",
        "oldpassword",
        "masteruserpassword",
        "token",
        "access_token",
        "authtoken",
        "secret",
        "client_secret",
        "refresh_token",
        "id_token",
        "apikey",
        "api_key",
        "csrf",
        "session_hash",
        "signature",
        "webidentitytoken",
        "samlassertion",
        "tokencode",
        "localconsolepassword",
        "activationkey",
        "secrettoauthenticateinitiator",
        "secrettoauthenticatetarget",
    }
)
"""Names (lower case) that hold real credentials in the corpus — a Trac form's token, Datasette's
CSRF token, the example credentials of AWS API examples (``SecretAccessKey``, ``Password``) —
reviewed by hand: a value redaction takes from under another name is a changed non-secret."""
TOKEN_NAMED_DATA = frozenset(
    {
        "purchasetoken",
        "clientrequesttoken",
        "lifecycleactiontoken",
        "verificationtoken",
        "granttoken",
        "clienttoken",
        "subjectfromwebidentitytoken",
    }
)
"""Names (lower case) in AWS's API examples of values that are not credentials but that a name
alone cannot tell from one (an idempotency token, a purchase token, a public verification
record): the price of taking a value under a ``…Token`` name by place alone. The package
corpus's changed non-secrets must all sit under one of these (the applications' traffic: none)."""
_NAME_BEFORE = re.compile(r"""["']?([A-Za-z0-9_.\-\[\]]{1,64})["']?\s*(?:=|:)\s*["']?$""")


@dataclass(frozen=True)
class Replaced:
    """One value redaction replaced: where, under which name, and what it was."""

    source: str
    place: str
    name: str
    value: str
    credential: bool = False
    """Whether it is a credential: it sits under a name of :data:`CREDENTIAL_NAMES_SEEN` here or
    elsewhere in its source (a Trac form's token is also in the page's script and hidden input)."""


@dataclass
class TrafficResult:
    items: int = 0
    bytes: int = 0
    sources: set[str] = field(default_factory=set)
    replaced: list[Replaced] = field(default_factory=list)
    planted: int = 0
    found: int = 0
    missed: list[tuple[str, str, str]] = field(default_factory=list)
    """Planted credentials left in clear: (source, place, name)."""
    changed_around: list[tuple[str, str]] = field(default_factory=list)
    """Planted items where something but the planted values and the first pass's changes moved: (source, place)."""
    cpu_s: float = 0.0

    @property
    def changed_non_secrets(self) -> list[Replaced]:
        return [r for r in self.replaced if not r.credential]


def check_traffic(items: Iterable[Item], seed: int = 56) -> TrafficResult:
    """Both passes over ``items`` (see the module), grouped by source in the order given."""
    result = TrafficResult()
    draw = random.Random(seed)
    started = time.process_time()
    for source, group in groupby(items, key=lambda i: i.source):
        batch = list(group)
        result.items += len(batch)
        result.bytes += sum(len(i.text.encode("utf-8", "surrogatepass")) for i in batch)
        result.sources.add(source)
        as_is = _as_is(batch)
        result.replaced += judged(
            [r for item, redacted in zip(batch, as_is) for r in replaced_values(item, redacted)]
        )
        for item, redacted in zip(batch, as_is):
            _planted(item, redacted, draw, result)
    result.cpu_s = time.process_time() - started
    return result


# ---------------------------------------------------------------- as the recorder does it


def _as_is(items: list[Item]) -> list[str]:
    """One episode's redactor over every item: learn all, then redact each."""
    redactor = episode_redactor()
    for item in items:
        learn(redactor, item)
    return [redact(redactor, item) for item in items]


def learn(redactor: Redactor, item: Item) -> None:
    """What the recorder learns from the item (``recorder/har.py``, ``learn_entry``)."""
    if item.place == URL:
        redactor.learn_text(item.text)
    else:
        redactor.learn_body(_body(item), _mime(item), response=item.place != REQUEST)


def redact(redactor: Redactor, item: Item) -> str:
    """What the recorder stores for the item (the URL column, a body blob; a socket message
    inside its recorded line, taken out again)."""
    if item.place == URL:
        return redactor.traffic_text(item.text)
    data = redactor.body(_body(item), _mime(item), response=item.place != REQUEST)
    text = data.decode("utf-8", "surrogateescape")
    return str(json.loads(text)["data"]) if item.place == SOCKET else text


def _body(item: Item) -> bytes:
    text = socket_line(item.text, item.mime) if item.place == SOCKET else item.text
    return text.encode("utf-8", "surrogateescape")


def _mime(item: Item) -> str:
    return SOCKET_TYPE if item.place == SOCKET else item.mime


def socket_line(message: str, direction: str) -> str:
    """A text message as the browser's archive records it (one JSON line of the socket's body,
    which the recorder gives the redactor as ``SOCKET_TYPE``)."""
    return json.dumps(
        {"type": direction, "time": 1764000000000.5, "opcode": 1, "data": message},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def replaced_values(item: Item, redacted: str) -> list[Replaced]:
    """The values of ``item`` that became a marker in ``redacted``, each with the name before it."""
    if redacted == item.text:
        return []
    pieces = MARKERS.split(redacted)
    pattern = "(.*?)".join(re.escape(p) for p in pieces)
    match = re.fullmatch(pattern, item.text, re.S)
    if match is None:  # something else moved: report the whole item
        return [Replaced(item.source, item.place, "?", item.text[:200])]
    return [
        Replaced(item.source, item.place, _name_before(item.text, match.start(i + 1)), match.group(i + 1))
        for i in range(len(pieces) - 1)
        if match.group(i + 1) not in ("[REDACTED]", "%5BREDACTED%5D")
    ]


def judged(replaced: list[Replaced]) -> list[Replaced]:
    """One source's replaced values, each said to be a credential or not (see :class:`Replaced`);
    a key of a well-known format (``AKIA…``) is one wherever it is, and so is a password the
    episode typed (``admin``: scrubbed from what a page sent, by design)."""
    credentials = {r.value for r in replaced if r.name.lower() in CREDENTIAL_NAMES_SEEN} | set(TYPED)
    return [
        replace(r, credential=r.value in credentials or KNOWN_KEYS.search(r.value) is not None)
        for r in replaced
    ]


def _name_before(text: str, at: int) -> str:
    found = _NAME_BEFORE.search(text[max(0, at - 80) : at].replace('\\"', '"'))
    return found.group(1) if found else ""


# ---------------------------------------------------------------- planted credentials


def plant_value(draw: random.Random, shaped: bool) -> str:
    """A credential to plant: shaped like one (24 letters and digits: under an ambiguous name),
    or 18 lower-case letters and digits that do not look like one (under a credential's name)."""
    while True:
        if shaped:
            value = "".join(draw.choice(string.ascii_letters + string.digits) for _ in range(24))
        else:
            value = "".join(draw.choice(string.ascii_lowercase) for _ in range(16))
            value = "".join(draw.sample([*value, *draw.choices(string.digits, k=2)], 18))
        if credential_shaped(value) == shaped:
            return value


@dataclass
class Planter:
    """Draws where to plant and what: a credential's name with a value that need not look like
    one, or an ambiguous name with one that does (not a session's id in a connection's own
    URL or messages, which is no secret there)."""

    draw: random.Random
    connection: bool = False

    def pair(self) -> tuple[str, str]:
        if self.draw.random() < 0.6:
            return self.draw.choice(CREDENTIAL_PLANTS), plant_value(self.draw, shaped=False)
        names = CONNECTION_PLANTS if self.connection else AMBIGUOUS_PLANTS
        return self.draw.choice(names), plant_value(self.draw, shaped=True)

    def among(self, parts: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
        """``name=value`` inserted among a query's or form's parameters."""
        name, value = self.pair()
        parts = list(parts)
        parts.insert(self.draw.randint(0, len(parts)), f"{name}={value}")
        return parts, [(name, value)]


def planted(item: Item, draw: random.Random) -> tuple[str, list[tuple[str, str]]]:
    """The item's text with credentials planted in its structured places, and what was planted."""
    packets = is_packets(item.text)
    connection = (
        item.place == SOCKET
        or packets
        or item.place == URL
        and item.text[:6].lower().startswith(("ws://", "wss://"))
    )
    planter = Planter(draw, connection)
    if item.place == URL:
        return _plant_query(item.text, planter)
    if item.place == REQUEST and "x-www-form-urlencoded" in item.mime:
        fields, plants = planter.among(item.text.split("&") if item.text else [])
        return "&".join(fields), plants
    if "event-stream" in item.mime:
        return _plant_lines(item.text, planter, "data:")
    if (
        item.place == SOCKET
        or "json" in item.mime
        or json_start(item.text) == 0
        or packets
        and PACKET_SEPARATOR not in item.text
    ):
        return _plant_json_anywhere(item.text, planter)
    return item.text, []  # HTML, plain text: no structured place (the npm corpus checks code)


def _plant_query(url: str, planter: Planter) -> tuple[str, list[tuple[str, str]]]:
    head, hash_sign, fragment = url.partition("#")
    base, _question, query = head.partition("?")
    if "EIO=" in query:
        planter = Planter(planter.draw, connection=True)
    params, plants = planter.among(query.split("&") if query else [])
    return f"{base}?{'&'.join(params)}{hash_sign}{fragment}", plants


def _plant_lines(text: str, planter: Planter, prefix: str = "") -> tuple[str, list[tuple[str, str]]]:
    """NDJSON lines, or an event stream's ``data:`` lines: each JSON one planted."""
    lines, plants = [], []
    for line in text.split("\n"):
        body = line[len(prefix) :].lstrip(" ") if line.startswith(prefix) else ""
        new, more = _plant_json(body, planter) if body else (body, [])
        lines.append(line[: len(line) - len(body)] + new if more else line)
        plants += more
    return "\n".join(lines), plants


def _plant_json_anywhere(text: str, planter: Planter) -> tuple[str, list[tuple[str, str]]]:
    """A JSON document, NDJSON, or a message holding JSON after a prefix (socket.io's ``42``)."""
    whole, plants = _plant_json(text, planter)
    if plants or "\n" not in text.strip():
        return whole, plants
    return _plant_lines(text, planter)


def _plant_json(text: str, planter: Planter) -> tuple[str, list[tuple[str, str]]]:
    """Into up to :data:`MAX_PLANTS` of the objects of the JSON that ends ``text`` (after any
    prefix), a ``"name": "value"`` pair as its first member."""
    start = json_start(text)
    if start is None:
        return text, []
    objects = list(_object_starts(text, start))
    chosen = sorted(planter.draw.sample(objects, min(MAX_PLANTS, len(objects))), reverse=True)
    plants = []
    for at in chosen:
        name, value = planter.pair()
        rest = text[at + 1 :].lstrip()
        pair = json.dumps(name) + ": " + json.dumps(value) + ("" if rest.startswith("}") else ", ")
        text = text[: at + 1] + pair + text[at + 1 :]
        plants.append((name, value))
    return text, plants


MAX_PLANTS = 6
"""Credentials planted in one JSON text at most (in objects drawn at random)."""


def _object_starts(text: str, start: int) -> Iterator[int]:
    """The ``{`` of every object of the JSON from ``start`` (outside strings)."""
    in_string = escaped = False
    for at in range(start, len(text)):
        char = text[at]
        if in_string:
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            in_string = True
        elif char == "{":
            yield at


def _planted(item: Item, as_is: str, draw: random.Random, result: TrafficResult) -> None:
    """Plant, redact with a fresh episode's redactor, and count what was found and what else moved."""
    text, plants = planted(item, draw)
    if not plants:
        return
    variant = Item(item.source, item.place, item.mime, text)
    redactor = episode_redactor()
    learn(redactor, variant)
    redacted = redact(redactor, variant)
    result.planted += len(plants)
    for name, value in plants:
        if value in redacted:
            result.missed.append((item.source, item.place, name))
        else:
            result.found += 1
    allowed = {v for _, v in plants} | {r.value for r in replaced_values(item, as_is)}
    if any(r.name == "?" or r.value not in allowed for r in replaced_values(variant, redacted)):
        result.changed_around.append((item.source, item.place))
