"""Where secrets are: the structural rules that find (or replace) secret values by location.

A value is a secret because of where it is — the value of a secret-named query or fragment
parameter, form or multipart field, JSON key, quoted ``"key": "value"`` pair, HTML
``<input>``/``<meta>`` attribute or header (``secret_names.py``), URL userinfo, a cookie, the
credential after ``Bearer``/``Basic`` — and, in a response body (code and data a page runs on),
because it also looks like a credential (``secret_shapes.py``): ``x?"authorization_code":
"authorizationCode"`` in a bundle is an expression, ``"access_token": "Zq81fKx02LmA9w"`` in a JSONP
reply is a token. Keys of a well-known format (JWTs, ``sk-...``, ``AKIA...``) are secrets anywhere.

The same walkers find and replace: :class:`Rules` built with a replacing callback redact
(:data:`STRICT`, :data:`BODY`), built by :func:`collecting` they list what they find, which
``redact.py`` then scrubs wherever else it appears. Values are replaced, keys and structure
kept: a URL stays a URL (``%5BREDACTED%5D``, i.e. :data:`REDACTED` percent-encoded), JSON stays
the same JSON but for the secret's literal, a header keeps its name (``Bearer [REDACTED]``,
``sid=[REDACTED]; Path=/``).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote_plus

from mmina.redaction.secret_json import splice
from mmina.redaction.secret_names import (
    AMBIGUOUS,
    CREDENTIAL,
    connection_kind,
    is_secret_name,
    name_kind,
    stronger,
)
from mmina.redaction.secret_patterns import (
    ASSIGNMENT,
    ATTRIBUTE,
    AUTH_SCHEME,
    AUTH_WORDS,
    CODE_VALUE,
    ESCAPED_PAIR,
    LABELLED,
    MULTIPART_FIELD,
    QUOTED_PAIR,
    SAID,
    SCHEME,
    TAG,
    TEXT_PARAM,
    URL_REST,
    attribute_value,
    identifier_before,
    in_whole_url,
    replace_group,
    scheme_start,
)
from mmina.redaction.secret_shapes import (
    KNOWN_KEYS,
    credential_shaped,
    data_token,
    might_hold_known_key,
    token_like,
)
from mmina.redaction.secret_transport import ENGINE_IO_URL, TRANSPORT_ID, in_engine_io_query, opens_transport

REDACTED = "[REDACTED]"
URL_REDACTED = quote(REDACTED, safe="")
"""The marker inside URLs and form bodies: ``%5BREDACTED%5D``, which decodes to :data:`REDACTED`."""
MARKERS = frozenset({REDACTED, URL_REDACTED})

Found = Callable[[str, bool], str]
"""Called with each secret value a rule finds (and whether it sits in a URL or form, i.e. is
percent-encoded); returns what to put in its place."""

MIN_SAID = 6
"""A token after a secret word in prose is at least this long (``PIN 42`` is not read as one)."""
MAX_NESTING = 4
"""How deep a URL inside a parameter inside a URL... is followed (``redirect_url=`` chains)."""
SOCKET_TYPE = "x-mmina/socket-messages"
"""How the recorder names a WebSocket's recorded messages to the redactor (the browser's archive
says ``x-unknown``): JSON lines ``{"type": "send"|"receive", "opcode": 1|2, "data": ...}``."""
TEXT_TYPES = (
    "text/",
    "json",
    "javascript",
    "ecmascript",
    "xml",
    "x-www-form-urlencoded",
    "multipart/form-data",
    "graphql",
    "event-stream",
    "x-ndjson",
    SOCKET_TYPE,
)
CODE_TYPES = ("javascript", "ecmascript", "text/css")
"""Bodies that are code: never read as one JSON document, whatever their first character."""


def is_text_type(mime: str) -> bool:
    """Bodies worth reading as text; images, fonts and media only get known values scrubbed."""
    return any(kind in mime.lower() for kind in TEXT_TYPES)


class Rules:
    """The structural rules, driven by one ``found`` callback: to redact or to learn.

    ``strict`` (the default: what a page or the agent sent, and mmina's own rows) takes every
    value in a secret place; a response body is read with ``strict=False``: there a value in a
    secret place is a secret only when it is credential-shaped, so code and data that are not
    secrets keep every byte (a replay serves them, and the page must still run).

    ``connection`` rules read a WebSocket's (or engine.io's) own URL and messages, where a
    session's id names the connection (``secret_names.connection_kind``).
    """

    def __init__(self, found: Found, strict: bool = True, connection: bool = False) -> None:
        self._found, self.strict, self.connection = found, strict, connection
        self.kind = connection_kind if connection else name_kind
        """What a value under a name is (``secret_names.name_kind``)."""

    def found(self, value: str, in_url: bool) -> str:
        """A secret whatever its shape (a key of a known format, a cookie, a header)."""
        if not value or value in MARKERS:
            return value
        return self._found(value, in_url)

    def secret(self, value: str, in_url: bool) -> str:
        """A value in a secret place: replaced when strict, else when it looks like a credential."""
        if self.strict or credential_shaped(unquote_plus(value) if in_url else value):
            return self.found(value, in_url)
        return value

    def named(self, value: str, in_url: bool, kind: str | None) -> str:
        """A value under a name of ``kind`` (``secret_names.name_kind``), in a structured place (a
        URL or form parameter, a JSON key): under a credential's name a secret by place alone — in
        a response too, unless it is no token at all (a word of letters: a form's label); under an
        ambiguous one only when credential-shaped, everywhere."""
        plain = unquote_plus(value) if in_url else value
        if (
            kind == CREDENTIAL
            and (self.strict or data_token(plain))
            or kind == AMBIGUOUS
            and credential_shaped(plain)
        ):
            return self.found(value, in_url)
        return value

    # URLs and forms

    def url(self, url: str, depth: int = 0) -> str:
        """Userinfo, and secret-named parameters of the query and of the fragment
        (``#access_token=``, ``#/route?token=``); a parameter holding a URL is followed."""
        if not self.connection and url[:6].lower().startswith(("ws://", "wss://")):
            return self._as(self.strict, connection=True).url(url, depth)
        head, hash_sign, fragment = url.partition("#")
        base, question, query = head.partition("?")
        base = self.userinfo(base)
        query = self.params(query, depth) if question else ""
        fragment = self.params(fragment, depth) if hash_sign else ""
        return base + question + query + hash_sign + fragment

    def userinfo(self, base: str) -> str:
        """``scheme://user:PASS@host`` keeps the user; a lone ``scheme://TOKEN@host`` is a credential."""
        scheme = SCHEME.match(base)
        if not scheme:
            return base
        authority, slash, path = base[scheme.end() :].partition("/")
        if "@" not in authority:
            return base
        userinfo, _, host = authority.rpartition("@")
        user, colon, password = userinfo.partition(":")
        userinfo = f"{user}:{self.secret(password, True)}" if colon else self.secret(user, True)
        return f"{base[: scheme.end()]}{userinfo}@{host}{slash}{path}"

    def params(self, part: str, depth: int = 0) -> str:
        """``a=1&token=x`` with secret-named values replaced; everything else byte for byte
        (engine.io's ``sid`` included: an engine.io query is a connection's, see :data:`TRANSPORT_ID`)."""
        if not self.connection and "EIO=" in part and ENGINE_IO_URL.search(part) is not None:
            return self._as(self.strict, connection=True).params(part, depth)
        return "&".join(self._param(piece, depth) for piece in part.split("&"))

    def _param(self, piece: str, depth: int) -> str:
        key, equals, value = piece.partition("=")
        if not equals or not value:
            return piece
        kind = self.kind(unquote_plus(key))
        if kind:
            return f"{key}={self.named(value, True, kind)}"
        return f"{key}={self._nested(value, depth + 1)}" if depth < MAX_NESTING else piece

    def _nested(self, value: str, depth: int) -> str:
        """A parameter value that is itself a URL or a query (``next=/cb%3Ftoken%3Dx``)."""
        decoded = unquote_plus(value) if "%" in value or "+" in value else value
        if "=" not in decoded and "@" not in decoded:
            return value
        nested = self.url(decoded, depth) if any(c in decoded for c in "?#@") else self.params(decoded, depth)
        if nested == decoded:
            return value
        return nested if decoded == value else quote(nested, safe="")

    def multipart(self, body: str) -> str:
        """``multipart/form-data`` fields with secret names (file parts are left alone)."""

        def field(m: re.Match[str]) -> str:
            value = self.named(m["value"], False, self.kind(m["name"]))
            return m["head"] + value

        return MULTIPART_FIELD.sub(field, body)

    # JSON

    def json_value(self, value: Any) -> Any:
        """Parsed JSON: the values under secret-named keys replaced (:meth:`json_leaf`; containers
        keep their shape), every other string read as text. When strict, a secret name holding an
        object makes everything in it a secret (``{"credentials": {"user": ..., "pass": ...}}``);
        in what a page received only a value's own key counts, and a list's (``"tokens": [...]``):
        a JSON schema's ``"Password": {"pattern": "^[a-zA-Z0-9]+$"}`` and a lock file's
        ``"node_modules/glsl-token-string": {"integrity": ...}`` are data."""
        return self._json(value, None)

    def _json(self, value: Any, kind: str | None) -> Any:
        if isinstance(
            value, dict
        ):  # what a page received inherits no name through an object (see json_value)
            inherited = kind if self.strict else None
            return {k: self._json(v, stronger(inherited, self.kind(str(k)))) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json(v, kind) for v in value]
        return self.json_leaf(value, kind)

    def json_leaf(self, value: Any, kind: str | None) -> Any:
        """One value of a JSON document: under a secret-named key (of ``kind``) a string — or, in
        what a page or agent sent, a number — is a secret as :meth:`named` says (a number becomes
        the quoted marker, still valid JSON); bools and nulls say nothing. Any other string is
        text: prose when strict (a task's intent inside its original JSON)."""
        if isinstance(value, bool) or value is None or not (self.strict or isinstance(value, str)):
            return value  # bools and nulls say nothing; a response's number is data (a count, an id)
        if kind:
            text = value if isinstance(value, str) else json.dumps(value)
            redacted = self.named(text, False, kind)
            return value if redacted == text else redacted
        return self.text(value, prose=self.strict) if isinstance(value, str) else value

    def json_text(self, text: str, otherwise: Callable[[str], str] | None = None) -> str:
        """JSON text redacted as JSON, in place (``secret_json.py``): a document without a secret
        keeps its bytes, one with a secret changes only there. Text that is not JSON is read as
        text, or by ``otherwise``."""
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return otherwise(text) if otherwise else self.free_text(text, prose=False)
        try:
            unchanged = self.json_value(parsed) == parsed
        except RecursionError:
            return self.free_text(text, prose=False)
        return text if unchanged else splice(text, self.json_leaf, self.kind, inherit=self.strict)

    # free text

    def text(self, text: str, prose: bool = True) -> str:
        """Free text (a tree, an error, a page's script; a JSON document as JSON): URLs, parameters, quoted pairs,
        ``Bearer`` credentials, key shapes, ``<input>``/``<meta>`` values; in ``prose`` also
        ``name=value`` and a tree's ``"API key": value`` (not in code, where
        ``token=getToken()`` is a statement)."""
        if len(text) > 1 and text[0] in "{[" and text[-1] in "}]":
            return self.json_text(text)
        return self.free_text(text, prose)

    def free_text(self, text: str, prose: bool = True) -> str:
        """:meth:`text` for what is not one JSON document."""
        if "://" in text:
            text = self._urls(text)
        if "=" in text:
            text = TEXT_PARAM.sub(self._text_param, text)
        if ":" in text:
            text = QUOTED_PAIR.sub(self._quoted_pair, text)
            text = ESCAPED_PAIR.sub(lambda m: self._secret_group(m, "value", False), text)
        if not self.strict and (":" in text or "=" in text):
            text = self._code_pairs(text)
        if any(word in text for word in AUTH_WORDS):
            text = AUTH_SCHEME.sub(self._credential, text)
        if might_hold_known_key(text):
            text = KNOWN_KEYS.sub(lambda m: self.found(m.group(0), False), text)
        if "<" in text:
            text = TAG.sub(self._tag, text)
        if prose:
            text = (
                ASSIGNMENT.sub(lambda m: self._secret_group(m, "value", False), text) if "=" in text else text
            )
            text = (
                LABELLED.sub(lambda m: self._secret_group(m, "value", False), text) if '":' in text else text
            )
            text = SAID.sub(self._said, text)
        return text

    def _said(self, m: re.Match[str]) -> str:
        """A value after a secret word in a sentence, when it is a token rather than a word."""
        value = m["value"]
        if value in MARKERS or not (credential_shaped(value) or token_like(value) and len(value) >= MIN_SAID):
            return m.group(0)
        return replace_group(m, "value", self.found(value, False))

    def _urls(self, text: str) -> str:
        """Every whole URL (``scheme://...``) in a text through :meth:`url`, found from its
        ``://`` (a regex scanning a 10 MB bundle for schemes costs ~20x more)."""
        parts: list[str] = []
        done = floor = 0
        at = text.find("://")
        while at != -1:
            start, rest = scheme_start(text, at, floor), URL_REST.match(text, at + 3)
            if start is None or rest is None:
                at = text.find("://", at + 3)
                continue
            url, floor = text[start : rest.end()], rest.end()
            redacted = self.url(url) if any(c in url for c in "?#@") else url
            if redacted != url:
                parts += [text[done:start], redacted]
                done = floor
            at = text.find("://", floor)
        return "".join(parts) + text[done:] if parts else text

    def _code_pairs(self, text: str) -> str:
        """Each string after ``identifier:`` or ``identifier=`` whose identifier is secret-named,
        through :meth:`secret` (see :data:`CODE_VALUE`)."""
        parts: list[str] = []
        done = 0
        for m in CODE_VALUE.finditer(text):
            if m.start() < done or not is_secret_name(identifier_before(text, m.start())):
                continue
            value = m["value"]
            redacted = self.secret(value, False)
            if redacted != value:
                start = m.start("value")
                parts += [text[done:start], redacted]
                done = m.end("value")
        return "".join(parts) + text[done:] if parts else text

    def _secret_group(self, m: re.Match[str], group: str, in_url: bool) -> str:
        """The match with ``group`` replaced when the match's ``key`` is a secret name (not
        engine.io's ``sid`` in its open packet: :data:`TRANSPORT_ID`)."""
        key = unquote_plus(m["key"]) if in_url else m["key"]
        if not is_secret_name(key) or key == TRANSPORT_ID and opens_transport(m.string, m.start()):
            return m.group(0)
        return replace_group(m, group, self.secret(m[group], in_url))

    def _text_param(self, m: re.Match[str]) -> str:
        """A parameter in text outside a whole URL (``/cb?token=``); its value may hold a URL. One
        inside a whole URL is the URL rule's (:meth:`url`, already applied: a WebSocket's own
        ``?session_id=`` is kept there, an ambiguous word needs a credential-shaped value), unless
        HTML escaped its ``&`` (``&amp;token=``), which the URL rule reads as part of the name."""
        if m["lead"] == "&" and m.string[m.start() - 1 : m.start()] == "&":
            return m.group(0)  # a && b=c: an expression
        if m["lead"] in "?&#" and in_whole_url(m.string, m.start()):
            return m.group(0)
        if m["key"] == TRANSPORT_ID and in_engine_io_query(m.string, m.start()):
            return m.group(0)
        if is_secret_name(unquote_plus(m["key"])):
            return self._secret_group(m, "value", True)
        return replace_group(m, "value", self._nested(m["value"], 1))

    def _quoted_pair(self, m: re.Match[str]) -> str:
        """A quoted value keeps its quotes; a number becomes the quoted marker (still valid JSON)."""
        if m["vq"] is not None:
            return self._secret_group(m, "value", False)
        if not is_secret_name(m["key"]):
            return m.group(0)
        redacted = self.secret(m["number"], False)
        return replace_group(m, "number", redacted if redacted == m["number"] else json.dumps(redacted))

    def _credential(self, m: re.Match[str]) -> str:
        """``Bearer <token>`` in text; ``Basic understanding`` is prose, not a credential."""
        value = m["value"]
        if credential_shaped(value) or self.strict and token_like(value):
            return replace_group(m, "value", self.found(value, False))
        return m.group(0)

    def _tag(self, m: re.Match[str]) -> str:
        """``<input name="csrf" value="...">``, ``<input type="password" value="...">`` and
        ``<meta name="csrf-token" content="...">``."""
        tag = m.group(0)
        attributes = {a["name"].lower(): a for a in ATTRIBUTE.finditer(tag)}
        names = [
            attribute_value(attributes[k])
            for k in ("name", "id", "autocomplete", "property")
            if k in attributes
        ]
        password = attribute_value(attributes.get("type")).lower() == "password"
        target = attributes.get("value") or attributes.get("content")
        if not (password or any(is_secret_name(n) for n in names)) or target is None:
            return tag
        group = next(g for g in ("dq", "sq", "bare") if target[g] is not None)
        start, end = target.span(group)
        value = html.unescape(target[group])
        redacted = self.found(value, False) if password else self.secret(value, False)
        return tag if redacted == value else tag[:start] + redacted + tag[end:]

    # headers and bodies

    def header(self, name: str, value: str) -> str:
        """Cookies keep their names, ``Authorization`` its scheme; other secret-named headers
        are replaced whole; the rest (``Referer``, ``Location``, ``Link``) is read as text."""
        lowered = name.lower()
        if lowered in ("cookie", "set-cookie"):
            return self.cookies(value, lowered == "set-cookie")
        if lowered in ("authorization", "proxy-authorization"):
            scheme, space, credential = value.partition(" ")
            if space and scheme.isalpha() and credential:
                return f"{scheme} {self.found(credential, False)}"
            return self.found(value, False)
        if is_secret_name(name):
            return self.found(value, False)
        return self.text(value, prose=False)

    def cookies(self, value: str, set_cookie: bool) -> str:
        """``a=1; b=2`` → ``a=[REDACTED]; b=[REDACTED]``; a ``Set-Cookie`` keeps its attributes
        (one cookie per line, as the HAR and the replayer write several)."""
        if set_cookie:
            return "\n".join(self._set_cookie(line) for line in value.split("\n"))
        return ";".join(self._cookie_pair(pair) for pair in value.split(";"))

    def _set_cookie(self, line: str) -> str:
        pair, semicolon, attributes = line.partition(";")
        return self._cookie_pair(pair) + semicolon + attributes

    def _cookie_pair(self, pair: str) -> str:
        name, equals, value = pair.partition("=")
        if not equals:  # a bare value
            name, value = "", pair
        stripped = value.strip()
        if not stripped:
            return pair
        return f"{name}{equals}{value.replace(stripped, self.found(stripped, False))}"

    def body(self, text: str, mime: str) -> str:
        """A request or response body by its type: JSON (also line by line), form,
        multipart, or text (HTML, scripts, style sheets, plain)."""
        kind = mime.lower()
        if "x-www-form-urlencoded" in kind:
            return self.params(text)
        if "multipart/form-data" in kind:
            return self.multipart(text)
        if any(code in kind for code in CODE_TYPES):
            return self.free_text(text, prose=False)
        if "event-stream" in kind:
            return self._event_stream(text)
        if kind == SOCKET_TYPE:
            return self._socket_lines(text)
        if is_packets(text):
            return PACKET_SEPARATOR.join(
                self._as(self.strict, True).message(p) for p in text.split(PACKET_SEPARATOR)
            )
        stripped = text.lstrip()
        if "json" in kind or stripped[:1] in ("{", "["):
            return self.json_text(text, otherwise=self._json_lines)  # one document, or NDJSON
        return self.text(text, prose=False)

    def _event_stream(self, text: str) -> str:
        """Server-sent events: each ``data:`` line's payload as JSON (or text), the rest as it is."""

        def line(piece: str) -> str:
            field, colon, payload = piece.partition(":")
            if field != "data" or not colon:
                return piece
            stripped = payload.lstrip(" ")
            return f"data:{payload[: len(payload) - len(stripped)]}{self.json_text(stripped)}"

        return "\n".join(line(piece) for piece in text.split("\n"))

    def _socket_lines(self, text: str) -> str:
        """A recorded socket: each text message read as one (:meth:`message`), what the page sent
        by the rules of what a page sends (strict), what it received by those of a response;
        binary messages and every other byte of a line kept."""

        def line(piece: str) -> str:
            try:
                record = json.loads(piece)
            except ValueError:
                return piece
            if (
                not isinstance(record, dict)
                or record.get("opcode") != 1
                or not isinstance(record.get("data"), str)
            ):
                return piece
            rules = self._as(strict=record.get("type") == "send", connection=True)
            return splice(
                piece,
                lambda value, _kind: rules.message(value) if isinstance(value, str) else value,
                lambda key: None,
            )

        return "\n".join(line(piece) if piece.strip() else piece for piece in text.split("\n"))

    def _as(self, strict: bool, connection: bool = False) -> Rules:
        """These rules, strict or not, of a connection or not."""
        same = strict == self.strict and connection == self.connection
        return self if same else Rules(self._found, strict, connection)

    def message(self, data: str) -> str:
        """One socket message: the JSON it ends with (after a protocol's prefix: socket.io's
        ``42``, a namespace, engine.io's open packet ``0``) as JSON, by the rules of a
        connection (its session's id is kept: :data:`TRANSPORT_ID`); any other message as text."""
        start = json_start(data)
        if start is None:
            return self.free_text(data, prose=False)
        return data[:start] + self._as(self.strict, connection=True).json_text(data[start:])

    def _json_lines(self, text: str) -> str:
        """NDJSON and recorded WebSocket messages: one document per line."""
        return "\n".join(self.json_text(line) if line.strip() else line for line in text.split("\n"))


JSON_PREFIX = 64
"""A socket message's JSON starts within this many characters (after a protocol's prefix)."""


def json_start(text: str) -> int | None:
    """Where a JSON object or array that runs to the end of ``text`` starts (0 for a JSON
    document, 2 for socket.io's ``42[...]``); None: there is none."""
    decoder = json.JSONDecoder()
    at = next((i for i, c in enumerate(text[:JSON_PREFIX]) if c in "{["), -1)
    while 0 <= at < JSON_PREFIX:
        try:
            _value, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            end = -1
        if end > 0 and not text[end:].strip():
            return at
        at = next((i for i in range(at + 1, min(len(text), JSON_PREFIX)) if text[i] in "{["), -1)
    return None


PACKET_SEPARATOR = "\x1e"
_PACKET = re.compile(r"\d[\w/,]{0,40}?[\[{]")


def is_packets(text: str) -> bool:
    """Whether a body is socket messages sent over HTTP (engine.io's long polling: packets such
    as ``0{"sid":...}``, ``42["event",{...}]``, separated by ``\\x1e``): each packet a protocol's
    digits, then JSON, or a bare packet type (``2``, ``6``)."""
    if not text[:1].isdigit():
        return False
    packets = text.split(PACKET_SEPARATOR)
    return any(_PACKET.match(p) for p in packets) and all(
        p.isdigit() or _PACKET.match(p) and json_start(p) is not None for p in packets
    )


def collecting(strict: bool = True) -> tuple[Rules, list[str]]:
    """Rules that change nothing and list every secret value they find (decoded too, for
    values inside URLs and forms)."""
    found: list[str] = []

    def collect(value: str, in_url: bool) -> str:
        found.append(value)
        if in_url:
            found.append(unquote_plus(value))
        return value

    return Rules(collect, strict), found


def _mark(_value: str, in_url: bool) -> str:
    return URL_REDACTED if in_url else REDACTED


STRICT = Rules(_mark)
BODY = Rules(_mark, strict=False)
