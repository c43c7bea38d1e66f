"""``blocked``: the environment's failure, not the agent's (issue 54, item 3). Fixture sites made
to fail — a start page nobody serves, one that answers 503, a hop's site that goes down, a bot
check, a login wall the task did not ask for — recorded by the oracle in a real Chromium: each
episode keeps its evidence (``episodes.blocked``), is ``blocked`` in ``episode_scores`` and in no
rate of ``mmina report``, which counts it apart; the same pages when the task asks to log in,
and a working site, are not blocked. A person's label can say ``blocked`` too."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.tasks.blocking import BOT_WALL, LOGIN_WALL, SITE_DOWN, START_PAGE, FinalPage, blocked_at_end
from tests.local_site import LocalSite
from tests.store_helpers import REPO_ROOT

HOME = (
    "<!doctype html><title>Harbour shop</title><h1>Harbour shop</h1><a href='/orders'>Orders</a> "
    "<a href='/tides'>Tides</a> <a href='/check'>Deals</a>"
)
ROUTES: dict[str, tuple[int, dict[str, str], str]] = {
    "/": (200, {}, HOME),
    "/down": (
        503,
        {},
        "<!doctype html><title>Service Unavailable</title><p>The shop is down for maintenance.",
    ),
    "/tides": (502, {}, "<!doctype html><title>502 Bad Gateway</title><h1>Bad Gateway</h1>"),
    "/check": (
        200,
        {},
        "<!doctype html><title>Just a moment...</title><p>Verify you are human by completing the "
        "action below.<button>I'm not a robot</button>",
    ),
    "/orders": (302, {"Location": "/login?next=/orders"}, ""),
    "/login": (
        200,
        {},
        "<!doctype html><title>Sign in</title><h1>Sign in</h1><label>Email <input name=email>"
        "</label><label>Password <input type=password name=password></label><button>Sign in</button>",
    ),
}
CLICK = {"action": "click", "target": {"role": "link", "name": "{}"}}


class _Shop(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        status, headers, body = ROUTES.get(self.path.split("?")[0], (404, {}, "no such page"))
        data = body.encode()
        self.send_response(status)
        for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nobody listens once the probe closes


def _task(folder: Path, number: int, start: str, intent: str, link: str | None) -> None:
    script = ([json.loads(json.dumps(CLICK).replace("{}", link))] if link else []) + [
        {"action": "stop", "answer": "x"}
    ]
    (folder / f"{number}.json").write_text(
        json.dumps(
            {
                "task_id": number,
                "intent": intent,
                "start_url": start,
                "procedure": ["shop", "end"],
                "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["42"]}},
                "reference_script": script,
            }
        )
    )


CASES = {  # task number: (start path or None for a closed port, link to click, intent, rule expected)
    1: (None, None, "Find the price of rope.", START_PAGE),
    2: ("/down", None, "Find the price of rope.", START_PAGE),
    3: ("/", "Tides", "Find the next high tide.", SITE_DOWN),
    4: ("/", "Deals", "Find today's deal.", BOT_WALL),
    5: ("/", "Orders", "Find the total of my last order.", LOGIN_WALL),
    6: ("/", "Orders", "Log in and find the total of my last order.", None),  # the task asks to log in
    7: ("/", None, "Find the name of the shop.", None),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("blocked")
    suite = folder / "tasks" / "shop"
    suite.mkdir(parents=True)
    with LocalSite(_Shop) as site:
        for number, (start, link, intent, _rule) in CASES.items():
            url = f"http://127.0.0.1:{_closed_port()}/" if start is None else site.url.rstrip("/") + start
            _task(suite, number, url, intent, link)
        store = Store.open(folder / "store", create=True)
        summary = record_run(
            store,
            RecordConfig(
                tasks=str(suite.parent),
                agent="oracle",
                browser=BrowserConfig(screenshots=False, set_of_marks=False),
            ),
        )
    yield folder / "store", summary.run_id


def _mmina(*args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "mmina", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_each_site_made_to_fail_is_blocked_with_its_evidence(recorded: tuple[Path, str]) -> None:
    store, _run = recorded
    rows = {r["task_id"]: r for r in Store.open(store).read("episodes").to_pylist()}
    found = {
        int(task.split("/")[1]): json.loads(row["blocked"]) if row["blocked"] else None
        for task, row in rows.items()
    }
    assert {n: f and f["rule"] for n, f in found.items()} == {n: case[3] for n, case in CASES.items()}
    assert "ERR_CONNECTION_REFUSED" in found[1]["error"] and found[2]["status"] == 503
    assert found[3]["status"] == 502 and found[3]["url"].endswith("/tides")
    assert found[4]["matched"].lower() in ("just a moment...", "verify you are human")
    assert found[5]["asked_for"].endswith("/orders") and "/login" in found[5]["url"]


def test_blocked_episodes_are_in_no_rate_and_counted_apart(recorded: tuple[Path, str]) -> None:
    store, run = recorded
    scored = _mmina(
        "sql",
        "--store",
        str(store),
        "SELECT task_id, verdict, passed FROM episode_scores WHERE evaluator = 'hops' ORDER BY task_id",
    )
    verdicts = {r["task_id"]: (r["verdict"], r["passed"]) for r in scored}
    assert [verdicts[f"shop/{n}"] for n in (1, 2, 3, 4, 5)] == [("blocked", None)] * 5
    assert verdicts["shop/6"][0] != "blocked" and verdicts["shop/7"][0] != "blocked"
    report = _mmina("report", "--store", str(store), "--run", run)
    assert (report["tasks"], report["blocked"]) == (2, 5)


def test_a_person_can_label_an_episode_blocked(recorded: tuple[Path, str], tmp_path: Path) -> None:
    store, _run = recorded
    episode = next(
        r["episode_id"] for r in Store.open(store).read("episodes").to_pylist() if r["task_id"] == "shop/7"
    )
    labels = tmp_path / "labels.csv"
    labels.write_text(f"episode_id,hop,label,labeller,note\n{episode},,blocked,alice,a cookie wall\n")
    done = subprocess.run(
        [sys.executable, "-m", "mmina", "import", "labels", str(labels), "--store", str(store)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = _mmina(
        "sql",
        "--store",
        str(store),
        f"SELECT verdict, passed FROM episode_scores WHERE evaluator = 'human' AND episode_id = '{episode}'",
    )
    assert (row["verdict"], row["passed"]) == ("blocked", None)


def test_the_rules_leave_the_agents_own_mistakes_alone() -> None:
    start = ["https://shop.example/"]
    typo = FinalPage(
        url="chrome-error://chromewebdata/", error="net::ERR_NAME_NOT_RESOLVED at https://shpo.example/"
    )
    assert (
        blocked_at_end(typo, "Buy rope.", start, ["shop"]) is None
    )  # a name that does not resolve: the agent's typing
    elsewhere = FinalPage(url="https://news.example/", status=503)
    assert blocked_at_end(elsewhere, "Buy rope.", start, ["shop"]) is None  # a site the task never needed
    hop = FinalPage(url="https://en.wikipedia.org/wiki/Rope", status=500)
    assert blocked_at_end(hop, "Buy rope.", start, ["wikipedia"]).rule == SITE_DOWN  # type: ignore[union-attr]
    chosen = FinalPage(
        url="https://shop.example/login", text='textbox "Password"'
    )  # the agent clicked "Sign in" itself
    assert blocked_at_end(chosen, "Buy rope.", start, ["shop"]) is None
