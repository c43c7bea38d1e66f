"""Planted secrets never reach the store: every file is decoded and searched byte by byte."""
from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmina.store import Store
from mmina.recorder.recording import RecordConfig, record_run
from tests.agents_for_tests import PASSWORD

COOKIE = "sessionid-planted-5f2c9a"
BEARER = "bearer-planted-77a1d0"
ENV_KEY = "sk-planted-env-0c41e9"
SECRETS = (PASSWORD, COOKIE, BEARER, ENV_KEY)

LOGIN = b"""<!doctype html><html><head><title>Sign in</title></head><body><main>
<h1>Sign in</h1><form method="post" action="/login">
<label>User <input name="user" value="ada"></label>
<label>Password <input type="password" name="password"></label>
<button>Log in</button></form></main></body></html>"""
ACCOUNT = (b"""<!doctype html><html><head><title>Account</title></head><body><main><h1>Welcome</h1>
<p id="orders">loading</p><script>
fetch('/api/orders', {headers: {'Authorization': 'Bearer %s'}}).then(r => r.json())
  .then(d => { document.getElementById('orders').textContent = d.orders + ' orders'; });
</script></main></body></html>""" % BEARER.encode())


class _Handler(http.server.BaseHTTPRequestHandler):
    """A tiny site with a login form, a session cookie and an authorised XHR."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "text/html", headers: tuple = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/api/orders":
            ok = self.headers.get("Authorization") == f"Bearer {BEARER}" and COOKIE in self.headers.get("Cookie", "")
            self._send(200 if ok else 401, b'{"orders": 3}', "application/json")
        elif self.path == "/account":
            self._send(200, ACCOUNT)
        else:
            self._send(200, LOGIN)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(303, b"", headers=(("Location", "/account"), ("Set-Cookie", f"sid={COOKIE}; Path=/")))


@pytest.fixture
def login_site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _decoded(path: Path) -> bytes:
    """Every value of a Parquet file as bytes (compression would hide a substring otherwise)."""
    table = pq.read_table(path)
    parts = [str(table.schema.metadata).encode()]
    for column in table.columns:
        for value in column.to_pylist():
            parts.append(value if isinstance(value, bytes) else str(value).encode())
    return b"\n".join(parts)


def test_planted_secrets_are_nowhere_in_the_store(tmp_path: Path, login_site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    task = tmp_path / "tasks" / "1.json"
    task.parent.mkdir()
    task.write_text('{"intent": "Sign in with the password you were given and count the orders.", '
                    f'"start_url": "{login_site}/", "eval": {{"eval_types": ["string_match"], '
                    '"reference_answers": {"must_include": ["3"]}}, "cnt_hop": 2, "procedure": ["127.0.0.1", "end"]}')
    summary = record_run(Store.open(tmp_path / "store", create=True), RecordConfig(tasks=str(task.parent),
                                      agent="tests.agents_for_tests:PasswordTyper"))
    episode = summary.episodes[0]
    assert (episode.status, episode.final_answer) == ("completed", "3 orders"), episode
    files = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert files
    for path in files:
        content = path.read_bytes() + (_decoded(path) if path.suffix == ".parquet" else b"")
        leaked = [s for s in SECRETS if s.encode() in content]
        assert not leaked, f"{leaked} found in {path}"
    # the redaction left a trace where the secrets were
    requests = pq.read_table(next((tmp_path / "store" / "requests").rglob("*.parquet")))
    headers = [h for row in requests.column("request_headers").to_pylist() for h in row]
    assert {"name": "Authorization", "value": "[REDACTED]"} in headers
    assert any(h["name"].lower() == "cookie" and h["value"] == "[REDACTED]" for h in headers)
    assert pa.compute.sum(pa.compute.equal(requests.column("status"), 200)).as_py() >= 2
    posts = [r for r in requests.to_pylist() if r["method"] == "POST"]
    assert posts and all(r["request_body"] and r["request_body_size"] > 0 for r in posts), "POST bodies are kept"
