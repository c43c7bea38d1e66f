"""The fixture web's kiwix viewer: a ZIM of the wiki in a real kiwix-serve, recorded and replayed.

The official tasks' Wikipedia hops run in kiwix-serve's viewer (the article in an iframe,
routed by the URL fragment); these tests record the built-in viewer tasks with the oracle in a
real Chromium, check what the recorder saw inside the iframe, and replay them from the archive
with the live fixture web up and counting requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmina.fixtures.web import FixtureWeb, kiwix
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.replays import replay_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.taskcheck import load_suite
from tests.heavy import sized

VIEWER_TASKS = tuple(
    t.task_id for t in load_suite().tasks if t.start_urls[0].startswith(f"http://{kiwix.HOST}/")
)
RECORDED = sized(("normal/43", "wikipedia/16", "wikipedia/18"), VIEWER_TASKS)
"""Recorded and replayed by default (13 of the 34 steps; every viewer task with MMINA_HEAVY=1):
one and two hops, a search, links inside the article, an article with an image."""
TOOLBAR_HEIGHT = 30  # the viewer's toolbar sits above the iframe: content boxes start below it


def rows(store: Store, sql: str) -> list[tuple]:
    return run_query(store, sql).rows


def test_the_suite_has_viewer_tasks_of_one_and_two_hops() -> None:
    hops = {t.task_id: t.n_hops for t in load_suite().tasks if t.task_id in VIEWER_TASKS}
    assert sorted(set(hops.values())) == [1, 2] and len(hops) >= 6


def test_the_book_holds_every_article_with_its_image(tmp_path: Path) -> None:
    from libzim.reader import Archive

    archive = Archive(str(kiwix.build_zim(tmp_path / "book.zim")))
    assert archive.main_entry.get_item().path == kiwix.MAIN_PATH and archive.has_fulltext_index
    entries = kiwix.zim_entries()
    assert archive.entry_count >= len(entries)
    solaria = bytes(archive.get_entry_by_path("A/Solaria").get_item().content).decode()
    assert 'href="Port_Meridian"' in solaria and 'src="../I/Flag_of_Solaria.png"' in solaria
    assert "/kiwix/" not in solaria, "links inside the book are relative"
    flag = archive.get_entry_by_path("I/Flag_of_Solaria.png").get_item()
    assert flag.mimetype == "image/png" and bytes(flag.content).startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, RunSummary]:
    store = Store.open(tmp_path_factory.mktemp("kiwix") / "store", create=True)
    return store, record_run(store, RecordConfig(task_ids=RECORDED, run_id="viewer"))


def test_the_oracle_completes_every_hop_in_the_viewer(recorded: tuple[Store, RunSummary]) -> None:
    store, summary = recorded
    assert all(e.status == "completed" and e.live_hops == e.n_hops for e in summary.episodes), (
        summary.episodes
    )
    verdicts = rows(
        store,
        "select task_id, passed, hops_passed, hops_total from episode_scores "
        "where evaluator = 'hops' order by task_id",
    )
    assert len(verdicts) == len(RECORDED) and all(v[1] and v[2] == v[3] for v in verdicts), verdicts
    urls = [u for (u,) in rows(store, "select url from steps where url like 'http://kiwix.%'")]
    assert any(u.endswith(f"#{kiwix.BOOK}/A/Solaria") for u in urls), "the viewer URL names the article shown"
    assert any(f"#search?books.name={kiwix.BOOK}&pattern=" in u for u in urls)


def test_the_recorder_sees_and_acts_inside_the_iframe(recorded: tuple[Store, RunSummary]) -> None:
    store, _ = recorded
    trees = [t for (t,) in rows(store, "select tree_text from steps where url like 'http://kiwix.%'")]
    assert all("iframe" in t for t in trees) and any('link "Meridian Lighthouse"' in t for t in trees)
    clicks = rows(
        store,
        "select s.target_box from steps s where s.url like 'http://kiwix.%' and s.action_kind = 'click'",
    )
    assert clicks and all(box["y"] >= TOOLBAR_HEIGHT for (box,) in clicks), (
        "boxes of iframe content are page boxes"
    )
    images = rows(
        store, "select i.src, i.y, i.blob from steps, unnest(images) as u(i) where url like '%/A/Estravia'"
    )
    assert images and all(
        src.endswith("/I/Flag_of_Estravia.png") and y >= TOOLBAR_HEIGHT and blob for src, y, blob in images
    ), "images inside the iframe, stored once with their box"


def test_viewer_episodes_replay_from_the_archive_alone(recorded: tuple[Store, RunSummary]) -> None:
    store, summary = recorded
    with FixtureWeb() as live:
        report = replay_run(
            store, summary.run_id, browser=BrowserConfig(extra_args=tuple(live.chromium_args()))
        )
        served = live.served
    totals = report.summary()
    assert totals["fidelity"] == 1.0 and totals["url_equal"] == totals["tree_equal"] == totals["steps"]
    assert totals["requests"].unmatched == 0 and served == 0, "nothing reached the live site"


def test_without_kiwix_serve_the_viewer_tasks_say_so(tmp_path: Path) -> None:
    """A machine without kiwix-serve: those episodes error with the reason; the Python wiki works."""
    env = {**os.environ, "PATH": str(tmp_path)}  # no kiwix-serve on the PATH
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--store",
            str(tmp_path / "store"),
            "--task",
            VIEWER_TASKS[0],
            "--task",
            "wikipedia/1",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    episodes = {e["task_id"]: e for e in json.loads(result.stdout)["episodes"]}
    assert episodes["wikipedia/1"]["status"] == "completed"
    error = episodes[VIEWER_TASKS[0]]["error"]
    assert episodes[VIEWER_TASKS[0]]["status"] == "error" and "kiwix-serve is not installed" in error
