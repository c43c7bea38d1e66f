"""``mmina serve`` at scale, and the HTML report's size.

The server (the real command line, its own process) serves the synthetic store of the scale
section (100,000 episodes / 1,000,000 steps, scored by ``hops``): how soon its first page is
ready, an episode page, a filter over every episode, a step's screenshot, its memory while
paging through every episode, and how soon a newly committed episode of a run being written
shows. Then ``mmina report --format html`` on the 100 built-in tasks recorded by the
heuristic agent: the page's size, its folder's, and the time it takes.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.results import Section, Target, ratio
from bench.synthetic import STEPS, build, run_row
from mmina.analysis.html import write_report
from mmina.analysis.report import build_report
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.executors.interface import Layout
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.serve_helpers import Served  # noqa: E402 - the tests' way of starting the real server

FIRST_PAGE = ("/", "/static/app.js", "/static/app.css", "/api/changes?since=-1", "/api/runs")
"""What the browser fetches to show the runs page."""
FILTERS = (
    "mode=wandered",
    "answer=could",
    "site=kiwix&verdict=fail&first_failure=2",
    "sort=n_hops&order=desc",
    "bucket=5%2B&sort=cost_usd&order=desc",
    "task=synthetic/7&status=completed",
    "error=timeout",
)
SAMPLES = 20
PAGE = 500
LIVE_EPISODES = 5
BUILTIN_RUN = "heuristic"


def timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    return float("nan")


def fetch(app: Served, path: str) -> bytes:
    status, _, body = app.get(path)
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:200]!r}")
    return body


def serve_section(
    work: Path, episodes: int, log: Callable[[str], None], builtin_limit: int | None = None
) -> list[Section]:
    """The server's figures on a synthetic store of ``episodes``, then the HTML report's on the
    built-in suite (its first ``builtin_limit`` tasks when given: a smoke run)."""
    root = work / "synthetic"
    log(f"serve: writing a synthetic store of {episodes} episodes and scoring it")
    build(root, episodes, log)
    rescore(Store.open(root), RescoreConfig(evaluator="hops"))
    section = Section("serve")
    with Served(root) as app:
        first_page(section, app)
        log("serve: the episode index filling")
        _, wall = timed(lambda: app.indexed(timeout=3600))
        section.add(
            "episode index built",
            round(wall, 1),
            "s",
            note=f"{episodes} episodes; pages work meanwhile, filters see the runs indexed so far",
        )
        episode_pages(section, app, episodes)
        filters(section, app, episodes)
        screenshots(section, app, episodes)
        log("serve: paging through every episode")
        memory(section, app, episodes)
        log("serve: a run being written")
        live(section, app, Store.open(root))
    return [section, html_section(work, log, builtin_limit)]


def first_page(section: Section, app: Served) -> None:
    """From the address printed (the socket listening) to the runs page's data in hand."""
    listening = time.monotonic()
    for path in FIRST_PAGE:
        fetch(app, path)
    ready = time.monotonic() - listening
    section.add(
        "first page ready after the server starts",
        round(ready, 3),
        "s",
        Target(1.0),
        note=f"the runs page: {', '.join(FIRST_PAGE)}; process start to listening "
        f"{listening - app.started:.1f} s (Python imports)",
    )


def episode_ids(app: Served, episodes: int, count: int, seed: int) -> list[str]:
    """Episodes spread over every run (each first visit to its run costs that run's views)."""
    rng = random.Random(seed)
    return [f"syn-{rng.randrange(episodes):07d}" for _ in range(count)]


def episode_pages(section: Section, app: Served, episodes: int) -> None:
    """Episodes of random runs, each the first of its run the server reads (which then makes
    that run's views), and the next episode of each, whose run it has seen."""
    first = episode_ids(app, episodes, SAMPLES, 1)
    cold = [timed(lambda: fetch(app, f"/api/episodes/{e}"))[1] for e in first]  # noqa: B023 (called at once)
    warm = [timed(lambda: fetch(app, f"/api/episodes/{_next(e, episodes)}"))[1] for e in first]  # noqa: B023 (called at once)
    for name, walls in (
        ("an episode page, its run seen first", cold),
        ("an episode page, its run seen before", warm),
    ):
        section.add(
            name,
            round(1000 * statistics.median(walls)),
            "ms",
            Target(300),
            note=f"median of {SAMPLES} episodes of random runs; slowest {1000 * max(walls):.0f} ms",
        )


def _next(episode_id: str, episodes: int) -> str:
    number = int(episode_id.removeprefix("syn-"))
    return f"syn-{(number + 1) % episodes:07d}"


def filters(section: Section, app: Served, episodes: int) -> None:
    walls, totals = [], []
    for given in FILTERS:
        body, wall = timed(lambda: fetch(app, f"/api/episodes?{given}&limit=50"))  # noqa: B023 (called at once)
        walls.append(wall)
        totals.append(json.loads(body)["total"])
    section.add(
        "a filter over all episodes",
        round(1000 * max(walls)),
        "ms",
        Target(500),
        note=f"slowest of {len(FILTERS)} filters and sorts over {episodes} episodes (median "
        f"{1000 * statistics.median(walls):.0f} ms; {min(totals)}–{max(totals)} matches)",
    )


def screenshots(section: Section, app: Served, episodes: int) -> None:
    urls = []
    for episode in episode_ids(app, episodes, SAMPLES, 2):
        steps = json.loads(fetch(app, f"/api/episodes/{episode}"))["steps"]
        urls.append(steps[len(steps) // 2]["screenshot"])
    walls = [timed(lambda: fetch(app, url))[1] for url in urls]  # noqa: B023 (called at once)
    section.add(
        "a step's screenshot",
        round(1000 * statistics.median(walls), 1),
        "ms",
        Target(50),
        note=f"median of {SAMPLES} blobs fetched by hash from their episode's pack, first time; slowest "
        f"{1000 * max(walls):.0f} ms (then the browser keeps them: immutable, ETag)",
    )


def memory(section: Section, app: Served, episodes: int) -> None:
    """Every page of the episodes table, an episode and a screenshot from each: the server's
    resident memory after the first tenth, and at the end."""
    pages = -(-episodes // PAGE)
    samples = []
    for number in range(pages):
        rows = json.loads(fetch(app, f"/api/episodes?limit={PAGE}&offset={number * PAGE}"))["rows"]
        steps = json.loads(fetch(app, f"/api/episodes/{rows[0]['episode_id']}"))["steps"]
        fetch(app, steps[0]["screenshot"])
        if number in (pages // 10, pages - 1):
            samples.append(rss_mb(app.pid))
    early, late = samples[0], samples[-1]
    section.add(
        "server memory paging through every episode",
        round(ratio(late, early), 2),
        "× (end / first tenth)",
        Target(1.2),
        note=f"{early:.0f} MB after {pages // 10} of {pages} pages of {PAGE}, {late:.0f} MB "
        f"at the end (each page with one episode and one screenshot)",
    )


def live(section: Section, app: Served, store: Store) -> None:
    """A new run written an episode at a time, as a recording does: from each commit to the
    runs page showing it."""
    store.begin_run("live", _run_row(), _task_rows(store))
    walls = []
    for number in range(LIVE_EPISODES):
        _write_episode(store, number)
        committed = time.monotonic()
        app.wait_for(lambda: _episodes_of(app, "live") == number + 1, timeout=60, every=0.05)  # noqa: B023 (called at once)
        walls.append(time.monotonic() - committed)
    section.add(
        "a newly committed episode shown",
        round(max(walls), 2),
        "s",
        Target(2.0),
        note=f"slowest of {LIVE_EPISODES} commits to a run being written, seen on /api/runs (median "
        f"{statistics.median(walls):.2f} s; the page is told at once through /api/changes)",
    )


def _episodes_of(app: Served, run_id: str) -> int:
    runs = json.loads(fetch(app, "/api/runs"))["runs"]
    return next((r["episodes"] for r in runs if r["run_id"] == run_id), 0)


def _run_row() -> dict[str, Any]:
    return {**run_row(LIVE_EPISODES), "created_at": datetime.now(UTC)}


def _task_rows(store: Store) -> list[dict[str, Any]]:
    first = store.run_ids()[0]
    return store.read("tasks", run_id=first).slice(0, LIVE_EPISODES).drop_columns(["run_id"]).to_pylist()


def _write_episode(store: Store, number: int) -> None:
    now = datetime.now(UTC)
    writer = store.episode_writer("live", f"live-{number}")
    shot = writer.put_blob(b"\xff\xd8\xff\xe0" + str(number).encode() * 1000, "image/jpeg")
    for index in range(STEPS):
        writer.add_step(
            {
                "step_index": index,
                "started_at": now,
                "url": f"http://wiki.mmina.test/{index}",
                "screenshot": shot,
                "action": "click [1]",
                "action_kind": "click",
                "live_hops": 0,
            }
        )
    task = store.read("tasks", run_id="live", columns=["task_id"]).column("task_id")[number].as_py()
    writer.commit(
        {
            "task_id": task,
            "attempt": 1,
            "status": "completed",
            "stop_reason": "stop",
            "final_answer": "x",
            "n_steps": STEPS,
            "n_hops": 1,
            "live_hops": 0,
            "hop_steps": [],
            "started_at": now,
            "ended_at": now + timedelta(seconds=1),
            "duration_ms": 1000.0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cost_usd": 0.0,
            "error": None,
        }
    )


def html_section(work: Path, log: Callable[[str], None], limit: int | None) -> Section:
    """The built-in suite recorded by the heuristic agent (two workers), then its HTML report."""
    section = Section("report-html")
    root = work / "builtin"
    log("report: recording the built-in suite with the heuristic agent")
    summary = record_run(
        Store.open(root, create=True),
        RecordConfig(agent="heuristic", run_id=BUILTIN_RUN, limit=limit, layout=Layout(workers=2)),
    )
    store = Store.open(root)
    log("report: writing the HTML report")
    written, wall = timed(
        lambda: write_report(store, build_report(store, [BUILTIN_RUN]), work / "report.html", 50)
    )
    steps = sum(e.n_steps for e in summary.episodes)
    section.add(
        "HTML report page",
        round(written.page_bytes / 1e6, 2),
        "MB",
        Target(5.0),
        note=f"{len(summary.episodes)} episodes ({steps} steps), 50 in the viewer",
    )
    section.add(
        "HTML report files next to it",
        round(written.folder_bytes / 1e6, 1),
        "MB",
        note=f"plotly.js and {written.images} screenshots, 640 px JPEG, each once",
    )
    section.add(
        "HTML report time", round(wall, 1), "s", note="tables, charts, viewer (marks painted again, shrunk)"
    )
    return section
