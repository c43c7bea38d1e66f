"""What is a secret, by rule: secret names, values worth scrubbing, and the structural rules.

A value is a secret because of where it is (:class:`Rules`): the value of a secret-named
query or fragment parameter, form or multipart field, JSON key, quoted ``"key": "value"``
pair, HTML ``<input>``/``<meta>`` attribute or header (:func:`is_secret_name`: token, secret,
password, session, auth, key, cookie, csrf...), URL userinfo, the credential after
``Bearer``/``Basic``, and values shaped like well-known keys (JWTs, ``sk-...``, ``AKIA...``).

The same walkers find and replace: :class:`Rules` built with a replacing callback redact
(:data:`STRICT`, :data:`BODY`), built by :func:`collecting` they list what they find, which
``redact.py`` then scrubs wherever else it appears. Values are replaced, keys and structure
kept: a URL stays a URL (``%5BREDACTED%5D``, i.e. :data:`REDACTED` percent-encoded), JSON stays
JSON, a header keeps its name (``Bearer [REDACTED]``, ``sid=[REDACTED]; Path=/``).
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

REDACTED = "[REDACTED]"
URL_REDACTED = quote(REDACTED, safe="")
"""The marker inside URLs and form bodies: ``%5BREDACTED%5D``, which decodes to :data:`REDACTED`."""
MARKERS = frozenset({REDACTED, URL_REDACTED})

# -- which names are secret -----------------------------------------------------------------

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
SECRET_WORDS = frozenset({
    "pass", "passwd", "password", "passwords", "passphrase", "passcode", "pwd", "pin", "otp", "cvv", "cvc",
    "secret", "secrets", "token", "auth", "authorization", "authentication", "credential", "credentials", "cred",
    "creds", "session", "sess", "sessid", "sessionid", "sid", "cookie", "cookies", "csrf", "xsrf", "apikey", "key",
    "sig", "signature", "jwt", "bearer", "saml"})
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "sessid", "sessionid", "cookie", "csrf", "xsrf")
"""A run-together word ending so is secret too: ``accesstoken``, ``PHPSESSID``, ``clientsecret``."""
SECRET_COMPOUNDS = frozenset({"authkey", "secretkey", "accesskey", "privatekey", "sessionkey", "clientkey", "appkey"})
QUALIFIERS = frozenset({
    "count", "counts", "type", "types", "length", "len", "limit", "max", "min", "size", "url", "uri", "urls",
    "endpoint", "env", "name", "names", "field", "fields", "header", "headers", "param", "params", "policy",
    "format", "kind", "version", "hint", "label", "placeholder", "timeout", "ttl", "expires", "expiry",
    "expiration", "required", "enabled", "disabled", "mode", "method", "path", "file", "dir", "prefix", "suffix",
    "strength", "reset", "valid", "usage"})
"""A name ending in one of these describes a secret without holding it: ``token_type``, ``api_key_env``."""
PUBLIC_KEYS = frozenset({"public", "sort", "primary", "foreign", "cache", "partition", "row", "object",
                         "idempotency", "lookup", "map", "dict", "hash", "group", "shortcut", "hot"})
"""``key`` after one of these is not a credential (``public_key``, ``sort_key``)."""


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether a parameter, field, header or variable of this name holds a secret.

    The name is split into words (``X-CSRFToken`` → x, csrf, token; ``apiKey`` → api, key); it
    is secret when a word is a secret word or ends like one (``accesstoken``), unless its last
    word only qualifies it (``token_type``, ``max_tokens`` has no secret word at all) or it is
    a CORS policy (``Access-Control-Allow-Credentials``).
    """
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in QUALIFIERS or words[:2] == ["access", "control"]:
        return False
    return any(_secret_word(word, words[i - 1] if i else "") for i, word in enumerate(words))


def _secret_word(word: str, before: str) -> bool:
    if word == "key":
        return before not in PUBLIC_KEYS
    return word in SECRET_WORDS or word in SECRET_COMPOUNDS or word.endswith(SECRET_ENDINGS)


# -- which values are worth scrubbing wherever they appear ------------------------------------

MIN_LEARNED = 8
"""Shorter values found in the traffic (``lang=en``, ``sid=1``) are too common to scrub everywhere."""
_WORDLIKE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def worth_scrubbing(value: str) -> bool:
    """A value found in a secret place that is safe to replace everywhere: long, one token
    (no spaces), and not a word (``Password`` as a label must stay in every page)."""
    if len(value) < MIN_LEARNED or any(c.isspace() for c in value) or "REDACTED" in value:
        return False
    classes = (any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value),
               any(not c.isalnum() for c in value))
    return sum(classes) >= 2 and not _WORDLIKE.fullmatch(value)


_LABEL = re.compile(r"[A-Z]?[a-z]+(?:[ ,'-]+[A-Za-z][a-z]*)*[.:!?…]?")


def looks_like_text(value: str) -> bool:
    """Words a page shows (``Password``, ``Session expired, log in again.``) rather than a
    credential (which has digits, symbols or capitals inside): in a response body a label under
    a secret-named key stays, or a replayed page would read differently from the recorded one."""
    return bool(_LABEL.fullmatch(value))


def variants(value: str) -> set[str]:
    """How a value appears in the texts we store: as is, percent-encoded, JSON- and HTML-escaped."""
    return {value, quote(value, safe=""), quote_plus(value, safe=""), quote(value, safe="/:@"),
            json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], html.escape(value)}


# -- the structural rules -------------------------------------------------------------------------

Found = Callable[[str, bool], str]
"""Called with each secret value a rule finds (and whether it sits in a URL or form, i.e. is
percent-encoded); returns what to put in its place."""

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_URL = re.compile(r"""\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'"<>\[\]()`\\{}|^]+""")
_MARKER = r"\[REDACTED\]|%5BREDACTED%5D|"
_TEXT_PARAM = re.compile(
    rf"(?:(?<=[?#])|(?<=(?<!&)&)|(?<=&amp;))(?P<key>[A-Za-z0-9_%\-\[\]]+)=(?!=)"
    rf"(?P<value>{_MARKER}[^&#\s\"'<>\\`()\[\]{{}},;|]+)")
"""``?token=...`` or ``&token=...`` outside a whole URL; not ``&&keyCode==k`` (a script's comparison)."""
_ASSIGNMENT = re.compile(
    rf"(?<![\w.\-?&#%\[/])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,63}})=(?P<value>{_MARKER}[^\s&#?\"'<>,;)\]}}]+)")
"""``password=hunter2`` in prose, ``;jsessionid=...`` in a URL (not a ``/key=x/`` path segment)."""
_KEY = r"(?P<key>[A-Za-z0-9_.\-\[\] ]{1,64})"
_QUOTED_PAIR = re.compile(  # "key": "value" (JSON, scripts), 'key': 'value' (Python reprs), "key": 12
    rf"""(?P<q>["']){_KEY}(?P=q)\s*:\s*(?:(?P<vq>["'])(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)"""
    r"""|(?P<number>-?\d[\d.]*))""")
_ESCAPED_PAIR = re.compile(  # \"key\":\"value\" (JSON inside a string)
    rf"""\\(?P<q>["']){_KEY}\\(?P=q)\s*:\s*\\(?P<vq>["'])(?P<value>(?:(?!\\(?P=vq))[^\n])*?)\\(?P=vq)""")
_LABELLED = re.compile(r'"(?P<key>[^"\n]{1,64})": (?P<value>[^\n"]+)$', re.M)
"""An accessibility-tree field and its value (``- textbox "API key": sk-...``): prose only."""
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>[Bb]earer|Basic|BASIC|BEARER)\s+(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)")
_SHAPES = re.compile(
    r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"  # a JWT
    r"|\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9]{16,}"  # OpenAI-style keys (sk-..., sk-proj-...)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_\-]{35}"  # AWS access key ids, Google API keys
    r"|\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abprs]-[A-Za-z0-9-]{10,})")
_TAG = re.compile(r"<(?:input|meta)\b[^>]*>", re.I)
_ATTRIBUTE = re.compile(r"""(?P<name>[\w:-]+)\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'=<>`]+))""")
_MULTIPART_FIELD = re.compile(
    r"""(?P<head>Content-Disposition:[^\r\n]*?\bname="(?P<name>[^"]*)"(?![^\r\n]*filename=)[^\r\n]*\r?\n"""
    r"""(?:[^\r\n]+\r?\n)*\r?\n)(?P<value>.*?)(?=\r?\n--)""", re.I | re.S)
MAX_NESTING = 4
"""How deep a URL inside a parameter inside a URL... is followed (``redirect_url=`` chains)."""
TEXT_TYPES = ("text/", "json", "javascript", "ecmascript", "xml", "x-www-form-urlencoded", "multipart/form-data",
              "graphql", "event-stream", "x-ndjson")


CODE_TYPES = ("javascript", "ecmascript", "text/css")
"""Bodies that are code a page runs: only the rules of :meth:`Rules.code` apply to them."""


def is_text_type(mime: str) -> bool:
    """Bodies worth reading as text; images, fonts and media only get known values scrubbed."""
    return any(kind in mime.lower() for kind in TEXT_TYPES)


class Rules:
    """The structural rules, driven by one ``found`` callback: to redact or to learn.

    ``strict`` (the default) replaces every value in a secret place; a response body is read
    with ``strict=False``, which keeps words a page shows under secret-named keys
    (:func:`looks_like_text`), so a replayed page reads as the recorded one did.
    """

    def __init__(self, found: Found, strict: bool = True) -> None:
        self._found, self.strict = found, strict

    def found(self, value: str, in_url: bool) -> str:
        if not value or value in MARKERS:
            return value
        return self._found(value, in_url)

    def _loose(self, value: str, in_url: bool) -> str:
        """``found`` for places where a label may stand: code and response bodies."""
        return value if not self.strict and looks_like_text(value) else self.found(value, in_url)

    # URLs and forms

    def url(self, url: str, depth: int = 0) -> str:
        """Userinfo, and secret-named parameters of the query and of the fragment
        (``#access_token=``, ``#/route?token=``); a parameter holding a URL is followed."""
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
        authority, slash, path = base[scheme.end():].partition("/")
        if "@" not in authority:
            return base
        userinfo, _, host = authority.rpartition("@")
        user, colon, password = userinfo.partition(":")
        userinfo = f"{user}:{self.found(password, True)}" if colon else self.found(user, True)
        return f"{base[:scheme.end()]}{userinfo}@{host}{slash}{path}"

    def params(self, part: str, depth: int = 0) -> str:
        """``a=1&token=x`` with secret-named values replaced; everything else byte for byte."""
        return "&".join(self._param(piece, depth) for piece in part.split("&"))

    def _param(self, piece: str, depth: int) -> str:
        key, equals, value = piece.partition("=")
        if not equals or not value:
            return piece
        if is_secret_name(unquote_plus(key)):
            return f"{key}={self.found(value, True)}"
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
            value = self.found(m["value"], False) if is_secret_name(m["name"]) else m["value"]
            return m["head"] + value
        return _MULTIPART_FIELD.sub(field, body)

    # JSON

    def json_value(self, value: Any) -> Any:
        """Parsed JSON: values under secret-named keys replaced (bools and nulls kept, containers
        keep their shape), every other string read as text."""
        if isinstance(value, dict):
            return {k: self._secret_leaves(v) if is_secret_name(str(k)) else self.json_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json_value(v) for v in value]
        return self.text(value, prose=False) if isinstance(value, str) else value

    def _secret_leaves(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._secret_leaves(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._secret_leaves(v) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, str):
            return self._loose(value, False)
        return self.found(json.dumps(value), False)

    def json_text(self, text: str) -> str:
        """JSON text redacted as JSON (re-written only when something changed, so a clean
        document keeps its bytes); text that is not JSON is read as text."""
        try:
            parsed = json.loads(text)
            redacted = self.json_value(parsed)
            return text if redacted == parsed else json.dumps(redacted, ensure_ascii=False)
        except (ValueError, RecursionError):
            return self.free_text(text, prose=False)

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
            text = _URL.sub(lambda m: self.url(m.group(0)), text)
        if "=" in text:
            text = _TEXT_PARAM.sub(self._text_param, text)
        if ":" in text:
            text = _QUOTED_PAIR.sub(self._quoted_pair, text)
            text = _ESCAPED_PAIR.sub(lambda m: self._secret_group(m, "value", False, loose=True), text)
        text = _AUTH_SCHEME.sub(self._credential, text)
        text = _SHAPES.sub(lambda m: self.found(m.group(0), False), text)
        if "<" in text:
            text = _TAG.sub(self._tag, text)
        if prose:
            text = _ASSIGNMENT.sub(lambda m: self._secret_group(m, "value", False), text) if "=" in text else text
            text = _LABELLED.sub(lambda m: self._secret_group(m, "value", False), text) if '":' in text else text
        return text

    def code(self, text: str) -> str:
        """A script or style sheet: whole URLs (``...?apikey=...`` in a string), credentials after
        an auth scheme, keys of a known shape, and a quoted secret-named pair's string shaped like a
        credential (JSONP, an inline configuration: ``{"access_token": "9f2a…"}``).
        Not ``name=value``, nor a pair's number or word: in code those are expressions
        (``a&&keyCode==k``, ``{"accent-token":1}``, ``c?"metaKey":"ctrlKey"``), and rewriting
        them breaks the page a replay serves (and teaches the redactor code to scrub
        everywhere). Values learned elsewhere are still scrubbed from code by the redactor."""
        if "://" in text:
            text = _URL.sub(lambda m: self.url(m.group(0)), text)
        if ":" in text:
            text = _QUOTED_PAIR.sub(self._quoted_string, text)
        text = _AUTH_SCHEME.sub(self._credential, text)
        return _SHAPES.sub(lambda m: self.found(m.group(0), False), text)

    def _secret_group(self, m: re.Match[str], group: str, in_url: bool, loose: bool = False) -> str:
        """The match with ``group`` replaced when the match's ``key`` is a secret name."""
        key = unquote_plus(m["key"]) if in_url else m["key"]
        if not is_secret_name(key):
            return m.group(0)
        value = m[group]
        return _replace_group(m, group, self._loose(value, in_url) if loose else self.found(value, in_url))

    def _text_param(self, m: re.Match[str]) -> str:
        """A parameter in text outside a whole URL (``/cb?token=``); its value may hold a URL."""
        if is_secret_name(unquote_plus(m["key"])):
            return self._secret_group(m, "value", True)
        return _replace_group(m, "value", self._nested(m["value"], 1))

    def _quoted_pair(self, m: re.Match[str]) -> str:
        """A quoted value keeps its quotes; a number becomes the quoted marker (still valid JSON)."""
        if m["vq"] is not None:
            return self._secret_group(m, "value", False, loose=True)
        if not is_secret_name(m["key"]):
            return m.group(0)
        redacted = self.found(m["number"], False)
        return _replace_group(m, "number", redacted if redacted == m["number"] else json.dumps(redacted))

    def _quoted_string(self, m: re.Match[str]) -> str:
        """A quoted pair in code: its string when secret-named and shaped like a credential
        (:func:`worth_scrubbing`: ``"PWD":"/"`` is a path); never a number."""
        if m["vq"] is None or not is_secret_name(m["key"]) or not worth_scrubbing(m["value"]):
            return m.group(0)
        return _replace_group(m, "value", self.found(m["value"], False))

    def _credential(self, m: re.Match[str]) -> str:
        """``Bearer <token>`` in text; ``Basic understanding`` is prose, not a credential."""
        return _replace_group(m, "value", self.found(m["value"], False)) if worth_scrubbing(m["value"]) else m.group(0)

    def _tag(self, m: re.Match[str]) -> str:
        """``<input name="csrf" value="...">``, ``<input type="password" value="...">`` and
        ``<meta name="csrf-token" content="...">``."""
        tag = m.group(0)
        attributes = {a["name"].lower(): a for a in _ATTRIBUTE.finditer(tag)}
        names = [_attribute_value(attributes[k]) for k in ("name", "id", "autocomplete", "property") if k in attributes]
        secret = any(is_secret_name(n) for n in names) or _attribute_value(attributes.get("type")) == "password"
        target = attributes.get("value") or attributes.get("content")
        if not secret or target is None:
            return tag
        group = next(g for g in ("dq", "sq", "bare") if target[g] is not None)
        start, end = target.span(group)
        return tag[:start] + self._loose(target[group], False) + tag[end:]

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
        multipart, or text (HTML, scripts, plain)."""
        kind = mime.lower()
        if "x-www-form-urlencoded" in kind:
            return self.params(text)
        if "multipart/form-data" in kind:
            return self.multipart(text)
        if any(code in kind for code in CODE_TYPES):
            return self.code(text)
        stripped = text.lstrip()
        if "json" in kind or stripped[:1] in ("{", "["):
            redacted = self.json_text(text)
            return self._json_lines(text) if redacted == text and "\n" in stripped else redacted
        return self.text(text, prose=False)

    def _json_lines(self, text: str) -> str:
        """NDJSON and recorded WebSocket messages: one document per line."""
        return "\n".join(self.json_text(line) if line.strip() else line for line in text.split("\n"))


def _replace_group(m: re.Match[str], group: str, replacement: str) -> str:
    """The whole match with one group's text replaced."""
    start, end = m.span(group)
    whole = m.group(0)
    return whole[:start - m.start()] + replacement + whole[end - m.start():]


def _attribute_value(match: re.Match[str] | None) -> str:
    if match is None:
        return ""
    return next((match[g] for g in ("dq", "sq", "bare") if match[g] is not None), "")


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
