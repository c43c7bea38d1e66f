"""``mmina serve`` over HTTP: any request gets a page or a one-line JSON error, never a stack
trace; images are cached by hash; a token and the loopback rule guard it; nothing writes;
an ``s3://`` store is served (moto) and followed while episodes are written to it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmina.serve.params import FILTERS, QUERY_PARAMS, BadRequest, episode_query
from mmina.serve.payloads import SQL_ROWS_SHOWN
from mmina.store import Store
from tests.docs_pages import page
from tests.heavy import sized
from tests.s3_server import S3Server
from tests.serve_helpers import Served, served_read_only
from tests.store_helpers import REPO_ROOT, begin, write_episode
from tests.test_report import recorded_store

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
NAMES = st.sampled_from([*QUERY_PARAMS, "colour", "", "token"])


@pytest.fixture(scope="module")
def store() -> Path:
    return recorded_store()


@pytest.fixture(scope="module")
def app(store: Path) -> Iterator[Served]:
    with served_read_only(store) as served:
        yield served


def a_step_with_a_screenshot(app: Served) -> tuple[str, dict]:
    episode = app.json("/api/episodes?run=seeded&task=normal/24")["rows"][0]["episode_id"]
    data = app.json(f"/api/episodes/{episode}")
    return episode, next(s for s in data["steps"] if s["shot"])


def test_every_error_is_one_line_of_json(app: Served) -> None:
    cases = {
        "/api/episodes?limit=0": (400, "parameter limit must be between 1 and 500, not 0"),
        "/api/episodes?sort=secret": (400, "parameter sort must be one of"),
        "/api/episodes?limit=1&limit=2": (400, "parameter limit is given 2 times"),
        "/api/episodes/nope": (404, "no episode 'nope'"),
        "/api/episodes/nope/steps/0/image": (404, "no episode 'nope'"),
        "/api/analysis?run=nope": (400, "no run 'nope'"),
        "/api/compare?a=seeded": (400, "parameter b is required"),
        "/blobs/xyz": (400, "'xyz' is not a blob hash"),
        "/blobs/" + "0" * 64: (404, "no blob " + "0" * 64),
        "/no/such/page": (404, "no such page: /no/such/page"),
        "/api/changes?since=abc": (400, "parameter since must be a whole number"),
    }
    for path, (status, start) in cases.items():
        code, headers, body = app.get(path)
        assert code == status and headers["content-type"] == "application/json", (path, code, body)
        error = json.loads(body)["error"]
        assert error.startswith(start) and "\n" not in error, (path, error)


def test_a_step_beyond_the_episode_is_not_found(app: Served) -> None:
    episode, _ = a_step_with_a_screenshot(app)
    code, _, body = app.get(f"/api/episodes/{episode}/steps/999/image")
    assert code == 404 and json.loads(body)["error"].startswith(f"episode {episode} has no step 999")


def test_sql_endpoint_answers_rows_or_a_clear_error(app: Served) -> None:
    data = app.json("/api/sql", {"query": "select count(*) as n from steps"})
    assert data["columns"] == ["n"] and data["rows"][0][0] > 0 and not data["truncated"]
    many = app.json("/api/sql", {"query": "select * from range(1000000000)"})
    assert len(many["rows"]) == SQL_ROWS_SHOWN and many["truncated"], "only the rows shown are fetched"
    for body, start in (
        (b"not json", "send the query as JSON"),
        (b'{"query": 3}', "send the query as JSON"),
        (b'{"query": "delete from episodes"}', "mmina sql is read-only"),
        (b'{"query": "select * from nowhere"}', "Catalog Error"),
    ):
        code, _, answer = app.get("/api/sql", body, {"Content-Type": "application/json"})
        assert code == 400 and json.loads(answer)["error"].startswith(start), answer
    status, headers, csv_body = app.get("/api/sql.csv", b'{"query": "select 1 as one, \'a,b\' as two"}')
    assert status == 200 and headers["content-disposition"].startswith("attachment")
    assert csv_body.decode().splitlines() == ["one,two", '1,"a,b"']


def test_only_reads_are_allowed(app: Served) -> None:
    for path in ("/api/runs", "/api/episodes", "/blobs/" + "0" * 64):
        code, _, body = app.get(path, b"{}")
        assert code == 405 and "error" in json.loads(body), path


def test_images_are_cached_by_hash(app: Served) -> None:
    episode, step = a_step_with_a_screenshot(app)
    for url in (step["screenshot"], step["shot"]):
        code, headers, body = app.get(url)
        assert code == 200 and body[:3] == b"\xff\xd8\xff" and headers["content-type"] == "image/jpeg"
        assert headers["cache-control"] == "public, max-age=31536000, immutable"
        again, _, nothing = app.get(url, headers={"If-None-Match": headers["etag"]})
        assert again == 304 and nothing == b""
    assert step["screenshot"].startswith(
        "/blobs/"
        + app.json(
            "/api/sql",
            {
                "query": (
                    f"select screenshot from steps where episode_id = '{episode}' and step_index = {step['index']}"
                )
            },
        )["rows"][0][0]
    )


def test_a_stored_page_body_never_runs_as_this_servers_page(app: Served) -> None:
    episode = app.json("/api/episodes?run=seeded&task=normal/24")["rows"][0]["episode_id"]
    data = app.json(f"/api/episodes/{episode}")
    body = next(
        r["response_body"]
        for s in data["steps"]
        for r in s["requests"]
        if r["response_body"] and "html" in (r["mime_type"] or "")
    )
    _, headers, _ = app.get(body)
    assert headers["content-type"] == "application/octet-stream" and headers[
        "content-disposition"
    ].startswith("attachment")
    assert headers["content-security-policy"] == "default-src 'none'; sandbox"
    _, headers, text = app.get(body + "&view=text")
    assert headers["content-type"] == "text/plain; charset=utf-8" and b"<" in text


def test_other_host_names_are_refused_on_loopback(app: Served) -> None:
    code, _, body = app.get("/api/runs", headers={"Host": "attacker.example:8787"})
    assert code == 400 and "127.0.0.1 or localhost only" in json.loads(body)["error"]
    assert app.get("/api/runs", headers={"Host": "localhost"})[0] == 200


def test_episodes_are_paged_and_sorted_over_the_index(app: Served) -> None:
    seen = []
    for offset in range(0, 9, 2):
        page = app.json(f"/api/episodes?run=seeded&limit=2&offset={offset}&sort=task_id")
        assert page["total"] == 9
        seen += [r["task_id"] for r in page["rows"]]
    assert seen == sorted(seen) and len(set(seen)) == 9
    failed = app.json("/api/episodes?run=seeded&verdict=fail&mode=wrong_answer")
    assert {r["task_id"] for r in failed["rows"]} == {"normal/2", "normal/24", "multi567/1", "multi567/4"}


@settings(
    max_examples=sized(20, 60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(NAMES, TEXT), max_size=6))
def test_any_query_string_gets_rows_or_a_clear_error(app: Served, pairs: list[tuple[str, str]]) -> None:
    for path in ("/api/episodes", "/api/facets", "/api/analysis", "/api/compare"):
        code, headers, body = app.get(f"{path}?{urlencode(pairs)}")
        assert code in (200, 400, 404), (path, pairs, code)
        data = json.loads(body)
        assert ("error" in data) == (code != 200) and "Traceback" not in body.decode()


@settings(
    max_examples=sized(15, 40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(TEXT)
def test_any_episode_id_or_hash_gets_an_answer(app: Served, text: str) -> None:
    for path in (f"/api/episodes/{quote(text, safe='')}", f"/blobs/{quote(text, safe='')}"):
        code, _, body = app.get(path)
        assert code in (200, 400, 404), (path, code)
        assert "Traceback" not in body.decode(errors="replace")


@given(st.dictionaries(NAMES, st.lists(TEXT, max_size=3), max_size=6))
def test_episode_queries_are_checked_or_refused(given_params: dict[str, list[str]]) -> None:
    try:
        query = episode_query(given_params, "hops")
    except BadRequest as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert set(query.filters) <= set(FILTERS) and 1 <= query.limit <= 500 and query.offset >= 0


# -- starting the server ---------------------------------------------------------------------


def mmina(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmina", *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )


def test_binding_elsewhere_needs_expose_and_a_port_in_use_is_one_line(store: Path) -> None:
    refused = mmina("serve", "--store", str(store), "--host", "0.0.0.0")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "--expose" in refused.stderr
    missing = mmina("serve", "--store", str(store / "nowhere"))
    assert missing.returncode == 1 and missing.stderr.startswith("Error: no store at")
    with Served(store) as app:
        port = app.url.rsplit(":", 1)[1].strip("/")
        taken = mmina("serve", "--store", str(store), "--port", port)
    assert taken.returncode == 1 and taken.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}")


def test_a_token_is_asked_of_every_request(store: Path) -> None:
    with Served(store, "--token", "s3cret-token") as app:
        assert app.url.endswith("/?token=s3cret-token")
        code, _, body = app.get("/api/runs")
        assert code == 401 and "needs its token" in json.loads(body)["error"]
        assert app.get("/api/runs", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert app.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
        assert app.get("/", headers={"Cookie": "mmina_token=s3cret-token"})[0] == 200


# -- an object store -------------------------------------------------------------------------


@pytest.fixture
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        server.make_bucket("serve")
        yield server


def test_an_s3_store_is_served_and_followed(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"s3://serve/{uuid.uuid4().hex[:8]}"
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    served_and_followed(url, s3.env)


def test_a_local_store_is_followed_on_every_page(tmp_path: Path) -> None:
    """The runs page, the episodes and SQL all see an episode committed while serving (each
    connection's views read the files listed when it was made)."""
    served_and_followed(str(tmp_path / "store"), {})


def served_and_followed(url: str, env: dict[str, str]) -> None:
    store = Store.open(url, create=True)
    begin(store, "r1", tasks=("normal/1", "normal/2"))
    shots = write_episode(
        store, "r1", "e1", blobs=[b"\xff\xd8\xff\xe0first", b"\xff\xd8\xff\xe0second"], n_requests=2
    )
    with Served(url, env=env) as app:
        app.indexed()
        runs = app.json("/api/runs")["runs"]
        assert [(r["run_id"], r["episodes"], r["task_count"]) for r in runs] == [("r1", 1, 2)]
        episode = app.json("/api/episodes/e1")
        assert [s["url"] for s in episode["steps"]] == [
            "http://wiki.mmina.test/p0",
            "http://wiki.mmina.test/p1",
        ]
        code, _, image = app.get(episode["steps"][1]["screenshot"])
        assert (
            code == 200
            and image == b"\xff\xd8\xff\xe0second"
            and shots[1] in episode["steps"][1]["screenshot"]
        )
        write_episode(store, "r1", "e2")
        app.wait_for(lambda: app.json("/api/runs")["runs"][0]["episodes"] == 2, timeout=60)
        app.wait_for(lambda: app.json("/api/episodes?run=r1")["total"] == 2, timeout=60)
        assert app.json("/api/sql", {"query": "select count(*) from episodes"})["rows"] == [[2]]


def test_help_has_an_example_and_the_docs_document_it() -> None:
    result = mmina("serve", "--help")
    assert (
        result.returncode == 0
        and "Examples:" in result.stdout
        and "mmina serve --store s3://" in result.stdout
    )
    assert "mmina serve [--store S] [--host 127.0.0.1] [--port 8787]" in page("serve.md")
    assert "](serve.png)" in page("serve.md") and "](docs/serve.png)" in (REPO_ROOT / "README.md").read_text()
    assert (REPO_ROOT / "docs" / "serve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("background_job", [False, True], ids=["foreground", "background-job"])
def test_ctrl_c_stops_the_server_promptly_even_with_pages_waiting(store: Path, background_job: bool) -> None:
    """Also when started where SIGINT is ignored (a shell's background job, some CI runners):
    `kill -INT` still stops it with 130."""
    with Served(store, background_job=background_job) as app:
        waiting = threading.Thread(target=lambda: app.get("/api/changes?since=0", timeout=60), daemon=True)
        waiting.start()
        time.sleep(1)
        assert app.proc is not None
        app.proc.send_signal(signal.SIGINT)
        assert app.proc.wait(timeout=30) == 130, "Ctrl-C ends every command with 130 after a clean stop"
        log = app.stderr()
        assert "Traceback" not in log and log.strip().endswith("Interrupted."), log
