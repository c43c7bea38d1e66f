"""Many episodes in flight: threads sharing one Chromium, worker processes, Ray actors.

Results must not depend on how many episodes ran at once or where: the same tasks recorded
serially, with ``--concurrency``, with processes and with Ray give the same steps. Episodes in
flight side by side must not see each other's cookies or storage (a site written for this
test, in its own style), and one that fails — its agent raises, its start page is down, its
renderer crashes — costs that episode only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.executors.interface import Layout
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.fidelity import summarize
from mmina.replayer.replays import replay_agent, replay_run
from mmina.store import Store
from mmina.store.inspect import verify_store
from mmina.store.sql import run_query

TASKS = ("normal/1", "normal/2", "shopping/6", "compare/1")
VISITORS = ("ana", "ben", "chi", "dev", "eli", "fay")

SHOW_PAGE = """<!doctype html><title>Who is here</title><main><p id="who">loading</p></main>
<script>document.getElementById('who').textContent =
  'cookie ' + document.cookie + ' storage who=' + localStorage.getItem('who');</script>"""


class CookieHandler(BaseHTTPRequestHandler):
    """``/set?who=X`` stores X in a cookie and in localStorage; ``/show`` shows both (slowly,
    so that episodes in flight overlap)."""

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        url = urlsplit(self.path)
        if url.path == "/set":
            who = parse_qs(url.query).get("who", ["nobody"])[0]
            body = (
                f"<!doctype html><title>Hello {who}</title><p>Hello {who}</p>"
                f"<script>localStorage.setItem('who', {json.dumps(who)})</script>"
            )
            self._send(body, {"Set-Cookie": f"who={who}; Path=/"})
        elif url.path == "/show":
            time.sleep(0.3)
            self._send(SHOW_PAGE, {})
        else:
            self.send_error(404)

    def _send(self, body: str, headers: dict[str, str]) -> None:
        data = body.encode()
        self.send_response(200)
        for name, value in {
            "Content-Type": "text/html; charset=utf-8",
            "Content-Length": str(len(data)),
            **headers,
        }.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def cookie_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), CookieHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _cookie_tasks(folder: Path, site: str, visitors: tuple[str, ...]) -> Path:
    suite = folder / "cookies"
    suite.mkdir(parents=True, exist_ok=True)
    for number, who in enumerate(visitors, start=1):
        task = {
            "task_id": number,
            "intent": "Who does the site think you are?",
            "start_url": f"{site}/set?who={who}",
            "eval": {
                "eval_types": ["string_match"],
                "reference_answers": {"must_include": [f"who={who}"]},
                "reference_url": "",
                "program_html": [],
                "string_note": "",
                "reference_answer_raw_annotation": f"who={who}",
            },
            "cnt_hop": 1,
            "procedure": ["end"],
        }
        (suite / f"{number}.json").write_text(json.dumps(task))
    return suite


def _steps(store: Path, run_id: str) -> dict[str, list[tuple[str, str, str]]]:
    """Each task's steps as (url, action, tree) in order."""
    rows = run_query(
        Store.open(store),
        "select e.task_id, s.url, s.action, s.tree_text from steps s "
        f"join episodes e using (episode_id) where e.run_id = '{run_id}' "
        "order by e.task_id, s.step_index",
    ).rows
    found: dict[str, list[tuple[str, str, str]]] = {}
    for task_id, url, action, tree in rows:
        found.setdefault(task_id, []).append((url, action, tree))
    return found


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    store = tmp_path_factory.mktemp("concurrency") / "store"
    return store, record_run(Store.open(store, create=True), RecordConfig(task_ids=TASKS))


# (2, 2) has two episodes in flight in each worker's Chromium too: (1, 4) only with MMINA_HEAVY=1
@pytest.mark.parametrize("workers, concurrency", [pytest.param(1, 4, marks=pytest.mark.heavy), (2, 2)])
def test_results_do_not_depend_on_how_many_episodes_run_at_once(
    serial: tuple[Path, RunSummary], workers: int, concurrency: int
) -> None:
    store, first = serial
    again = record_run(Store.open(store), RecordConfig(task_ids=TASKS, layout=Layout(workers, concurrency)))
    assert [e.task_id for e in again.episodes] == list(TASKS)
    assert all(e.status == "completed" and e.success for e in again.episodes)
    assert _steps(store, again.run_id) == _steps(store, first.run_id)


def test_with_episodes_in_flight_the_tasks_of_most_hops_start_first(serial: tuple[Path, RunSummary]) -> None:
    """Longest-first: the two 2-hop tasks take the two places in flight before either 1-hop task
    starts, and the summary still lists the suite's order."""
    store, _ = serial
    again = record_run(Store.open(store), RecordConfig(task_ids=TASKS, layout=Layout(1, 2)))
    assert [e.task_id for e in again.episodes] == list(TASKS)
    started = dict(
        run_query(
            Store.open(store), f"select task_id, started_at from episodes where run_id = '{again.run_id}'"
        ).rows
    )
    hops = {e.task_id: e.n_hops for e in again.episodes}
    assert sorted(hops.values()) == [1, 1, 2, 2]
    assert max(started[t] for t in hops if hops[t] == 2) < min(started[t] for t in hops if hops[t] == 1)


def test_ray_on_a_local_cluster_records_the_same_steps(serial: tuple[Path, RunSummary]) -> None:
    store, first = serial
    result = CliRunner().invoke(
        cli,
        [
            "record",
            "--store",
            str(store),
            "--executor",
            "ray",
            "--workers",
            "2",
            "--concurrency",
            "2",
            "--format",
            "json",
            *[f"--task={t}" for t in TASKS],
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["finished"] == len(TASKS) and summary["errors"] == 0
    assert _steps(store, summary["run_id"]) == _steps(store, first.run_id)
    config = run_query(
        Store.open(store), f"select config_json from runs where run_id = '{summary['run_id']}'"
    ).rows
    assert json.loads(config[0][0])["executor"] == "ray"


def test_episodes_in_flight_keep_their_cookies_and_storage_apart(tmp_path: Path, cookie_site: str) -> None:
    suite = _cookie_tasks(tmp_path / "tasks", cookie_site, VISITORS)
    summary = record_run(
        Store.open(tmp_path / "store", create=True),
        RecordConfig(
            tasks=str(suite),
            agent="tests.agents_for_tests:CookieReader",
            layout=Layout(concurrency=len(VISITORS)),
        ),
    )
    answers = {e.task_id: e.final_answer for e in summary.episodes}
    assert answers == {str(i): f"who={who} storage who={who}" for i, who in enumerate(VISITORS, start=1)}
    assert summary.duration_s * 1e3 < sum(e.duration_ms for e in summary.episodes), "episodes should overlap"


def test_a_failing_episode_costs_that_episode_only(tmp_path: Path, cookie_site: str) -> None:
    """Its agent raises, its start page does not answer, its renderer crashes: the others, in
    flight at the same time, complete."""
    visitors = ("ana", "raise", "ben", "crash", "chi")
    suite = _cookie_tasks(tmp_path / "tasks", cookie_site, visitors)
    down = json.loads((suite / "1.json").read_text())
    (suite / "6.json").write_text(
        json.dumps({**down, "task_id": 6, "start_url": "http://127.0.0.1:9/set?who=dan"})
    )
    summary = record_run(
        Store.open(tmp_path / "store", create=True),
        RecordConfig(
            tasks=str(suite), agent="tests.agents_for_tests:CookieReader", layout=Layout(concurrency=6)
        ),
    )
    by_task = {e.task_id: e for e in summary.episodes}
    assert len(by_task) == 6
    for number, who in ((1, "ana"), (3, "ben"), (5, "chi")):
        episode = by_task[str(number)]
        assert (episode.status, episode.final_answer) == ("completed", f"who={who} storage who={who}")
    assert by_task["2"].status == "error" and "fails on purpose" in by_task["2"].error
    assert by_task["6"].status == "error" and "cannot open the start page" in by_task["6"].error
    crashed = by_task["4"]
    assert crashed.n_steps >= 1 and crashed.final_answer in ("crashed", None)
    rows = run_query(Store.open(tmp_path / "store"), "select count(*) from episodes").rows
    assert rows == [(6,)]


def test_ctrl_c_lets_the_episodes_in_flight_finish_and_resume_records_the_rest(
    tmp_path: Path, cookie_site: str
) -> None:
    suite = _cookie_tasks(tmp_path / "tasks", cookie_site, VISITORS)
    store = Store.open(tmp_path / "store", create=True)
    config = RecordConfig(
        tasks=str(suite),
        agent="tests.agents_for_tests:CookieInterrupter",
        run_id="interrupted",
        layout=Layout(concurrency=3),
    )
    with pytest.raises(KeyboardInterrupt):
        record_run(store, config)
    finished = {r[0] for r in run_query(Store.open(tmp_path / "store"), "select task_id from episodes").rows}
    assert (
        "2" not in finished and {"1", "3"} <= finished
    )  # ben's leaves nothing; those in flight with it commit
    assert verify_store(Store.open(tmp_path / "store")).ok
    resumed = record_run(
        Store.open(tmp_path / "store"),
        replace(config, agent="tests.agents_for_tests:CookieReader", resume=True),
    )
    assert {e.task_id for e in resumed.episodes} == {str(i) for i in range(1, len(VISITORS) + 1)} - finished
    assert [
        r[0] for r in run_query(Store.open(tmp_path / "store"), "select count(*) from episodes").rows
    ] == [len(VISITORS)]


# Ray actors replaying only with MMINA_HEAVY=1: by default, Ray actors record (above) and replays
# are shipped to worker processes
@pytest.mark.parametrize(
    "layout",
    [
        Layout(concurrency=len(TASKS)),
        Layout(workers=2, concurrency=2),
        pytest.param(Layout(workers=2, concurrency=2, executor="ray"), marks=pytest.mark.heavy),
    ],
    ids=["threads", "processes", "ray"],
)
def test_replay_spread_out_is_as_faithful(serial: tuple[Path, RunSummary], layout: Layout) -> None:
    store, first = serial
    report = replay_run(Store.open(store), first.run_id, layout=layout)
    summary = summarize(report.episodes)
    assert summary["fidelity"] == 1.0 and summary["requests"].unmatched == 0
    assert [e.task_id for e in report.episodes] == list(TASKS)
    assert summary["steps"] == sum(e.n_steps for e in first.episodes)


def test_a_new_agent_on_the_archive_with_concurrency(serial: tuple[Path, RunSummary]) -> None:
    store, first = serial
    report = replay_agent(Store.open(store), "oracle", first.run_id, layout=Layout(concurrency=3))
    assert [e.result.task_id for e in report.episodes] == list(TASKS)
    assert all(e.result.success and e.requests.unmatched == 0 for e in report.episodes)
