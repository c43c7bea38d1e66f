"""Labelling in ``mmina serve``: a person labels a run with the keyboard in a real Chromium, the
labels land in the store as ``human`` batches and ``mmina agreement`` reads them; the queue
follows runs, buckets and disagreements; and the write path refuses what it must: requests
from other sites' pages (tried from a real page of another origin), other Host names, a
missing token, a read-only server, bad labels."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from playwright.sync_api import Page, expect

from mmina.cli import cli
from mmina.store import Store
from tests import test_serve
from tests.judge_helpers import synthetic_store, write_verdicts
from tests.serve_helpers import Served

browser, page = test_serve.browser, test_serve.page
"""The fixtures of the serve tests: the real Chromium, and a page that fails on script errors."""

EPISODES = [
    ("r1", "e1", "t1", 1),
    ("r1", "e2", "t2", 3),
    ("r1", "e3", "t3", 5),
    ("r2", "g1", "t1", 1),
    ("r2", "g2", "t2", 3),
]
HOPS = {
    "e1": ("pass", ["pass"]),
    "e2": ("fail", ["pass", "fail", "fail"]),
    "e3": ("fail", ["pass"] * 4 + ["fail"]),
    "g1": ("pass", ["pass"]),
    "g2": ("pass", ["pass"] * 3),
}
FUZZY = {"e1": ("pass", []), "e2": ("pass", []), "e3": ("fail", []), "g1": ("fail", []), "g2": ("pass", [])}
LABEL = {"episode_id": "e1", "labels": [{"hop": None, "label": "pass"}]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("labelling") / "store"
    opened = synthetic_store(path, EPISODES, blobs=[b"\xff\xd8\xff\xe0one", b"\xff\xd8\xff\xe0two"])
    write_verdicts(opened, "hops", HOPS, EPISODES)
    write_verdicts(opened, "fuzzy", FUZZY, EPISODES)
    return path


@pytest.fixture(scope="module")
def app(store: Path) -> Iterator[Served]:
    with Served(store, "--labeller", "server-default") as served:
        served.indexed()
        yield served
    assert "Traceback" not in served.stderr()


def labels_of(store: Path, labeller: str) -> list[dict[str, Any]]:
    """The labeller's stored rows, oldest batch first."""
    rows = [
        r
        for r in Store.open(store).read("scores").to_pylist()
        if r["evaluator"] == "human" and json.loads(r["args_json"]) == {"labeller": labeller}
    ]
    return sorted(rows, key=lambda r: (r["scored_at"], r["episode_id"], -1 if r["hop"] is None else r["hop"]))


def post(app: Served, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, answer = app.get("/api/labels", data, {"Content-Type": "application/json", **(headers or {})})
    return status, json.loads(answer)


# -- labelling with the keyboard ------------------------------------------------------------------


def test_a_run_is_labelled_with_the_keyboard(app: Served, page: Page, store: Path) -> None:
    page.goto(app.url + "#/label")
    page.fill("#labeller", "kb")
    page.press("#labeller", "Tab")
    page.select_option("#label-runs", ["r1"])
    expect(page.locator("#label-counts")).to_have_text("3 of 3 episode(s) left to label as kb (0 labelled).")
    page.click("#label-start")
    took = []
    # e1 (1 hop): every item passes. e2 (3 hops): hop 1 pass, hop 2 fail, hop 3 unsure, task fail, with a note.
    # e3 (5 hops): everything fails, then hop 1 passes after all.
    for episode, keys, note in (
        ("e1", ["Shift+P"], ""),
        ("e2", ["p", "f", "u", "f"], "price on the wrong page"),
        ("e3", ["Shift+F", "1", "p"], ""),
    ):
        expect(page.locator("#episode-title")).to_have_text(f"t{episode[1]} (r1)")
        expect(page.locator("#label-panel")).to_be_visible()
        assert episode in page.url and not page.locator("#episode-verdicts").is_visible(), (
            "verdicts hidden while labelling"
        )
        for key in keys:
            page.keyboard.press(key)
        if note:
            page.keyboard.press("n")
            page.keyboard.type(note)
        started = time.monotonic()
        page.keyboard.press("Enter")
        if episode != "e3":
            page.wait_for_function(
                f"location.hash.startsWith('#/episode/') && !location.hash.includes('/{episode}?')"
            )
            took.append(time.monotonic() - started)
    expect(page.locator("#label-done")).to_be_visible()
    print(f"save and next episode: {', '.join(f'{t:.2f} s' for t in took)}")
    rows = [(r["episode_id"], r["level"], r["hop"], r["verdict"]) for r in labels_of(store, "kb")]
    assert rows == [
        ("e1", "task", None, "pass"),
        ("e1", "hop", 1, "pass"),
        ("e2", "task", None, "fail"),
        ("e2", "hop", 1, "pass"),
        ("e2", "hop", 2, "fail"),
        ("e2", "hop", 3, "unclear"),
        ("e3", "task", None, "fail"),
        ("e3", "hop", 1, "pass"),
    ] + [("e3", "hop", i, "fail") for i in range(2, 6)]
    e2 = [json.loads(r["detail_json"]) for r in labels_of(store, "kb") if r["episode_id"] == "e2"]
    assert all(d["note"] == "price on the wrong page" and d["source"] == "serve" for d in e2)
    assert e2[-1]["label"] == "unsure"
    result = CliRunner().invoke(
        cli,
        [
            "agreement",
            "--store",
            str(store),
            "--run",
            "r1",
            "--evaluator",
            "hops",
            "--reference",
            "human:kb",
            "--format",
            "json",
        ],
    )
    groups = {(g["level"], g["by"], g["group"]): g for g in json.loads(result.stdout)["groups"]}
    assert (groups[("task", "all", "all")]["tp"], groups[("task", "all", "all")]["tn"]) == (1, 2)
    assert groups[("hop", "all", "all")]["unsure_reference"] == 1 and groups[("hop", "hop", "5")]["tn"] == 1


def test_relabelling_shows_the_labels_and_replaces_them(app: Served, page: Page, store: Path) -> None:
    assert (
        post(
            app,
            {
                **LABEL,
                "labeller": "re",
                "labels": [{"hop": None, "label": "fail"}, {"hop": 1, "label": "pass"}],
            },
        )[0]
        == 200
    )
    page.goto(app.url + "#/label")
    page.fill("#labeller", "re")
    page.press("#labeller", "Tab")
    page.goto(app.url + "#/episode/e1")
    expect(page.locator('#label-panel [data-item="task"] button.chosen')).to_have_text("fail")
    expect(page.locator('#label-panel [data-item="hop-1"] button.chosen')).to_have_text("pass")
    expect(page.locator("#episode-verdicts")).to_be_visible()
    page.keyboard.press("t")
    page.keyboard.press("p")
    page.keyboard.press("Enter")
    page.wait_for_function("!location.hash.includes('/e1')")
    batches = {}
    for row in labels_of(store, "re"):
        batches.setdefault(row["batch_id"], []).append((row["hop"], row["verdict"]))
    assert list(batches.values()) == [[(None, "fail"), (1, "pass")], [(None, "pass"), (1, "pass")]], (
        "a save is a new batch; the earlier one stays"
    )
    assert app.json("/api/episodes/e1/labels?labeller=re")["labels"] == [
        {"hop": None, "label": "pass", "note": ""},
        {"hop": 1, "label": "pass", "note": ""},
    ]


def test_a_link_of_mmina_agreement_opens_the_episode(app: Served, page: Page) -> None:
    page.goto(app.url.split("?")[0].rstrip("/") + "/#/episode/g2")
    expect(page.locator("#episode-title")).to_have_text("t2 (r2)")
    expect(page.locator('#label-panel [data-item="hop-3"]')).to_have_text(
        "hop 3 (site2)passfailunsureblocked"
    )


# -- the queue --------------------------------------------------------------------------------------


def test_the_queue_follows_runs_buckets_and_disagreements(app: Served) -> None:
    def queue(query: str) -> dict[str, Any]:
        return app.json("/api/labels/queue?labeller=q&" + query)

    assert queue("")["total"] == 5 and queue("")["next"] == "e1"
    assert (queue("run=r2")["total"], queue("run=r2")["next"]) == (2, "g1")
    assert (queue("bucket=2-4")["total"], queue("bucket=2-4")["next"]) == (2, "e2")
    differing = queue("disagree=hops&disagree=fuzzy")
    assert (differing["total"], differing["next"]) == (2, "e2"), "hops and fuzzy differ on e2 and g1"
    assert queue("disagree=hops&disagree=fuzzy&after=e2")["next"] == "g1"
    assert queue("disagree=hops&disagree=fuzzy&after=g1")["next"] == "e2", "round to the start"
    assert post(app, {"episode_id": "e2", "labeller": "q", "labels": [{"hop": 2, "label": "fail"}]})[0] == 200
    after = queue("disagree=hops&disagree=fuzzy&after=g1")
    assert (after["labelled"], after["left"], after["next"]) == (1, 1, None)
    assert app.get("/api/labels/queue?disagree=hops")[0] == 400
    assert app.get("/api/labels/queue?bucket=7")[0] == 400


# -- what a write needs ----------------------------------------------------------------------------


ATTACK = """<!DOCTYPE html><html><body>
<form id="f" method="POST" action="{target}/api/labels" enctype="text/plain">
<input name='{{"episode_id": "e1", "labeller": "victim", \
"labels": [{{"hop": null, "label": "fail"}}], "x": "' value='"}}'>
</form>
<script>
const body = JSON.stringify({{episode_id: 'e1', labeller: 'victim', labels: [{{hop: null, label: 'fail'}}]}});
window.tried = Promise.allSettled([
  fetch('{target}/api/labels', {{method: 'POST', mode: 'no-cors', \
headers: {{'Content-Type': 'application/json'}}, body}}),
  fetch('{target}/api/labels', {{method: 'POST', headers: {{'Content-Type': 'application/json'}}, body}}),
  fetch('{target}/api/labels', {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body}}),
]).then(results => results.map(r => r.status));
</script></body></html>"""


class Attacker:
    """A page on another origin (localhost on another port) that tries to write labels."""

    def __init__(self, target: str) -> None:
        page = ATTACK.format(target=target).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Attacker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_another_sites_page_cannot_write_labels(app: Served, page: Page, store: Path) -> None:
    target = app.url.split("?")[0].rstrip("/")
    with Attacker(target) as attacker:
        page.goto(attacker.url)
        assert page.evaluate("window.tried") == ["fulfilled", "rejected", "fulfilled"]
        with page.expect_navigation(url=f"{target}/api/labels"):
            page.evaluate("document.getElementById('f').submit()")
        assert "labels are sent as JSON" in page.locator("body").inner_text()
    time.sleep(0.5)
    assert labels_of(store, "victim") == []


def test_writes_need_json_from_this_servers_own_pages(app: Served, store: Path) -> None:
    origin = app.url.split("?")[0].rstrip("/")
    body = {**LABEL, "labeller": "guard"}
    assert post(app, json.dumps(body).encode(), {"Content-Type": "text/plain"}) == (
        415,
        {"error": "labels are sent as JSON (Content-Type: application/json)"},
    )
    assert post(app, body, {"Origin": "http://localhost:1"})[0] == 403
    assert post(app, body, {"Sec-Fetch-Site": "same-site"}) == (
        403,
        {"error": "a write must come from this server's own pages, not from a same-site page"},
    )
    assert post(app, body, {"Host": "evil.example"})[0] == 400, "the loopback rule holds for writes too"
    assert labels_of(store, "guard") == []
    assert post(app, body, {"Origin": origin, "Sec-Fetch-Site": "same-origin"})[0] == 200
    assert post(app, body)[0] == 200, "a client that is no browser sends neither header"
    assert len(labels_of(store, "guard")) == 2


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"episode_id": "nope", "labels": [{"hop": None, "label": "pass"}]}, 404, "no episode 'nope'"),
        (
            {"episode_id": "e2", "labels": [{"hop": 4, "label": "pass"}]},
            400,
            "episode e2 (t2) has hops 1 to 3, not hop 4",
        ),
        (
            {"episode_id": "e2", "labels": [{"hop": "1", "label": "pass"}]},
            400,
            'each label is {"hop": null or a hop',
        ),
        (
            {"episode_id": "e2", "labels": [{"hop": 1, "label": "maybe"}]},
            400,
            "a label is pass, fail, unsure or blocked",
        ),
        ({"episode_id": "e2", "labels": []}, 400, "label the task or a hop first"),
        (
            {"episode_id": "e2", "labeller": "x" * 81, "labels": [{"hop": 1, "label": "pass"}]},
            400,
            "a labeller's name",
        ),
        (
            {"episode_id": "e2", "note": "n" * 2001, "labels": [{"hop": 1, "label": "pass"}]},
            400,
            "a note is at most 2000",
        ),
        ([1, 2], 400, "send the labels as a JSON object"),
        (b"{not json", 400, "send the labels as a JSON object"),
    ],
)
def test_bad_labels_are_one_line_and_write_nothing(
    app: Served, store: Path, body: Any, status: int, message: str
) -> None:
    before = Store.open(store).files("scores")
    code, answer = post(app, body)
    assert code == status and message in answer["error"], answer
    assert Store.open(store).files("scores") == before


def test_a_token_guards_writes_and_read_only_refuses_them(store: Path) -> None:
    with Served(store, "--token", "t0ken", "--read-only") as app:
        assert post(app, {**LABEL, "labeller": "ro"}) == (
            401,
            {"error": "this server needs its token: open the address it printed (ending in ?token=...)"},
        )
        bearer = {"Authorization": "Bearer t0ken"}
        status, _, config = app.get("/api/labels/config", headers=bearer)
        assert status == 200 and json.loads(config)["writable"] is False
        assert post(app, {**LABEL, "labeller": "ro"}, bearer) == (
            403,
            {"error": "this server is read-only (started with --read-only)"},
        ), "the token let it past the gate"
    assert labels_of(store, "ro") == []
    labeller = CliRunner().invoke(cli, ["serve", "--store", str(store), "--labeller", " ", "--port", "0"])
    assert labeller.exit_code == 1 and "a labeller's name is 1 to 80 printable characters" in labeller.output
