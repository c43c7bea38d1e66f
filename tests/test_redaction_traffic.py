"""One redaction rule for names, in every structured place, on real traffic (issue 56, item 7).

* Real traffic nobody here wrote — the URLs, request and response bodies and socket messages of
  the real applications' recorded episodes, and JSON documents shipped in packages (AWS's API
  examples, JSON schemas, OpenAPI documents, npm manifests and lock files) — passes through the
  redactor as the recorder applies it (``tests/realweb/traffic_check.py``): only credentials
  change, and every credential planted in its structured places (by name with values that do not
  look like one, by shape under ambiguous names) is gone. A sample by default, everything with
  ``MMINA_HEAVY=1`` (and in ``bench --only redaction``).
* The rules the corpus taught, each on its case: socket messages read as JSON in both
  directions, engine.io packets over HTTP, a connection's session id kept, type names, ids and
  ARNs of keys, pagination tokens, versions and dates, file paths, a response's JSON schema.
* Fuzzing (Hypothesis) over JSON with random key names and values, in every structured body
  type: non-credentials byte-identical, credentials by name always redacted.
"""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mmina.redaction.redact import REDACTED, Redactor
from mmina.redaction.secret_names import AMBIGUOUS, CREDENTIAL, name_kind
from mmina.redaction.secret_rules import SOCKET_TYPE, STRICT, URL_REDACTED
from mmina.redaction.secret_shapes import KNOWN_KEYS, credential_shaped, data_token
from tests.heavy import sized
from tests.realweb.traffic_check import TOKEN_NAMED_DATA, TrafficResult, check_traffic, socket_line
from tests.realweb.traffic_corpus import (
    API,
    APPLICATION,
    PACKAGE,
    PLACES,
    REQUEST,
    RESPONSE,
    URL,
    Item,
    api_items,
    app_items,
    kind_of,
    package_items,
    sample_items,
)

# ---------------------------------------------------------------- the corpus


def test_a_sample_of_real_traffic_changes_only_credentials_and_loses_every_planted_one() -> None:
    """The sample applications' traffic (URLs, form and JSON requests, JSON responses), GitHub's
    recorded API traffic, and a spread of package documents, all of AWS's API examples among them."""
    items = sample_items()
    result = check_traffic(items)
    assert {i.place for i in items} >= {URL, REQUEST, RESPONSE} and result.items >= 300
    assert {kind_of(i.source) for i in items} == {APPLICATION, API, PACKAGE}
    _passes(result, traffic=[i for i in items if kind_of(i.source) != PACKAGE])


@pytest.mark.heavy
def test_every_applications_traffic_changes_only_credentials() -> None:
    """Every real application's episode and GitHub's recorded API traffic: ~770 items, sockets
    (NiceGUI's socket.io, Shiny's JSON) included, ~1,150 credentials planted."""
    items = app_items() + api_items()
    result = check_traffic(items)
    assert {i.place for i in items} == set(PLACES) and len(result.sources) >= 30
    _passes(result, traffic=items)


@pytest.mark.heavy
def test_every_package_document_changes_only_credentials() -> None:
    """~780 documents (~8 MB) of ~125 packages."""
    result = check_traffic(package_items())
    assert result.items >= 400
    _passes(result, traffic=[])


def _passes(result: TrafficResult, traffic: list[Item]) -> None:
    assert result.planted >= 100 and result.missed == [], result.missed[:5]
    assert result.found == result.planted and result.changed_around == [], result.changed_around[:5]
    changed = result.changed_non_secrets
    sources = {i.source for i in traffic}
    assert [r for r in changed if r.source in sources] == [], "a non-secret of real traffic was changed"
    assert [r for r in changed if r.name.lower() not in TOKEN_NAMED_DATA] == [], changed[:5]


# ---------------------------------------------------------------- the rules the corpus taught

SHAPED = "Zq81fKx02LmA9wRt5Yp3"
PLAIN = "kxqzvt4pwmrlbnhsdq"
"""An 18-character token that does not look like a credential (one digit)."""


def _response(text: str, mime: str = "application/json") -> str:
    return Redactor().body(text.encode(), mime).decode()


def test_socket_messages_are_json_in_both_directions_and_keep_a_connections_session() -> None:
    """What the page sent by the request rules, what it received by the response rules; the
    recorded line keeps every other byte; a session's id names the socket's own connection."""
    sent = '42["login",{"password":"hunter2","sessionId":"%s","sid":"%s"}]' % (SHAPED, SHAPED)
    received = (
        '{"config":{"sessionId":"25d673759801c907c6ddad2cd771e2030664ab","access_token":"%s"},'
        '"key":"0763704a3becbcec20722167680ff91b/table.js","sig":"%s"}' % (PLAIN, SHAPED)
    )
    body = socket_line(sent, "send") + "\n" + socket_line(received, "receive") + "\n"
    lines = Redactor().body(body.encode(), SOCKET_TYPE).decode().splitlines()
    assert json.loads(lines[0])["data"] == sent.replace("hunter2", REDACTED)
    assert json.loads(lines[1])["data"] == received.replace(PLAIN, REDACTED).replace(SHAPED, REDACTED)
    assert lines[0].startswith('{"type":"send","time":1764000000000.5,"opcode":1,"data":"42[')
    binary = json.dumps({"type": "receive", "time": 1.0, "opcode": 2, "data": "eyJ0b2tlbiI6ICJ4In0="})
    assert Redactor().body(binary.encode(), SOCKET_TYPE).decode() == binary


def test_socket_io_over_long_polling_is_read_as_socket_messages() -> None:
    polled = (
        '0{"sid":"Lbo5JLzTotvW3g2LAAAA","upgrades":["websocket"],"pingInterval":25000}\x1e'
        '40{"sid":"%s","auth_token":"%s"}\x1e42["update",{"orderByKey":"attributes.start_time"}]'
        % (SHAPED, PLAIN)
    )
    assert _response(polled, "text/plain; charset=UTF-8") == polled.replace(PLAIN, REDACTED)
    url = f"ws://app.test/api/kernels/k1/channels?session_id={SHAPED}&token={PLAIN}"
    assert STRICT.url(url) == url.replace(PLAIN, URL_REDACTED), "a socket's own session kept, its token not"
    assert STRICT.url(url.replace("ws://", "http://")) == url.replace("ws://", "http://").replace(
        PLAIN, URL_REDACTED
    ).replace(SHAPED, URL_REDACTED)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("AWS::IAM::AccessKey", None),
        ("KmsKeyId", None),
        ("SecretId", None),
        ("private_key_id", None),
        ("KeyArn", None),
        ("CustomerMasterKeySpec", None),
        ("PasswordLastUsed", None),
        ("NextToken", None),
        ("nextPageToken", None),
        ("ChangeToken", None),
        ("continuation_token", None),
        ("session_id", "ambiguous"),
        ("sessionId", "ambiguous"),
        ("access_token", CREDENTIAL),
        ("SessionToken", CREDENTIAL),
        ("SecretAccessKey", CREDENTIAL),
        ("NewPassword", CREDENTIAL),
        ("__FORM_TOKEN", CREDENTIAL),
    ],
)
def test_names_the_corpus_taught(name: str, kind: str | None) -> None:
    assert name_kind(name) == kind


def test_values_the_corpus_taught() -> None:
    """Versions, dates and file paths are data under any name; a drawn token stays a token."""
    assert not any(
        data_token(v) for v in ("^4.6.6", "v1.2.30", "6.0.0-beta1", "2016-09-08T21:47:36Z", "12:30:00")
    )
    assert all(data_token(v) for v in (PLAIN, "483920", "Tr0ub4dor&3", "1prtug4ry4y"))
    assert not any(
        credential_shaped(v)
        for v in ("0763704a3becbcec20722167680ff91b/table.js", "assets/index-4f3c2a1b9e8d7c6b.js")
    )
    lock = {
        "dependencies": {"glsl-token-string": "^1.0.1", "mock-token": "^4.6.6"},
        "packages": {
            "node_modules/glsl-token-string": {
                "version": "1.0.1",
                "resolved": "https://registry.npmjs.org/glsl-token-string/-/glsl-token-string-1.0.1.tgz",
                "integrity": "sha512-1mtQ47Uxd47wrovl"
                "+T6RshKGkRRCYWhnELmkEcUAPALWGTFe2XZpH3r45XAwL2B6v+l0KNsCn",
            }
        },
    }
    text = json.dumps(lock, indent=2)
    assert _response(text) == text


def test_a_response_inherits_no_name_through_an_object() -> None:
    """A JSON schema's ``Password`` property is a schema; what a page sent keeps inheriting."""
    schema = (
        '{"properties": {"Password": {"type": "string", "pattern": "^[a-zA-Z0-9]+$", "$ref": "#/defs/p1"}},'
        ' "credentials": {"password": "%s", "user": "ada42x"}}' % PLAIN
    )
    assert _response(schema) == schema.replace(PLAIN, REDACTED)
    sent = json.loads(Redactor().body(schema.encode(), "application/json", response=False))
    assert sent["credentials"] == {"password": REDACTED, "user": REDACTED}


# ---------------------------------------------------------------- fuzzing

WORD = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
CREDENTIAL_WORDS = (
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "password",
    "api_key",
    "private_key",
    "auth_token",
    "session_token",
    "csrf_token",
    "apiKey",
    "secretKey",
    "passwd",
)


@st.composite
def credential_names(draw: st.DrawFn) -> str:
    """A credential's name inside a longer one, in any case style: ``billing_api_key``, ``userPassword``."""
    prefix = draw(st.lists(WORD, max_size=2))
    word = draw(st.sampled_from(CREDENTIAL_WORDS))
    style = draw(st.sampled_from(("_", "-", ".", "camel")))
    if style == "camel":
        return "".join([*prefix, word[:1].upper() + word[1:]]) if prefix else word
    return style.join([*prefix, word])


AMBIGUOUS_WORDS = ("key", "sig", "signature", "pin", "auth")
"""Ambiguous words (a connection's ``session``/``sid`` apart: see the socket test)."""


@st.composite
def ambiguous_names(draw: st.DrawFn) -> str:
    """An ambiguous word inside a longer name: ``orderByKey``, ``cache-sig``, ``auth``."""
    words = [*draw(st.lists(WORD, max_size=2)), draw(st.sampled_from(AMBIGUOUS_WORDS))]
    name = (
        words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])
        if draw(st.booleans())
        else "_".join(words)
    )
    assume(name_kind(name) == AMBIGUOUS)
    return name


SHAPED_TOKENS = (
    st.text(alphabet=string.ascii_letters + string.digits, min_size=20, max_size=32)
    .map(lambda token: "~" + token)
    .filter(credential_shaped)
)
PLAIN_NAMES = st.text(
    alphabet=string.ascii_letters + string.digits + "_-.$@ ", min_size=1, max_size=24
).filter(lambda name: name_kind(name) is None)
SAID_WORDS = ("pass", "pin", "api", "token", "secret", "earer", "basic")
"""What prose rules read in a text (``the password is …``, ``Bearer …``): kept out of :data:`TEXT`."""
TEXT = st.text(alphabet=string.ascii_letters + string.digits + " .,-_/#()!?'éü\"\\", max_size=40).filter(
    lambda text: KNOWN_KEYS.search(text) is None and not any(w in text.lower() for w in SAID_WORDS)
)
"""Values that hold nothing a rule reads (no ``=``, ``:``, URL, auth scheme, secret word or known key)."""
TOKENS = (
    st.text(alphabet=string.ascii_letters + string.digits + "-_.+/", min_size=6, max_size=40)
    .map(lambda token: "~" + token)
    .filter(data_token)
)
"""Planted credentials: each holds a ``~``, which nothing else in a drawn document does."""
LEAVES = st.one_of(
    TEXT,
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)


def documents(names: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        LEAVES,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
        max_leaves=20,
    )


@st.composite
def planted_documents(draw: st.DrawFn) -> tuple[Any, list[str]]:
    """A document of non-secret names with, in some objects, a credential under a credential's name,
    a credential-shaped one under an ambiguous name, or data under an ambiguous name."""
    document = draw(documents(PLAIN_NAMES))
    planted: list[str] = []

    def plant(value: Any) -> Any:
        if isinstance(value, list):
            return [plant(v) for v in value]
        if not isinstance(value, dict):
            return value
        value = {k: plant(v) for k, v in value.items()}
        kind = draw(st.sampled_from(("none", "credential", "shaped", "unshaped")))
        if kind == "credential":
            planted.append(draw(TOKENS))
            value = {draw(credential_names()): planted[-1], **value}
        elif kind == "shaped":
            planted.append(draw(SHAPED_TOKENS))
            value = {draw(ambiguous_names()): planted[-1], **value}
        elif kind == "unshaped":  # an ambiguous word over data: kept
            value = {draw(ambiguous_names()): draw(TEXT.filter(lambda v: not credential_shaped(v))), **value}
        return value

    return plant({"data": document}), planted


def _bodies(document: Any) -> list[tuple[str, str]]:
    """One document as every structured body: JSON (compact and indented), NDJSON, event-stream
    data, a received socket message (socket.io's ``42[...]``)."""
    compact, indented = (
        json.dumps(document, separators=(",", ":"), ensure_ascii=False),
        json.dumps(document, indent=2),
    )
    return [
        (compact, "application/json"),
        (indented, "application/json; charset=utf-8"),
        (f'{{"n":1}}\n{compact}\n', "application/x-ndjson"),
        (f"event: update\ndata: {compact}\n\n", "text/event-stream"),
        (socket_line(f'42["update",{compact}]', "receive"), SOCKET_TYPE),
    ]


@given(documents(PLAIN_NAMES))
@settings(max_examples=sized(150, 3000), deadline=None)
def test_json_of_non_secret_names_comes_back_byte_identical(document: Any) -> None:
    for text, mime in _bodies(document):
        redactor = Redactor()
        redactor.learn_body(text.encode(), mime, response=True)
        assert redactor.body(text.encode(), mime).decode() == text, mime
        assert Redactor().body(text.encode(), mime, response=False).decode() == text, mime


@given(planted_documents())
@settings(max_examples=sized(150, 3000), deadline=None)
def test_credentials_by_name_are_always_redacted_and_nothing_else(planted: tuple[Any, list[str]]) -> None:
    document, secrets = planted
    for text, mime in _bodies(document):
        for response in (True, False):
            redactor = Redactor()
            redactor.learn_body(text.encode(), mime, response=response)
            redacted = redactor.body(text.encode(), mime, response=response).decode()
            expected = text
            for secret in sorted(set(secrets), key=len, reverse=True):
                literal = json.dumps(secret, ensure_ascii=False)[1:-1]
                expected = expected.replace(literal, REDACTED)
            assert not [s for s in secrets if json.dumps(s)[1:-1] in redacted], (mime, redacted)
            assert redacted == expected, mime


@given(st.lists(st.tuples(st.one_of(PLAIN_NAMES, credential_names()), st.one_of(TEXT, TOKENS)), max_size=6))
@settings(max_examples=sized(150, 3000), deadline=None)
def test_a_query_or_form_changes_only_at_credentials_names(pairs: list[tuple[str, str]]) -> None:
    encoded = [(quote_plus(k), quote_plus(v)) for k, v in pairs]
    query = "&".join(f"{k}={v}" for k, v in encoded)
    expected = "&".join(
        f"{k}={URL_REDACTED if name_kind(n) == CREDENTIAL and v else v}"
        for (n, _), (k, v) in zip(pairs, encoded)
    )
    assert STRICT.url(f"http://app.test/search?{query}") == f"http://app.test/search?{expected}"
    assert (
        Redactor().body(query.encode(), "application/x-www-form-urlencoded", response=False).decode()
        == expected
    )
