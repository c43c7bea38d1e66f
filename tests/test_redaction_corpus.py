"""Redaction never changes code or data that is not a secret, and still takes the secrets.

* Real code nobody here wrote — distribution bundles of widely used npm packages
  (``tests/realweb/npm_corpus.py``) — passes through the redactor byte-identical in every way the
  recorder applies it (``tests/realweb/redaction_check.py``): a sample by default, every file
  with ``MMINA_HEAVY=1`` (and in ``bench --only redaction``).
* Hostile code: secrets that sit in minified-looking code *are* taken (a key in a URL, a bearer
  token in a string, AWS- and Google-shaped keys, a JSONP token), and nothing around them moves.
* The issue's cases: ``x?"authorization_code":"authorizationCode"`` stays; the text of a failed
  ``type`` is a secret only when credential-shaped; a typed word password leaves response bodies
  alone but not mmina's rows; the ``tasks`` row loses the password its intent gave.
* Fuzzing (Hypothesis): any text under any type without error and idempotently; text made of
  non-credentials byte-identical; a JSON response changed only at its credentials' literals.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.redaction.redact import REDACTED, Redactor, typed_text_is_secret
from mmina.redaction.secret_names import is_secret_name
from mmina.redaction.secret_rules import URL_REDACTED
from mmina.redaction.secret_shapes import credential_shaped
from mmina.store import Store
from mmina.tasks.task import task_from_dict, task_row
from tests.heavy import sized
from tests.realweb.npm_corpus import corpus_files, sample_files
from tests.realweb.redaction_check import TYPED, check_corpus, episode_redactor

RESPONSE_TYPES = (
    "application/javascript",
    "text/javascript; charset=utf-8",
    "text/css",
    "application/json",
    "text/html; charset=utf-8",
    "text/plain",
    "application/x-ndjson",
    "image/svg+xml",
)

# ---------------------------------------------------------------- the npm corpus


def test_a_sample_of_real_npm_bundles_passes_byte_identical() -> None:
    """36 files (~4 MB) of ten packages, the API explorer's 1.5 MB bundle among them."""
    files = sample_files()
    result = check_corpus(files)
    assert result.files == len(files) >= 30 and any(p.name == "swagger-ui-bundle.js" for p in files)
    assert result.changes == [], result.changes[:5]


@pytest.mark.heavy
def test_every_file_of_the_npm_corpus_passes_byte_identical() -> None:
    """The whole corpus: 37 packages, ~420 files, ~210 MB."""
    result = check_corpus(corpus_files())
    assert result.files >= 300
    assert result.changes == [], result.changes[:5]


# ---------------------------------------------------------------- hostile code

AWS_SECRET = "9Qx7/Ke2Lm+Zr4TbV8nW1pYc0HsJ6dFgA3uE5kMi"
HOSTILE = {
    'const AWS={accessKeyId:"AKIAQ3EGRZ7TLM4XKP2B",secretAccessKey:"%s",region:"us-east-1"};'
    % AWS_SECRET: f'const AWS={{accessKeyId:"{REDACTED}",secretAccessKey:"{REDACTED}",region:"us-east-1"}};',
    (
        'fetch("https://maps.googleapis.com/maps/api/js?key=AIzaSyD9tSrke72PouQMnMXa7eZSW0jkFMBWYq'
        '&libraries=places")'
    ): f'fetch("https://maps.googleapis.com/maps/api/js?key={URL_REDACTED}&libraries=places")',
    'x.setRequestHeader("Authorization","Bearer 9f2aXk3Lq8Zr7Yt5");a?b:"c"': (
        f'x.setRequestHeader("Authorization","Bearer {REDACTED}");a?b:"c"'
    ),
    'h="Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N";': (
        f'h="Authorization: Bearer {REDACTED}";'
    ),
    'u="https://api.example.com/v1/parts?api_key=4f3c2a1b9e8d7c6b5a49&q=1",e.apiKey = "Zq81fKx02LmA9w";': (
        f'u="https://api.example.com/v1/parts?api_key={URL_REDACTED}&q=1",e.apiKey = "{REDACTED}";'
    ),
    'cb({"access_token": "Kp4Xw9Lm2Qz7Rt5Vn8Bc", "token_type": "bearer", "expires_in": 3600});': (
        f'cb({{"access_token": "{REDACTED}", "token_type": "bearer", "expires_in": 3600}});'
    ),
    'var k="sk-proj-Ab12Cd34Ef56Gh78Ij90",t=n?"authorization_code":"authorizationCode";': (
        f'var k="{REDACTED}",t=n?"authorization_code":"authorizationCode";'
    ),
}
"""Minified-looking code holding real secrets → what must be stored (everything else as it was)."""


@pytest.mark.parametrize("mime", ["application/javascript", "text/html", "text/plain"])
def test_secrets_in_minified_code_are_taken_and_nothing_else(mime: str) -> None:
    for code, expected in HOSTILE.items():
        redactor = Redactor()
        redactor.learn_body(code.encode(), mime, response=True)
        assert redactor.body(code.encode(), mime).decode() == expected, code
    learned = Redactor()
    learned.learn_body("\n".join(HOSTILE).encode(), "application/javascript", response=True)
    assert AWS_SECRET in learned.values and not any("authorization" in v.lower() for v in learned.values)
    assert learned.text(f"the page showed {AWS_SECRET}") == f"the page showed {REDACTED}", (
        "learned: scrubbed elsewhere"
    )


def test_the_issue_cases_stay_and_failed_types_are_not_secrets() -> None:
    """The API explorer's bundle: ternaries of OAuth flow names and the getters they name."""
    code = b'e=t?"authorization_code":"authorizationCode";get clientCredentials(){return this.x}arguments[5]'
    redactor = Redactor()
    for text in ("5", "KYO", "fahrenheit"):
        if typed_text_is_secret(text, True, None):
            redactor.learn_secret(text)
    redactor.learn_body(code, "application/javascript", response=True)
    assert redactor.body(code, "application/javascript") == code and not redactor.values
    assert redactor.text("93.1 fahrenheit") == "93.1 fahrenheit"


def test_a_typed_word_password_leaves_bodies_alone_but_not_rows() -> None:
    redactor = episode_redactor()
    page = b'<a href="/admin/">admin</a><script>role="admin";</script>'
    assert redactor.body(page, "text/html") == page
    assert (
        redactor.text("type [4] [admin] [press_enter_after=1]")
        == f"type [4] [{REDACTED}] [press_enter_after=1]"
    )
    assert (
        redactor.text("type [4] [1234] [press_enter_after=0]")
        == f"type [4] [{REDACTED}] [press_enter_after=0]"
    )
    assert (
        redactor.body(b"user=ada&note=admin", "application/x-www-form-urlencoded", response=False)
        == f"user=ada&note={REDACTED}".encode()
    ), "a request body is what the page sent: every secret goes"
    assert all(t not in redactor.traffic_text("http://h/admin/?q=default") for t in (REDACTED, URL_REDACTED))


def test_the_tasks_row_loses_the_password_its_intent_gave(tmp_path: Path) -> None:
    """The run's tasks are written before any episode; the episode that typed the password
    rewrites them without it (``Store.redact_tasks``), every other value kept."""
    password = "Tr0ub4dor&3"
    task = task_from_dict(
        {
            "intent": f"Log in as lovelace with password {password} and open the orders.",
            "start_url": "http://shop.test/",
            "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["3"]}},
        },
        "t/1",
    )
    other = task_from_dict(
        {
            "intent": "Count the orders.",
            "start_url": "http://shop.test/",
            "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["3"]}},
        },
        "t/2",
    )
    store = Store.open(tmp_path / "store", create=True)
    store.begin_run("r1", {"task_suite_sha256": "x"}, [task_row(task), task_row(other)])
    redactor = Redactor()
    redactor.learn_secret(password)
    assert store.redact_tasks("r1", redactor.row) == 0, "already redacted in prose when written"
    word = Redactor()
    word.learn_secret("lovelace")
    assert store.redact_tasks("r1", word.row) == 1
    rows = {r["task_id"]: r for r in store.read("tasks", run_id="r1").to_pylist()}
    assert password not in json.dumps(rows, default=str) and "lovelace" not in rows["t/1"]["intent"]
    assert rows["t/2"] == {**task_row(other), "run_id": "r1"} and rows["t/1"]["task_sha256"] == task.sha256


# ---------------------------------------------------------------- fuzzing

NOT_CREDENTIALS = (
    "authorizationCode",
    "clientCredentials",
    "token",
    "apiKey",
    "password",
    "Bearer",
    "Basic",
    "sessionId",
    "csrf_token",
    "key",
    "secret",
    "miCopyLinesUp",
    "6.0.0-beta1",
    "#/definitions/expr",
    "https://example.com/a?x=1&token=",
    "?key=",
    "&sid=",
    "=",
    ":",
    '"',
    "'",
    "`",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ";",
    ",",
    "?",
    ".",
    "\\n",
    "\n",
    '\\"',
    "&&",
    "==",
    "<input ",
    "value=",
    "name=",
    "type=password",
    "<meta ",
    "content=",
    "42",
    "3600",
    "true",
    "null",
    "admin",
    "fahrenheit",
    "Int32Array",
    "x86_64",
    "utf-8",
    "data:image/png;base64,",
    "//# sourceMappingURL=",
    "eyJ",
    "sk-",
)
"""Pieces of code and data that are not credentials (each checked by the test), to build text from."""


def texts_without_credentials() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(NOT_CREDENTIALS), max_size=40).map(" ".join)


def _fuzz_any_text(text: str, mime: str) -> None:
    redactor = episode_redactor()
    data = text.encode("utf-8", "surrogatepass")
    redactor.learn_body(data, mime, response=True)
    once = redactor.body(data, mime)
    assert redactor.body(once, mime) == once, "idempotent"
    assert redactor.text(redactor.text(text)) == redactor.text(text)


def _fuzz_no_credential(text: str, mime: str) -> None:
    redactor = episode_redactor()
    data = text.encode()
    redactor.learn_body(data, mime, response=True)
    assert redactor.body(data, mime) == data


@given(st.text(max_size=400), st.sampled_from(RESPONSE_TYPES))
@settings(max_examples=200, deadline=None)
def test_any_text_under_any_type_is_redacted_without_error_and_idempotently(text: str, mime: str) -> None:
    _fuzz_any_text(text, mime)


@given(texts_without_credentials(), st.sampled_from(RESPONSE_TYPES))
@settings(max_examples=200, deadline=None)
def test_text_without_credentials_comes_back_byte_identical(text: str, mime: str) -> None:
    assert not any(credential_shaped(piece) for piece in NOT_CREDENTIALS)
    _fuzz_no_credential(text, mime)


@pytest.mark.heavy
@given(st.text(max_size=2000), texts_without_credentials(), st.sampled_from(RESPONSE_TYPES))
@settings(max_examples=5000, deadline=None)
def test_long_fuzzing_of_the_redactor(text: str, clean: str, mime: str) -> None:
    _fuzz_any_text(text, mime)
    _fuzz_no_credential(clean, mime)


CREDENTIAL = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=20, max_size=32).filter(
    credential_shaped
)
PLAIN_VALUE = st.one_of(
    st.sampled_from(NOT_CREDENTIALS[:12]), st.integers(-(10**6), 10**6), st.booleans(), st.none()
)


@st.composite
def responses(draw: st.DrawFn) -> tuple[Any, list[str]]:
    """A JSON response: credentials under secret-named keys, anything else that is not one."""
    found: list[str] = []

    def leaf(secret_key: bool) -> Any:
        if secret_key and draw(st.booleans()):
            found.append(draw(CREDENTIAL))
            return found[-1]
        return draw(PLAIN_VALUE)

    keys = st.sampled_from(("access_token", "apiKey", "q", "items", "token_type", "label", "sessionId"))
    document = {key: leaf(is_secret_name(key)) for key in draw(st.lists(keys, max_size=6))}
    document["list"] = [{key: leaf(is_secret_name(key))} for key in draw(st.lists(keys, max_size=3))]
    return document, found


def _credentials_only(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: _credentials_only(v) for k, v in document.items()}
    if isinstance(document, list):
        return [_credentials_only(v) for v in document]
    return REDACTED if isinstance(document, str) and credential_shaped(document) else document


@given(responses(), st.sampled_from([None, 1, 2]), st.sampled_from([(",", ":"), (", ", ": ")]))
@settings(max_examples=200, deadline=None)
def test_a_json_response_changes_only_at_its_credentials(
    response: tuple[Any, list[str]], indent: int | None, separators: tuple[str, str]
) -> None:
    document, planted = response
    text = json.dumps(document, indent=indent, separators=separators)
    redacted = Redactor().body(text.encode(), "application/json").decode()
    assert redacted == json.dumps(_credentials_only(document), indent=indent, separators=separators)
    assert not any(p in redacted for p in planted)


def test_random_tokens_are_credentials_and_identifiers_are_not() -> None:
    """The shape on what it must tell apart (the corpus measure is in ``secret_shapes``)."""
    tokens = [secrets.token_urlsafe(24) for _ in range(300)] + [secrets.token_hex(16) for _ in range(100)]
    assert sum(map(credential_shaped, tokens)) >= 0.93 * len(tokens)
    identifiers = (
        "XMLHttpRequestEventTarget",
        "getElementById",
        "readUInt16LE",
        "sha256WithRSAEncryption",
        "miGoToBracket",
        "vec3ToVec4",
        "h264High10",
        "utf8mb4_unicode_ci",
        "vs/base/common/arrays",
        "eyJzZXNzaW9uX2lkIjogImRlZmF1bHQifQ",
        "0b00000000000000000000011111000000",
        *TYPED[1:],
    )
    assert [i for i in identifiers if credential_shaped(i)] == []
    assert all(
        credential_shaped(t)
        for t in (
            "Zq81fKx02LmA9w",
            "68b25f31",
            "550e8400-e29b-41d4-a716-446655440000",
            AWS_SECRET,
            "AKIAQ3EGRZ7TLM4XKP2B",
            string.hexdigits[:16] + "9a",
        )
    )


HEX_TOKEN = st.text(alphabet="0123456789abcdef", min_size=16, max_size=64).filter(
    lambda t: any(c.isdigit() for c in t) and any(c.isalpha() for c in t) and not re.fullmatch("0b[01]+", t)
)
"""Hex as machines make keys (``secrets.token_hex``, ``uuid4().hex``): both digits and letters."""


@given(HEX_TOKEN, st.sampled_from(("", "0b", "json-token-planted-", "sess_")))
@settings(max_examples=sized(300, 5000), deadline=None)
def test_every_hex_token_is_a_credential_whatever_it_begins_with(token: str, prefix: str) -> None:
    """A uuid4().hex beginning ``0b`` (1 in 256) was taken for a binary literal and kept, JSON
    ``access_token`` and all; a number literal is one only when it is one (``0b0110``,
    ``0x6a09e667f3bcc908``)."""
    assert credential_shaped(prefix + token)
    redactor = Redactor()
    body = json.dumps({"access_token": prefix + token, "token_type": "bearer"}).encode()
    redactor.learn_body(body, "application/json", response=True)
    assert json.loads(redactor.body(body, "application/json")) == {
        "access_token": REDACTED,
        "token_type": "bearer",
    }


def test_number_literals_are_not_credentials() -> None:
    assert not any(
        map(
            credential_shaped,
            (
                "0b00000000000000000000011111000000",
                "0x6a09e667f3bcc908",
                "0xffffffffffffffffn",
                "0o7777777777",
            ),
        )
    )
