"""Secrets never reach the store nor the terminal: each kind planted, recorded through the real
CLI (local and ``s3://`` stores), and every byte of the store searched — each Parquet file's
values decoded, every blob pack's blobs — plus the captured terminal output; then the rules
themselves, property-tested over generated URLs, headers, JSON and form bodies.

The planted site (a real HTTP server) sets and echoes secrets every way the fuzz pass found
in plain text: custom auth headers, cookies (from the server and from JavaScript), a token in
the start URL (so also in ``Referer``), a redirect's ``Location``, a ``redirect_url`` parameter
holding a URL with a token, a fragment, a JSON response body, JSON and form request bodies, a
hidden CSRF field and a ``<meta>`` token, a WebSocket (a password sent, tokens and the socket's
own session id received). The model (``tests/fake_openai.py``) types a password
into a password field, into an "API key" text field and into an element that is not there; its
base URL carries ``user:PASS@``; another endpoint echoes the key in its 401.
"""

from __future__ import annotations

import base64
import html
import http.server
import json
import os
import random
import re
import string
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, quote_plus, urlencode, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mmina.fixtures.hardweb.server import websocket_accept, websocket_receive, websocket_send
from mmina.models.model_input import load_request
from mmina.redaction.redact import (
    REDACTED,
    Redactor,
    configured_secrets,
    literal_pattern,
    typed_text_is_secret,
)
from mmina.redaction.secret_names import CREDENTIAL, is_secret_name, name_kind
from mmina.redaction.secret_rules import STRICT, URL_REDACTED
from mmina.redaction.secret_shapes import credential_shaped
from mmina.replayer.fidelity import tree_change
from mmina.store import Store
from tests.fake_openai import FakeOpenAI
from tests.heavy import sized
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.store_helpers import REPO_ROOT

P = {
    name: f"{name.lower().replace('_', '-')}-planted-{uuid.uuid4().hex}"
    for name in (
        "START_KEY",
        "REF_TOKEN",
        "PASSWORD",
        "MISSING_PASSWORD",
        "API_TYPED",
        "CSRF",
        "META_TOKEN",
        "SESSION_COOKIE",
        "LOCATION_TOKEN",
        "ORDERS_KEY",
        "BEARER",
        "X_ACCESS",
        "X_SESSION",
        "JS_COOKIE",
        "JSON_TOKEN",
        "BODY_SECRET",
        "FORM_TOKEN",
        "IMG_TOKEN",
        "KEY_PARAM",
        "FRAGMENT",
        "REDIRECT_TOKEN",
        "HTML_TOKEN",
        "ENV_KEY",
        "BASE_PASS",
        "WS_SENT",
        "WS_TOKEN",
    )
}
"""Every planted value, distinct per test session; finding one anywhere is a leak. Each ends in
32 random hex digits: shaped like the credentials machines make, as a real secret is (a word
typed into a password field is scrubbed from mmina's rows only: see test_redaction_corpus.py)."""
WS_PLAIN = "".join(random.sample(string.ascii_lowercase, 16) + random.choices(string.digits, k=2))
"""A refresh token a socket message carries that does not look like a credential (18 lower-case
letters and digits): its name alone makes it one."""
SOCKET_SESSION = str(uuid.uuid4())
"""The socket's own session id, in its messages: it names the connection, which ends with the
episode, and is kept (docs/redaction.md)."""
BASIC = base64.b64encode(f"user:{P['BASE_PASS']}".encode()).decode()
"""What the client sends for a base URL with ``user:PASS@`` (and an endpoint may echo)."""
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)

LOGIN = f"""<!doctype html><html><head><title>Sign in</title></head><body><main><h1>Sign in</h1>
<form method="post" action="/login">
<input type="hidden" name="csrf" value="{P["CSRF"]}">
<label>User <input name="user" value="ada"></label>
<label>API key <input name="api_key" type="text"></label>
<label>Password <input type="password" name="password"></label>
<button>Log in</button></form></main></body></html>"""
ACCOUNT = f"""<!doctype html><html><head><title>Account</title>
<meta name="csrf-token" content="{P["META_TOKEN"]}"></head><body><main><h1>Welcome</h1>
<p id="orders">loading</p><img src="/pixel.png?token={P["IMG_TOKEN"]}" alt="pixel" width="40" height="40">
<script>
document.cookie = "js_session={P["JS_COOKIE"]}; path=/";
fetch('/api/orders?api_key={P["ORDERS_KEY"]}', {{headers: {{'Authorization': 'Bearer {P["BEARER"]}',
  'X-Access-Token': '{P["X_ACCESS"]}', 'X-Session': '{P["X_SESSION"]}'}}}})
  .then(r => r.json()).then(d => {{ document.getElementById('orders').textContent = d.orders + ' orders'; }});
fetch('/api/profile', {{method: 'POST', headers: {{'Content-Type': 'application/json'}},
  body: JSON.stringify({{client_secret: '{P["BODY_SECRET"]}', q: 1}})}});
fetch('/api/form', {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}},
  body: 'user=ada&refresh_token={P["FORM_TOKEN"]}'}});
const socket = new WebSocket('ws://' + location.host + '/ws');
socket.onopen = () => socket.send(JSON.stringify({{type: 'hello', password: '{P["WS_SENT"]}'}}));
socket.onmessage = event => {{ document.getElementById('socket').textContent = \
'socket ' + JSON.parse(event.data).type; }};
</script><p id="socket">socket closed</p></main></body></html>"""
LANDING = f"""<!doctype html><html><head><title>Landing</title></head><body><main><h1>Welcome back</h1>
<p>Your token is {P["REDIRECT_TOKEN"]}</p><a href="/doc?auth_token={P["HTML_TOKEN"]}">Docs</a></main></body></html>"""


class _PlantedSite(http.server.BaseHTTPRequestHandler):
    """Sets, sends and echoes every kind of secret (see the module docstring)."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(
        self, status: int, body: bytes | str, content_type: str = "text/html", headers: tuple = ()
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        pages = {
            "/account": ACCOUNT,
            "/landing": LANDING,
            "/report": "<title>Report</title><h1>Report</h1>",
            "/doc": "<title>Docs</title><h1>Docs</h1>",
            "/": LOGIN,
        }
        if path == "/ws":
            self._socket()
        elif path == "/api/orders":
            self._send(
                200,
                json.dumps({"orders": 3, "access_token": P["JSON_TOKEN"], "token_type": "bearer"}),
                "application/json",
            )
        elif path == "/pixel.png":
            self._send(200, PNG, "image/png")
        elif path == "/go":
            self._send(302, b"", headers=(("Location", parse_qs(query)["redirect_url"][0]),))
        else:
            self._send(200 if path in pages else 404, pages.get(path, "not found"))

    def _socket(self) -> None:
        """A WebSocket that answers the page's hello with tokens and its own session id."""
        self.protocol_version = "HTTP/1.1"
        websocket_accept(self)
        while websocket_receive(self.rfile) is not None:
            websocket_send(
                self.wfile,
                json.dumps(
                    {
                        "type": "welcome",
                        "access_token": P["WS_TOKEN"],
                        "refresh_token": WS_PLAIN,
                        "session_id": SOCKET_SESSION,
                    }
                ),
            )
        self.close_connection = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/login":
            self._send(
                303,
                b"",
                headers=(
                    ("Location", f"/account?session_token={P['LOCATION_TOKEN']}"),
                    ("Set-Cookie", f"sid={P['SESSION_COOKIE']}; Path=/; HttpOnly"),
                ),
            )
        else:
            self._send(200, b'{"ok": true}', "application/json")


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PlantedSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _element(role: str, name: str, observation: str) -> str:
    found = re.search(rf'\[(\d+)\] {role} "{re.escape(name)}"', observation)
    return found.group(1) if found else "0"


class SecretTyper:
    """The model's policy: types three secrets (an API key field, an element that is not there,
    a password field), signs in, follows links carrying tokens, stops."""

    def __init__(self, site: str) -> None:
        self.site, self.calls = site, 0

    def __call__(self, observation: str) -> str:
        self.calls += 1
        landing = quote(f"{self.site}/landing?token={P['REDIRECT_TOKEN']}", safe="")
        script = {
            1: lambda: f"type [{_element('textbox', 'API key', observation)}] [{P['API_TYPED']}] [0]",
            2: lambda: f"type [9999] [{P['MISSING_PASSWORD']}] [0]",
            3: lambda: f"type [{_element('textbox', 'Password', observation)}] [{P['PASSWORD']}] [0]",
            4: lambda: f"click [{_element('button', 'Log in', observation)}]",
            5: lambda: f"goto [{self.site}/report?key={P['KEY_PARAM']}#access_token={P['FRAGMENT']}]",
            6: lambda: f"goto [{self.site}/go?redirect_url={landing}]",
        }
        return script.get(self.calls, lambda: "stop [3 orders]")()


def _task(folder: Path, site: str) -> Path:
    """A task whose start URL and reference URL carry tokens, and whose intent gives the password
    (the ``tasks`` row is written before the episode types it: the episode scrubs it there)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "1.json").write_text(
        json.dumps(
            {
                "intent": f"Sign in with the key you were given and the password {P['PASSWORD']}, "
                "and count the orders.",
                "start_url": f"{site}/?api_key={P['START_KEY']}",
                "eval": {
                    "eval_types": ["string_match"],
                    "reference_answers": {"must_include": ["3"]},
                    "reference_url": f"{site}/landing?token={P['REF_TOKEN']}",
                },
                "cnt_hop": 2,
                "procedure": ["127.0.0.1", "end"],
            }
        )
    )
    return folder


def mmina(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The real command line in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "mmina", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=env,
    )


ECHOES = ("echo", "echo-basic")
"""The runs whose endpoint quotes the key it got back in its 401."""


def record_planted(
    store: str, site: str, tasks: Path, extra_env: dict[str, str], echoes: tuple[str, ...] = ECHOES
) -> list[str]:
    """Record the planted task three ways into ``store``; returns every command's terminal output.

    ``typer``: the model types the secrets, its base URL carries ``user:PASS@``; ``echo``: an
    endpoint answers 401 quoting the key it got; ``echo-basic``: the same behind ``user:PASS@``
    (the client then sends the password as a Basic credential, which the endpoint quotes).
    ``echoes`` says which of the last two are recorded.
    """
    outputs = []
    base = {**os.environ, **extra_env, "OPENAI_API_KEY": P["ENV_KEY"]}
    with FakeOpenAI(policy=SecretTyper(site)) as model:
        proc = mmina(
            "record",
            "--tasks",
            str(tasks),
            "--agent",
            "openai",
            "--model",
            "fake",
            "--run-id",
            "typer",
            "--store",
            store,
            "--format",
            "json",
            env={**base, "OPENAI_BASE_URL": model.url.replace("://", f"://user:{P['BASE_PASS']}@")},
        )
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["episodes"][0]["status"] == "completed", proc.stdout
    userinfos = {"echo": "", "echo-basic": f"user:{P['BASE_PASS']}@"}
    for run_id, userinfo in ((run_id, userinfos[run_id]) for run_id in echoes):
        # the endpoint check before the run passes; then every request fails, quoting the key
        with FakeOpenAI(fail_after=1, fail_status=401, echo_key=True) as model:
            proc = mmina(
                "record",
                "--tasks",
                str(tasks),
                "--agent",
                "openai",
                "--model",
                "fake",
                "--run-id",
                run_id,
                "--store",
                store,
                env={**base, "OPENAI_BASE_URL": model.url.replace("://", f"://{userinfo}")},
            )
            outputs.append(proc.stdout + proc.stderr)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            assert model.requests and "1 error(s)" in proc.stdout, proc.stdout
    return outputs


def _leaves(value: Any) -> Iterator[bytes]:
    """Every string and bytes value inside a decoded Parquet value (lists and structs opened)."""
    if isinstance(value, bytes):
        yield value
    elif isinstance(value, str):
        yield value.encode("utf-8", "surrogatepass")
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield str(value).encode()


def decoded(data: bytes) -> bytes:
    """A file's bytes, and for a Parquet file every value decoded (compression would hide a
    substring otherwise; blob packs are Parquet too, so every blob is searched)."""
    if not data.startswith(b"PAR1"):
        return data
    table = pq.read_table(pa.BufferReader(data))
    parts = [data, str(table.schema.metadata).encode()]
    for column in table.columns:
        for value in column.to_pylist():
            parts.extend(_leaves(value))
    return b"\n".join(parts)


def forms(value: str) -> list[bytes]:
    """How a planted value could be written: as is, percent-encoded, base64."""
    return [value.encode(), quote(value, safe="").encode(), base64.b64encode(value.encode())]


def leaked(files: dict[str, bytes], outputs: list[str], extra: dict[str, str] | None = None) -> list[str]:
    """Planted values (in any form) found in any file or in the terminal output."""
    planted = {**P, "BASIC": BASIC, "WS_PLAIN": WS_PLAIN, **(extra or {})}
    found = []
    for name, data in files.items():
        content = decoded(data) + name.encode()
        found += [
            f"{key} in {name}" for key, value in planted.items() if any(f in content for f in forms(value))
        ]
    terminal = "\n".join(outputs).encode()
    found += [
        f"{key} on the terminal" for key, value in planted.items() if any(f in terminal for f in forms(value))
    ]
    return found


def local_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def by_path(requests: list[dict[str, Any]], path: str) -> dict[str, Any]:
    return next(r for r in requests if urlsplit(r["url"]).path == path)


def header(row: dict[str, Any], which: str, name: str) -> str:
    return next(h["value"] for h in row[which] if h["name"].lower() == name.lower())


def check_redacted_in_place(store: Store, echoes: tuple[str, ...] = ECHOES) -> None:
    """Redaction replaced values and kept keys and structure, everywhere the secrets were
    (``echoes``: the echoing runs recorded into ``store``)."""
    requests = store.read("requests", run_id="typer").to_pylist()
    blobs = store.read_blobs([r[k] for r in requests for k in ("request_body", "response_body") if r[k]])
    orders = by_path(requests, "/api/orders")
    assert urlsplit(orders["url"]).query == f"api_key={URL_REDACTED}"
    assert header(orders, "request_headers", "authorization") == f"Bearer {REDACTED}"
    assert (
        header(orders, "request_headers", "x-access-token")
        == header(orders, "request_headers", "x-session")
        == REDACTED
    )
    assert header(orders, "request_headers", "cookie") == f"sid={REDACTED}; js_session={REDACTED}"
    assert header(orders, "request_headers", "referer").endswith(f"/account?session_token={URL_REDACTED}")
    assert json.loads(blobs[orders["response_body"]]) == {
        "orders": 3,
        "access_token": REDACTED,
        "token_type": "bearer",
    }
    assert json.loads(blobs[by_path(requests, "/api/profile")["request_body"]]) == {
        "client_secret": REDACTED,
        "q": 1,
    }
    assert (
        blobs[by_path(requests, "/api/form")["request_body"]]
        == f"user=ada&refresh_token={URL_REDACTED}".encode()
    )
    login = by_path(requests, "/login")
    assert parse_qs(blobs[login["request_body"]].decode()) == {
        "csrf": [REDACTED],
        "user": ["ada"],
        "api_key": [REDACTED],
        "password": [REDACTED],
    }
    assert login["redirect_url"].endswith(header(login, "response_headers", "location"))
    assert header(login, "response_headers", "location") == f"/account?session_token={URL_REDACTED}"
    assert header(login, "response_headers", "set-cookie") == f"sid={REDACTED}; Path=/; HttpOnly"
    assert header(by_path(requests, "/go"), "response_headers", "location").endswith(
        f"/landing?token={URL_REDACTED}"
    )
    socket = [
        json.loads(line)["data"] for line in blobs[by_path(requests, "/ws")["response_body"]].splitlines()
    ]
    assert [json.loads(m) for m in socket[:2]] == [
        {"type": "hello", "password": REDACTED},
        {
            "type": "welcome",
            "access_token": REDACTED,
            "refresh_token": REDACTED,
            "session_id": SOCKET_SESSION,
        },
    ]
    steps = store.read("steps", run_id="typer").to_pylist()
    assert (
        steps[1]["action"] == f"type [9999] [{REDACTED}] [press_enter_after=0]" and steps[1]["action_error"]
    )
    report = next(s for s in steps if "/report" in s["url"])
    assert report["url"].endswith(f"/report?key={URL_REDACTED}#access_token={URL_REDACTED}")
    assert report["tabs"][0]["url"] == report["url"]
    sent = load_request(report["model_input"], lambda h: store.read_blobs([h])[h])
    assert f"key={URL_REDACTED}#access_token={URL_REDACTED}" in sent["messages"][-1]["content"]
    run = store.read("runs", run_id="typer").to_pylist()[0]
    assert json.loads(run["config_json"])["agent_settings"]["base_url"].startswith(
        f"http://user:{URL_REDACTED}@"
    )
    task = store.read("tasks", run_id="typer").to_pylist()[0]
    assert task["start_urls"][0].endswith(f"/?api_key={URL_REDACTED}")
    assert json.loads(task["original_json"])["eval"]["reference_url"].endswith(
        f"/landing?token={URL_REDACTED}"
    )
    final_url = store.read("episodes", run_id="typer").to_pylist()[0]["final_url"]
    assert final_url.endswith(f"/landing?token={URL_REDACTED}"), "the terminal observation is redacted too"
    for run_id in echoes:
        error = store.read("episodes", run_id=run_id).to_pylist()[0]["error"]
        assert f"Incorrect API key provided: {REDACTED}" in error, error
    cached = store.read("judge_cache").to_pylist()
    assert all(row["response"] == f"Yes. (You sent the key {REDACTED}.)" for row in cached)


@pytest.fixture(scope="module")
def local_store(site: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The three recordings and a replay of the first, on a local store."""
    root = tmp_path_factory.mktemp("secrets")
    store = root / "store"
    outputs = record_planted(str(store), site, _task(root / "tasks", site), {})
    outputs += judge_echoes(str(store))
    replay = mmina(
        "replay", "--run", "typer", "--store", str(store), "--format", "json", env=dict(os.environ)
    )
    outputs.append(replay.stdout + replay.stderr)
    assert replay.returncode == 0, replay.stderr
    return store, outputs


def judge_echoes(store: str) -> list[str]:
    """Rescore with an LLM judge that quotes the key: in a reply (cached in ``judge_cache``,
    kept in the score's detail), and in a 401 (the command's one-line error)."""
    env = {**os.environ, "OPENAI_API_KEY": P["ENV_KEY"]}
    args = (
        "rescore",
        "--run",
        "typer",
        "--evaluator",
        "fuzzy",
        "--arg",
        "reference=must_include",
        "--store",
        store,
    )
    with FakeOpenAI(judge_reply=f"Yes. (You sent the key {P['ENV_KEY']}.)") as judge:
        replied = mmina(*args, "--judge-model", "fake", env={**env, "OPENAI_BASE_URL": judge.url})
        assert replied.returncode == 0 and judge.requests, replied.stderr
    with FakeOpenAI(always_fail=True, fail_status=401, echo_key=True) as judge:  # another model: not cached
        refused = mmina(*args, "--judge-model", "fake-2", env={**env, "OPENAI_BASE_URL": judge.url})
        assert (
            refused.returncode == 1 and refused.stderr.startswith("Error: ") and REDACTED in refused.stderr
        ), refused.stderr
    return [replied.stdout + replied.stderr, refused.stdout + refused.stderr]


def test_no_planted_secret_is_anywhere_in_a_local_store_nor_on_the_terminal(
    local_store: tuple[Path, list[str]],
) -> None:
    store, outputs = local_store
    files = local_files(store)
    assert any(name.startswith("blobs/") for name in files) and any(
        name.startswith("requests/") for name in files
    )
    assert leaked(files, outputs) == []


def test_redaction_keeps_keys_and_structure(local_store: tuple[Path, list[str]]) -> None:
    store = Store.open(local_store[0])
    check_redacted_in_place(store)
    assert store.read("judge_cache").num_rows and store.read("scores", run_id="typer").num_rows


def test_a_redacted_recording_replays_faithfully(local_store: tuple[Path, list[str]]) -> None:
    """Redacted URLs, bodies and cookies still match: every request answered, every step at the
    same URL with the same tree. The one allowed difference: the aria snapshot of this Playwright
    YAML-quotes a field's value that starts with ``[``, so the ``[REDACTED]`` the replay types
    reads ``"[REDACTED]"`` where the recording's scrubbed tree reads ``[REDACTED]``. Trees are
    compared as replay fidelity compares them, without ids: an id is derived from the element's
    text, and the recording's was derived before the secret in it was scrubbed."""
    report = json.loads(local_store[1][-1][: local_store[1][-1].rindex("}") + 1])
    summary = report["summary"]
    assert summary["url_equal"] == summary["steps"] == 7
    assert summary["requests"]["unmatched"] == 0 and summary["requests"]["exact"] > 0
    store = Store.open(local_store[0])
    recorded = store.read("steps", run_id="typer").to_pylist()
    replayed = store.read("steps", run_id=report["replay_run"]).to_pylist()
    for old, new in zip(recorded, replayed):
        quoted = old["tree_text"].replace(f": {REDACTED}", f': "{REDACTED}"')
        assert "" in (
            tree_change(old["tree_text"], new["tree_text"]),
            tree_change(quoted, new["tree_text"]),
        ), tree_change(old["tree_text"], new["tree_text"])
    assert "3 orders" in replayed[4]["tree_text"], "the redacted JSON answered the page's fetch"


def test_bodies_redaction_changed_are_named_by_the_replay_and_by_store_verify(
    local_store: tuple[Path, list[str]],
) -> None:
    """A changed body is a fidelity defect: the replay report counts the requests served one, in
    its summary and on each step (the sign-in page's hidden CSRF field, the account page's
    script with its bearer token); a page with no secret (``/report``) is not named.
    ``store verify --redacted`` lists the same bodies, with the size the browser received."""
    report = json.loads(local_store[1][-1][: local_store[1][-1].rindex("}") + 1])
    assert report["summary"]["requests"]["redacted_body"] >= 3
    steps = report["episodes"][0]["steps"]
    assert steps[0]["requests"]["redacted_body"] == 1, "the sign-in page, loaded first"
    flagged = {urlsplit(s["recorded_url"]).path for s in steps if s["requests"]["redacted_body"]}
    assert {"/", "/account", "/landing"} <= flagged and "/report" not in flagged, steps
    listed = mmina(
        "store",
        "verify",
        "--redacted",
        "--store",
        str(local_store[0]),
        "--format",
        "json",
        env=dict(os.environ),
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    bodies = [b for b in json.loads(listed.stdout)["redacted_bodies"] if b["run_id"] == "typer"]
    paths = {urlsplit(b["url"]).path for b in bodies}
    assert {"/", "/account", "/api/orders", "/landing"} <= paths and not paths & {
        "/report",
        "/doc",
        "/pixel.png",
    }
    login = next(b for b in bodies if urlsplit(b["url"]).path == "/")
    assert login["received_size"] == len(LOGIN.encode()) != login["stored_size"]


S3_ECHOES = sized((), ECHOES)
"""The S3 store gets the typing run by default: the echoing runs' errors reach an S3 store by the
same writes as the typing run's rows, and the local store checks them every time."""


def test_no_planted_secret_is_anywhere_in_an_s3_store(site: str, tmp_path: Path) -> None:
    with S3Server() as s3:
        s3.make_bucket("secrets")
        prefix = f"secrets/{uuid.uuid4().hex[:8]}"
        outputs = record_planted(f"s3://{prefix}", site, _task(tmp_path / "tasks", site), s3.env, S3_ECHOES)
        objects = s3.objects("secrets")
        assert any("/blobs/" in key for key in objects) and any("/requests/" in key for key in objects)
        assert leaked(objects, outputs, {"S3_ACCESS_KEY": ACCESS_KEY, "S3_SECRET_KEY": SECRET_KEY}) == []
        env = {**os.environ, **s3.env}
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            check_redacted_in_place(Store.open(f"s3://{prefix}"), S3_ECHOES)


def test_configured_secrets_come_from_the_environment() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-planted-0c41e9",
        "OPENAI_BASE_URL": "http://user:PASSw0rd99@h/v1",
        "AWS_SECRET_ACCESS_KEY": "aws/secret+9f8e",
        "PWD": "/tmp/x",
        "HOME": "/root",
        "MAX_TOKENS": "100",
    }
    found = configured_secrets(environ)
    assert {
        "sk-planted-0c41e9",
        "PASSw0rd99",
        "aws/secret+9f8e",
        base64.b64encode(b"user:PASSw0rd99").decode(),
    } <= set(found)
    assert "/tmp/x" not in found and "/root" not in found and "100" not in found
    redactor = Redactor(found)
    assert (
        redactor.text("401: Incorrect API key provided: sk-planted-0c41e9")
        == f"401: Incorrect API key provided: {REDACTED}"
    )


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("X-Access-Token", True),
        ("X-Session", True),
        ("api_key", True),
        ("apiKey", True),
        ("PHPSESSID", True),
        ("X-CSRFToken", True),
        ("csrfmiddlewaretoken", True),
        ("connect.sid", True),
        ("user[password]", True),
        ("OPENAI_API_KEY", True),
        ("X-Amz-Signature", True),
        ("Proxy-Authorization", True),
        ("refresh_token", True),
        ("max_tokens", False),
        ("token_type", False),
        ("api_key_env", False),
        ("author", False),
        ("authuser", False),
        ("keyword", False),
        ("public_key", False),
        ("passenger", False),
        ("Access-Control-Allow-Credentials", False),
        ("session_timeout", False),
        ("WWW-Authenticate", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_typed_text_rule_and_labels_in_response_bodies() -> None:
    assert typed_text_is_secret("hunter2", False, "Password") and typed_text_is_secret("x", False, "API key")
    assert typed_text_is_secret("Zq81fKx02LmA9w", True, None), "a failed type of a credential"
    assert not any(
        typed_text_is_secret(text, True, None) for text in ("5", "KYO", "fahrenheit", "New York")
    ), "a failed type of a word is not a secret"
    assert not typed_text_is_secret("Zq81fKx02LmA9w", False, "Search")
    short = Redactor()
    short.learn_secret("42")
    assert short.text("type [7] [42] [press_enter_after=0]") == f"type [7] [{REDACTED}] [press_enter_after=0]"
    assert short.text("page 42 of 420") == "page 42 of 420", "a short secret only in its bracketed form"
    body = (
        b'{"labels": {"password": "Password", "session": "Session expired, log in again."}, '
        b'"token": "tok-9f2aXk3Lq8Zr7"}'
    )
    kept = json.loads(Redactor().body(body, "application/json"))
    assert kept == {
        "labels": {"password": "Password", "session": "Session expired, log in again."},
        "token": REDACTED,
    }
    assert (
        json.loads(Redactor().body(body, "application/json", response=False))["labels"]["password"]
        == REDACTED
    )


def test_scripts_and_style_sheets_keep_their_code() -> None:
    """Code served to a page is rewritten only where a secret sits in a URL, after an auth scheme
    or in a key's shape: its expressions stay (a replay serves it, and the page must still run).
    Each line is from a real library (CodeMirror 5, KaTeX, Gradio's ffmpeg, pydeck, Dash's core
    components: a CSS animation named like an ``sk-`` key, but words, without a digit)."""
    code = (
        "if(presto&&keyCode==lastStoppedKey){lastStoppedKey=null}\n"
        'Qe={"accent-token":1,mathord:1};var env={"USER":"web_user","PWD":"/"};\n'
        'k=navigator.userAgent.indexOf("Mac")!==-1?"metaKey":"ctrlKey";\n'
        's="-webkit-animation: dash-sk-circleBounceDelay 1.2s infinite ease-in-out both;";\n'
    )
    secrets = (
        'u="https://api.example/parts?apikey=68b25f31&q=1";h="Bearer 9f2aXk3Lq8Zr7";s="sk-abcdefghijklmnop1234";\n'
        'cb({"access_token": "Zq81fKx02LmA9w"});\n'
    )
    redactor = Redactor()
    for mime in ("application/javascript", "text/javascript; charset=utf-8", "text/css"):
        redactor.learn_body(code.encode(), mime, response=True)
        assert redactor.body(code.encode(), mime) == code.encode(), mime
        redacted = redactor.body(secrets.encode(), mime).decode()
        assert not any(
            s in redacted for s in ("68b25f31", "9f2aXk3Lq8Zr7", "sk-abcdefghijklmnop1234", "Zq81fKx02LmA9w")
        )
        assert redacted.count(";") == secrets.count(";"), "the statements stay"
    assert redactor.text("lastStoppedKey and web_user") == "lastStoppedKey and web_user", (
        "nothing learned from code"
    )


def test_engine_io_transport_ids_are_kept_and_other_sids_are_not() -> None:
    """engine.io's ``sid`` names one connection (beside ``EIO=`` in a poll's URL, in its open
    packet, in socket.io's connect packet): kept byte for byte, so a socket.io page's handshake
    is served as received; a ``sid`` anywhere else, and a token beside it, is still a secret."""
    sid, token = "3-mqaNnL4SGhKjs7AAAB", "Zq81fKx02LmA9wRt5Yp"
    poll = f"http://app.test/socket.io/?client_id=1&EIO=4&transport=polling&t=Pkx&sid={sid}&token={token}"
    bodies = [
        f'0{{"sid":"{sid}","upgrades":["websocket"],"pingInterval":25000}}',
        f'40{{"sid":"{sid}"}}',
        f'96:0{{"sid":"{sid}","upgrades":[]}}' + "\x1e" + f'40/chat,{{"sid":"{sid}"}}',
    ]
    redactor = Redactor()
    redactor.learn_text(poll)
    redactor.learn_text(f"GET /socket.io/?EIO=4&sid={sid}")
    for body in bodies:
        redactor.learn_body(body.encode(), "text/plain; charset=UTF-8", response=True)
        assert redactor.body(body.encode(), "text/plain; charset=UTF-8") == body.encode()
    assert redactor.text(poll) == poll.replace(token, URL_REDACTED)
    for elsewhere in (f"http://app.test/login?sid={sid}", f'{{"sid":"{sid}"}}', f'x={{"sid":"{sid}"}}'):
        assert sid not in Redactor().text(elsewhere, prose=False), elsewhere


def test_free_text_rules() -> None:
    redactor = Redactor()
    cases = {
        "goto [http://x/?token=abc]": f"goto [http://x/?token={URL_REDACTED}]",
        "see /cb?next=https%3A%2F%2Fx%2F%3Ftoken%3Dabc ok": (
            "see /cb?next=https%3A%2F%2Fx%2F%3Ftoken%3D%255BREDACTED%255D ok"
        ),
        "Authorization: Bearer abcdef12345": f"Authorization: Bearer {REDACTED}",
        "Basic understanding is good": "Basic understanding is good",
        "the password=hunter2 works": f"the password={REDACTED} works",
        '- textbox "API key": sk-abc': f'- textbox "API key": {REDACTED}',
        "{'api_key': 'sk-1234', 'x': 'y'}": f"{{'api_key': '{REDACTED}', 'x': 'y'}}",
        '<input type="hidden" name="csrf" value="Xy12abcD">': f'<input type="hidden" name="csrf" value="{REDACTED}">',
        '<meta name="csrf-token" content="Xy12abcD">': f'<meta name="csrf-token" content="{REDACTED}">',
        'x = "{\\"token\\":\\"abc123\\"}"': f'x = "{{\\"token\\":\\"{REDACTED}\\"}}"',
        "jwt eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl here": f"jwt {REDACTED} here",
        "http://h/p#book/A/Article_(x)": "http://h/p#book/A/Article_(x)",
        "http://h/app;jsessionid=A1b2C3d4?x=1": f"http://h/app;jsessionid={REDACTED}?x=1",
    }
    for text, expected in cases.items():
        assert redactor.text(text) == expected, text
    multipart = (
        '--b\r\nContent-Disposition: form-data; name="user"\r\n\r\nada\r\n--b\r\nContent-Disposition: '
        'form-data; name="password"\r\n\r\nhunter2\r\n--b--\r\n'
    )
    redacted = redactor.body(multipart.encode(), "multipart/form-data; boundary=b", response=False).decode()
    assert "hunter2" not in redacted and "\r\nada\r\n" in redacted and f"\r\n{REDACTED}\r\n" in redacted


# ---------------------------------------------------------------- the rules, property-tested

CREDENTIAL_NAMES = (
    "token",
    "access_token",
    "api_key",
    "apiKey",
    "X-Api-Key",
    "password",
    "passwd",
    "client_secret",
    "sessionid",
    "PHPSESSID",
    "csrf",
    "_csrf",
    "XSRF-TOKEN",
    "X-Auth-Token",
    "X-Access-Token",
    "refresh_token",
    "credentials",
    "jwt",
    "private_key",
    "secret",
    "user[password]",
    "oauth_token",
    "id_token",
    "authenticity_token",
    "csrfmiddlewaretoken",
    "X-CSRFToken",
    "AWS_SECRET_ACCESS_KEY",
    "sessionToken",
)
"""Names that can only hold a credential: a value under one is a secret by place alone (issue 56, item 9)."""
AMBIGUOUS_NAMES = (
    "session",
    "auth",
    "X-Session",
    "key",
    "sig",
    "Signature",
    "pin",
    "sid",
    "connect.sid",
    "session_id",
    "orderByKey",
)
"""Names whose word holds a credential only sometimes: a value under one is a secret when credential-shaped."""
SECRET_NAMES = CREDENTIAL_NAMES + AMBIGUOUS_NAMES
PLAIN_NAMES = (
    "q",
    "page",
    "lang",
    "sort",
    "id",
    "ref",
    "utm_source",
    "next_page",
    "category",
    "max_tokens",
    "token_type",
    "author",
    "keyword",
    "public_key",
    "passenger",
    "monkey",
    "authuser",
    "api_key_env",
    "session_timeout",
    "Access-Control-Allow-Credentials",
)
PLAIN = st.text(alphabet=string.ascii_lowercase + string.digits + ".", min_size=0, max_size=12)
"""Plain values: nothing a rule could mistake for a credential (no spaces, no ``=``, no URL)."""
SECRET = st.builds(
    lambda tail: "ZQX" + tail,
    st.text(alphabet=string.ascii_letters + string.digits + "-._~!$*+@%/:?#&=[]' ", min_size=5, max_size=24),
)
"""A planted secret: ``ZQX`` never occurs in anything else generated, so finding it means a leak."""
TOKEN = st.builds(
    lambda tail: "ZQX" + tail,
    st.text(alphabet=string.ascii_letters + string.digits + "-._", min_size=5, max_size=24),
)
"""A secret that fits in a cookie or after ``Bearer``."""
SHAPED = st.builds(
    lambda tail: "ZQX" + tail,
    st.text(alphabet=string.ascii_letters + string.digits, min_size=17, max_size=30),
).filter(credential_shaped)
"""A planted secret that looks like one (drawn letters and digits): what an ambiguous name must hold to be one."""
NAMED_SECRET = st.one_of(
    st.tuples(st.sampled_from(CREDENTIAL_NAMES), SECRET), st.tuples(st.sampled_from(AMBIGUOUS_NAMES), SHAPED)
)
"""A planted secret under a name that makes it one."""


def leaks(secrets: list[str], text: str) -> list[str]:
    """The secrets (or their percent-encoded forms) still in ``text``."""
    return [s for s in secrets if s in text or quote(s, safe="") in text or quote_plus(s, safe="") in text]


@st.composite
def params(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Query or form parameters, some secret-named with a planted value."""
    pairs = draw(
        st.lists(st.one_of(st.tuples(st.sampled_from(PLAIN_NAMES), PLAIN), NAMED_SECRET), max_size=6)
    )
    return pairs


@st.composite
def urls(draw: st.DrawFn, depth: int = 0) -> tuple[str, list[str]]:
    """A URL with secrets in its userinfo, query, fragment, and (nested, encoded) in a parameter
    holding another URL; returns it with the secrets planted."""
    secrets: list[str] = []
    userinfo = draw(st.sampled_from(["", "user:", "token"]))
    if userinfo:
        secret = draw(TOKEN)
        secrets.append(secret)
        userinfo = (
            f"{userinfo}{quote(secret, safe='')}@" if userinfo == "user:" else f"{quote(secret, safe='')}@"
        )
    host = draw(st.sampled_from(["example.com", "127.0.0.1:8080", "shop.mmina.test"]))
    path = draw(st.sampled_from(["/", "/a/b", "/viewer", "/cb;v=1"]))
    query = draw(params())
    if depth < 2 and draw(st.booleans()):
        inner, inner_secrets = draw(urls(depth + 1))
        query.append(("redirect_url", inner))
        secrets += inner_secrets
    fragment = draw(
        st.one_of(
            st.just(""),
            st.sampled_from(["#section-2", "#book/A/Article_(x)"]),
            params().map(lambda p: "#" + urlencode(p)),
        )
    )
    secrets += [v for k, v in query if k in SECRET_NAMES]
    secrets += [v for k, v in parse_qsl(fragment[1:]) if k in SECRET_NAMES] if "=" in fragment else []
    return f"http://{userinfo}{host}{path}{'?' + urlencode(query) if query else ''}{fragment}", secrets


@given(urls())
@settings(max_examples=300, deadline=None)
def test_a_redacted_url_keeps_its_shape_and_no_secret(planted: tuple[str, list[str]]) -> None:
    url, secrets = planted
    redacted = STRICT.url(url)
    assert not leaks(secrets, redacted), redacted
    assert STRICT.url(redacted) == redacted, "idempotent"
    before, after = urlsplit(url), urlsplit(redacted)
    assert (after.scheme, after.hostname, after.port, after.path) == (
        before.scheme,
        before.hostname,
        before.port,
        before.path,
    )
    if before.password:
        assert (after.username, after.password) == (before.username, URL_REDACTED)
    pairs_before, pairs_after = parse_qsl(before.query, True), parse_qsl(after.query, True)
    assert [k for k, _ in pairs_after] == [k for k, _ in pairs_before], (
        "every parameter keeps its name and place"
    )
    for (name, value), (_, kept) in zip(pairs_before, pairs_after):
        if name in SECRET_NAMES and value:
            assert kept == REDACTED
        elif name in PLAIN_NAMES:
            assert kept == value
    if "=" not in before.fragment:
        assert after.fragment == before.fragment, "a viewer's fragment (kiwix) is left alone"


@st.composite
def headers(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[str]]:
    pairs = [
        (n, draw(PLAIN))
        for n in draw(
            st.lists(
                st.sampled_from(
                    ("Accept", "X-Request-Id", "Cache-Control", "Access-Control-Allow-Credentials")
                ),
                max_size=3,
            )
        )
    ]
    secrets = draw(st.lists(TOKEN, min_size=4, max_size=4))
    pairs += [
        (draw(st.sampled_from(SECRET_NAMES)), secrets[0]),
        ("Authorization", f"Bearer {secrets[1]}"),
        ("Cookie", f"lang=en; sid={secrets[2]}"),
        ("Set-Cookie", f"sid={secrets[3]}; Path=/; HttpOnly"),
    ]
    url, in_url = draw(urls())
    pairs.append(("Referer", url))
    return draw(st.permutations(pairs)), secrets + in_url


@given(headers())
@settings(max_examples=200, deadline=None)
def test_redacted_headers_keep_their_names_and_no_secret(
    planted: tuple[list[tuple[str, str]], list[str]],
) -> None:
    pairs, secrets = planted
    redacted = Redactor().headers(pairs)
    assert [h["name"] for h in redacted] == [n for n, _ in pairs]
    assert not leaks(secrets, json.dumps(redacted)), redacted
    assert Redactor().headers((h["name"], h["value"]) for h in redacted) == redacted, "idempotent"
    values = {h["name"]: h["value"] for h in redacted}
    assert (
        values["Authorization"] == f"Bearer {REDACTED}"
        and values["Cookie"] == f"lang={REDACTED}; sid={REDACTED}"
    )
    assert values["Set-Cookie"] == f"sid={REDACTED}; Path=/; HttpOnly"
    for (name, value), kept in zip(pairs, redacted):
        if name not in SECRET_NAMES and name not in ("Authorization", "Cookie", "Set-Cookie", "Referer"):
            assert kept["value"] == value


def json_documents() -> st.SearchStrategy[Any]:
    """JSON with secret-named keys at any depth, holding strings, numbers or whole subtrees."""

    def tree(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.recursive(
            st.one_of(leaves, st.booleans(), st.none()),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(PLAIN_NAMES), inner, max_size=3)
            ),
            max_leaves=6,
        )

    plain = st.one_of(PLAIN, st.integers(-1000, 1000), st.booleans(), st.none())
    return st.recursive(
        plain,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.builds(
                lambda a, b, c: {**a, **b, **c},
                st.dictionaries(st.sampled_from(PLAIN_NAMES), inner, max_size=3),
                st.dictionaries(
                    st.sampled_from(CREDENTIAL_NAMES),
                    tree(st.one_of(SECRET, st.integers(10**7, 10**9))),
                    max_size=2,
                ),
                st.dictionaries(st.sampled_from(AMBIGUOUS_NAMES), tree(SHAPED), max_size=1),
            )
        ),
        max_leaves=20,
    )


def _same_shape(before: Any, after: Any, secret: bool = False) -> None:
    """Keys and nesting kept; under a secret-named key strings and numbers are the marker."""
    if isinstance(before, dict):
        assert isinstance(after, dict) and list(after) == list(before)
        for key, value in before.items():
            _same_shape(value, after[key], secret or key in SECRET_NAMES)
    elif isinstance(before, list):
        assert isinstance(after, list) and len(after) == len(before)
        for value, kept in zip(before, after):
            _same_shape(value, kept, secret)
    elif secret and isinstance(before, (str, int)) and not isinstance(before, bool):
        assert after == REDACTED or before == "", (before, after)
    else:
        assert after == before


def planted_in(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in planted_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in planted_in(v)]
    return [value] if isinstance(value, str) and value.startswith("ZQX") else []


@given(json_documents())
@settings(max_examples=300, deadline=None)
def test_redacted_json_stays_json_with_its_keys_and_no_secret(document: Any) -> None:
    body = json.dumps(document).encode()
    redacted = Redactor().body(body, "application/json", response=False)
    assert not leaks(planted_in(document), redacted.decode())
    _same_shape(document, json.loads(redacted))
    assert Redactor().body(redacted, "application/json", response=False) == redacted, "idempotent"
    as_text = STRICT.text(json.dumps(document, indent=1))
    assert not leaks(planted_in(document), as_text)
    _same_shape(document, json.loads(as_text))


@given(params())
@settings(max_examples=200, deadline=None)
def test_redacted_form_bodies_keep_their_fields_and_no_secret(pairs: list[tuple[str, str]]) -> None:
    body = urlencode(pairs).encode()
    redacted = Redactor().body(body, "application/x-www-form-urlencoded", response=False)
    secrets = [v for k, v in pairs if k in SECRET_NAMES]
    assert not leaks(secrets, redacted.decode())
    kept = parse_qsl(redacted.decode(), keep_blank_values=True)
    assert [k for k, _ in kept] == [k for k, _ in pairs]
    assert [v for _, v in kept] == [REDACTED if k in SECRET_NAMES and v else v for k, v in pairs]
    assert Redactor().body(redacted, "application/x-www-form-urlencoded", response=False) == redacted


def test_one_rule_for_names_credentials_by_place_and_ambiguous_words_by_shape() -> None:
    """Issue 56, item 9: a credential's name makes its value a secret by place alone, in a request
    and in a response (JSON, NDJSON, event-stream data); an ambiguous word (``key``, ``session``,
    ``sid``, ``sig``, ``pin``, ``auth``, inside a longer name too) only with a credential-shaped value."""
    url = (
        "http://mlflow.test/ajax-api/2.0/mlflow/runs/search?orderByKey=attributes.start_time&key=abc&pin=1234"
    )
    assert STRICT.url(url) == url
    shaped = "Zq81fKx02LmA9wRt5Yp3"
    assert (
        STRICT.url(f"http://x.test/?key={shaped}&password=hunter")
        == f"http://x.test/?key={URL_REDACTED}&password={URL_REDACTED}"
    )
    body = (
        b'{"access_token": "abc123def456ghi789", "token_type": "bearer", "session_id": "kernel-1",'
        b' "labels": {"password": "Password"}}'
    )
    assert json.loads(Redactor().body(body, "application/json")) == {
        "access_token": REDACTED,
        "token_type": "bearer",
        "session_id": "kernel-1",
        "labels": {"password": "Password"},
    }
    lines = b'{"id": 1}\n{"refresh_token": "rt5551234abcd"}\n'
    assert Redactor().body(lines, "application/x-ndjson") == b'{"id": 1}\n{"refresh_token": "[REDACTED]"}\n'
    stream = b'event: auth\ndata: {"id_token": "x9Qm2Lp7Rt4Kd", "step": 2}\n\n'
    assert (
        Redactor().body(stream, "text/event-stream")
        == b'event: auth\ndata: {"id_token": "[REDACTED]", "step": 2}\n\n'
    )


def test_a_stored_url_keeps_what_the_url_rule_keeps() -> None:
    """The URL rule decides a whole URL's parameters wherever the URL is (a row's ``url``, text
    holding one), and nothing learnt from it is scrubbed elsewhere: a stored URL once lost
    MLflow's ``orderByKey=attributes.start_time`` and a Jupyter kernel socket's own
    ``?session_id=`` (then scrubbed from every socket message) to the free-text parameter rule,
    which read them as ambiguous words under a strict rule."""
    session = "2dfc931a965142409ad9a24ff87a34f0"
    kept = [
        "http://mlflow.test/ajax-api/2.0/mlflow/runs/search?orderByKey=attributes.start_time&pin=1234",
        f"ws://nb.test/api/kernels/344c44c2/channels?session_id={session}",
        f"http://x.test/?next=ws%3A%2F%2Fnb.test%2Fchannels%3Fsession_id%3D{session}",
    ]
    for url in kept:
        redactor = Redactor()
        redactor.learn_text(url)
        message = f'{{"header": {{"session": "{session}", "msg_id": "{session}_1_2"}}}}'.encode()
        assert redactor.traffic_text(url) == url and redactor.row({"url": url}) == {"url": url}, url
        assert redactor.scrub_bytes(message) == message  # not learnt: socket messages keep it
        assert redactor.text(f"Failed to open {url} (closed)") == f"Failed to open {url} (closed)"
    shaped = "Zq81fKx02LmA9wRt5Yp3"
    redactor = Redactor()
    for url, secret in (
        (f"http://x.test/ch?session_id={session}", session),  # an HTTP URL's: an ambiguous word, shaped
        (f"ws://x.test/ch?token={shaped}", shaped),
        (f"<a href='http://x.test/?a=1&amp;token={shaped}'>", shaped),  # HTML's &amp;: the text rule's
        (f"GET /cb?access_token={shaped} 200", shaped),  # outside a whole URL
    ):
        redactor.learn_text(url)
        assert secret not in (redactor.traffic_text(url) or "") and secret not in (
            redactor.text(url) or ""
        ), url


@given(
    st.sampled_from(["http", "https", "ws", "wss"]),
    st.one_of(st.sampled_from(AMBIGUOUS_NAMES), st.from_regex(r"[a-z][a-zA-Z]{0,12}", fullmatch=True)),
    PLAIN,
)
@settings(max_examples=200, deadline=None)
def test_a_url_parameter_that_is_no_credential_is_stored_byte_for_byte(
    scheme: str, name: str, value: str
) -> None:
    url = f"{scheme}://app.test/api/items?{quote(name)}={quote(value)}&page=2"
    assume(name_kind(name) != CREDENTIAL and not credential_shaped(value))  # an ambiguous word keeps it
    redactor = Redactor()
    redactor.learn_text(url)
    assert redactor.traffic_text(url) == url and redactor.row({"url": url}) == {"url": url}


@given(TOKEN.filter(credential_shaped), PLAIN, PLAIN)
@settings(max_examples=200, deadline=None)
def test_a_known_value_is_scrubbed_in_every_form(secret: str, before: str, after: str) -> None:
    redactor = Redactor()
    redactor.learn([secret])
    text = (
        f"{before} {secret}{after} {quote(secret, safe='')} {json.dumps(secret)} <b>{html.escape(secret)}</b>"
    )
    redacted = redactor.text(text) or ""
    assert not leaks([secret], redacted) and redactor.text(redacted) == redacted
    assert secret.encode() not in redactor.body(text.encode(), "image/png")


@given(st.text(max_size=300), st.lists(st.text(min_size=1, max_size=12), max_size=3))
@settings(max_examples=300, deadline=None)
def test_any_text_is_redacted_without_error_and_idempotently(text: str, known: list[str]) -> None:
    redactor = Redactor()
    redactor.learn(known)
    for value in known:
        redactor.learn_secret(value)
    once = redactor.text(text)
    assert redactor.text(once) == once


@given(
    st.binary(max_size=300),
    st.sampled_from(
        [
            "application/json",
            "text/html",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "image/png",
            "",
        ]
    ),
)
@settings(max_examples=300, deadline=None)
def test_any_body_is_redacted_without_error_and_idempotently(body: bytes, mime: str) -> None:
    once = Redactor(["s3cret-value-1"]).body(body, mime)
    assert Redactor(["s3cret-value-1"]).body(once, mime) == once


@given(
    st.lists(st.text(alphabet="ab[]é\\.*", min_size=1, max_size=6), min_size=1, max_size=8),
    st.text(alphabet="ab[]é\\.* x", max_size=60),
)
@settings(max_examples=300, deadline=None)
def test_the_trie_of_known_values_matches_as_a_longest_first_alternation(
    values: list[str], text: str
) -> None:
    alternation = "|".join(re.escape(v) for v in sorted(set(values), key=len, reverse=True))
    assert re.sub(literal_pattern(values), "#", text) == re.sub(alternation, "#", text)
    encoded = literal_pattern(values).encode("utf-8", "surrogatepass")
    assert re.sub(encoded, b"#", text.encode()) == re.sub(alternation.encode(), b"#", text.encode())
