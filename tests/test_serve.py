"""``mmina serve`` in a real Chromium: the served application over a really recorded store.

The store is test_report's (runs ``seeded`` and ``seeded-b`` of an agent with known mistakes,
scored by ``hops``), served by the real command line on a free port. A run recorded in a
background thread while the runs page is open shows up and advances without a reload.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from mmina.analysis.display import display
from mmina.analysis.names import REPEAT_TABLES, TABLE_NAMES
from mmina.analysis.report import build_report
from mmina.recorder.browser import QUIET_ARGS, find_chromium
from mmina.store import Store
from tests.serve_helpers import Served, served_read_only
from tests.store_helpers import REPO_ROOT
from tests.test_report import EXPECTED, recorded_store

WAIT_MS = 120_000
"""Bound on what the page waits for (a busy machine is slow; the bench measures speed)."""
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def store() -> Path:
    return recorded_store()


@pytest.fixture(scope="module")
def app(store: Path) -> Iterator[Served]:
    with served_read_only(store) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=find_chromium(None, playwright), args=list(QUIET_ARGS)
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page that records console errors; any uncaught script error fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    context.close()
    assert errors == []


def open_view(page: Page, app: Served, fragment: str) -> None:
    page.goto(app.url + fragment)


def message(page: Page) -> str:
    box = page.locator("#message")
    expect(box).to_be_visible()
    return box.inner_text()


def test_runs_page_lists_every_run_with_the_reports_rates(app: Served, page: Page, store: Path) -> None:
    open_view(page, app, "#/")
    row = page.locator('#runs tr[data-run="seeded"]')
    expect(row.locator(".task-sr")).not_to_have_text("indexing…")
    overall = display(build_report(Store.open(store), ["seeded"]).table("sr_by_bucket"))[1][-1]
    assert row.locator(".task-sr").inner_text() == overall[3]
    assert row.locator(".hop-sr").inner_text() == overall[6]
    assert "9 / 9" in row.locator(".progress-cell").inner_text()
    expect(page.locator('#runs tr[data-run="seeded-b"]')).to_be_visible()


def test_analysis_shows_every_table_and_chart_of_the_report(app: Served, page: Page, store: Path) -> None:
    open_view(page, app, "#/analysis?run=seeded&evaluator=hops")
    page.wait_for_selector("#chart-sr-by-bucket .main-svg")
    report = build_report(Store.open(store), ["seeded"])
    assert {t.name for t in report.tables} == set(TABLE_NAMES) - {
        "runner_log",
        "conditioned_hops",
        *REPEAT_TABLES,
    }
    for name in (t.name for t in report.tables):
        columns, rows = display(report.table(name))
        table = page.locator(f'table[data-table="{name}"]')
        assert table.locator("th").all_inner_texts() == columns, name
        cells = [r.locator("td").all_inner_texts() for r in table.locator("tbody tr").all()]
        assert cells == rows, name
    for chart in (
        "chart-hop-heatmap",
        "chart-hop-heatmap-conditional",
        "chart-first-failures",
        "chart-failure-modes",
        "chart-actions",
    ):
        page.wait_for_selector(f"#{chart} .main-svg")


def test_episodes_filter_sort_and_open(app: Served, page: Page) -> None:
    open_view(page, app, "#/episodes?run=seeded")
    expect(page.locator("#episode-count")).to_have_text("episodes 1–9 of 9")
    page.select_option('select[name="mode"]', "wandered")
    expect(page.locator("#episode-count")).to_have_text("episodes 1–1 of 1")
    assert page.locator("#episodes tbody tr td").first.inner_text() == "normal/24"
    page.select_option('select[name="mode"]', "")
    page.select_option('select[name="verdict"]', "pass")
    expect(page.locator("#episode-count")).to_have_text("episodes 1–2 of 2")
    passed = sorted(
        page.locator("#episodes tbody tr").evaluate_all("rows => rows.map(r => r.cells[0].innerText)")
    )
    assert passed == sorted(t for t, (_, ok, _, _) in EXPECTED.items() if ok)
    page.select_option('select[name="verdict"]', "")
    page.select_option('select[name="first_failure"]', "2")
    expect(page.locator("#episode-count")).to_have_text("episodes 1–2 of 2")
    page.select_option('select[name="first_failure"]', "")
    page.locator('th[data-sort="n_hops"]').click()
    page.locator('th[data-sort="n_hops"]').click()
    expect(page.locator('th[data-sort="n_hops"]')).to_have_class("sortable sorted desc")
    assert page.locator("#episodes tbody tr").first.locator("td").nth(3).inner_text() == "6"
    page.locator("#episodes tbody tr", has_text="normal/24").locator("a").click()
    expect(page.locator("#episode-title")).to_have_text("normal/24 (seeded)")


def test_episode_viewer_steps_with_the_keyboard_and_links_to_a_step(app: Served, page: Page) -> None:
    episode = app.json("/api/episodes?run=seeded&task=normal/24")["rows"][0]["episode_id"]
    open_view(page, app, f"#/episode/{episode}")
    label = page.locator("#step-label")
    total = int(label.inner_text().split(" of ")[1])
    assert total >= 3
    expect(page.locator("#step-action")).to_contain_text("type [")
    expect(page.locator("#step-target")).to_contain_text("[")
    page.wait_for_function("() => document.getElementById('step-shot').naturalWidth > 0")
    shot, box = page.locator("#step-shot").bounding_box(), page.locator("#step-box").bounding_box()
    assert shot and box and shot["x"] <= box["x"] and box["x"] + box["width"] <= shot["x"] + shot["width"] + 1
    for _ in range(total + 2):
        page.keyboard.press("ArrowRight")
    expect(label).to_have_text(f"step {total} of {total}")
    assert page.url.endswith(f"step={total - 1}") and page.is_disabled("#next-step")
    expect(page.locator("#step-action")).to_contain_text(
        "terminal observation"
    )  # the page after the last action
    page.keyboard.press("k")
    expect(label).to_have_text(f"step {total - 1} of {total}")
    expect(page.locator("#step-action")).to_contain_text("stop [")
    assert "hops: task fail, hop 1 pass, hop 2 fail" in page.inner_text("#episode-verdicts")
    open_view(page, app, f"#/episode/{episode}?step=1")
    page.reload()
    expect(label).to_have_text(f"step 2 of {total}")
    expect(page.locator("#step-requests tbody tr").first).to_be_visible()
    page.locator("#marks-toggle").uncheck()
    assert "/blobs/" in page.get_attribute("#step-shot", "src")


def test_side_by_side_pairs_tasks_and_shows_where_they_part(app: Served, page: Page) -> None:
    open_view(page, app, "#/compare?a=seeded&b=seeded-b&ea=hops&eb=hops")
    expect(page.locator("#pairs tbody tr")).to_have_count(4)
    flips = page.locator("#pairs tbody tr.flip").evaluate_all("rows => rows.map(r => r.dataset.task)")
    assert sorted(flips) == ["normal/2", "normal/3", "wikipedia/1"]
    page.locator('#pairs tr[data-task="normal/2"]').click()
    expect(page.locator("#divergence")).to_have_text(
        "They part at step 1 (URL or action differs; highlighted)."
    )
    expect(page.locator(".pair.diverges")).to_have_attribute("data-step", "0")
    page.locator('#pairs tr[data-task="compare/5"]').click()
    expect(page.locator("#divergence")).to_have_text("The two episodes take the same steps.")
    assert page.locator("#side-by-side .pair[data-step] img").count() >= 2


def test_sql_box_runs_a_query_downloads_csv_and_reports_bad_sql(app: Served, page: Page) -> None:
    open_view(page, app, "#/sql")
    page.fill("#sql-query", "select task_id, n_steps from episodes where run_id = 'seeded' order by task_id")
    page.click("#sql-run")
    expect(page.locator("#sql-count")).to_have_text("9 row(s)")
    assert page.locator("#sql-table tbody tr").first.locator("td").first.inner_text() == "compare/5"
    with page.expect_download() as download:
        page.click("#sql-csv")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "task_id,n_steps" and len(lines) == 10
    page.fill("#sql-query", "select nonsense from nowhere")
    page.click("#sql-run")
    assert "nowhere" in message(page) and "Traceback" not in message(page)
    page.fill("#sql-query", "drop table episodes")
    page.click("#sql-run")
    assert "read-only" in message(page)


def test_unknown_episode_and_bad_parameters_are_clear_messages(app: Served, page: Page) -> None:
    open_view(page, app, "#/episode/no-such-episode")
    assert message(page).startswith("no episode 'no-such-episode'")
    open_view(page, app, "#/episodes?run=seeded&n_hops=x")
    assert message(page) == "parameter n_hops must be a whole number, not 'x'"
    open_view(page, app, "#/episodes?run=seeded&colour=red")
    assert message(page).startswith("unknown parameter colour (this endpoint takes run, evaluator, bucket")
    open_view(page, app, "#/analysis?run=no-such-run")
    assert "no run 'no-such-run'" in message(page)
    open_view(page, app, "#/compare?a=seeded&b=seeded&ea=hops&eb=hops")
    assert "two different sides" in message(page)


@pytest.fixture
def live_store(recorded: tuple[Path, object], tmp_path: Path) -> Path:
    """A store holding one recorded run, to record another one into while it is served."""
    return Path(shutil.copytree(recorded[0], tmp_path / "store"))


def test_a_run_being_recorded_updates_the_runs_page_without_a_reload(live_store: Path, page: Page) -> None:
    tasks = ("normal/2", "shopping/6", "wikipedia/1")
    with Served(live_store) as app:
        open_view(page, app, "#/")
        expect(page.locator("#runs tbody tr")).to_have_count(1)
        page.evaluate("window.stillTheSamePage = true")
        recorder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mmina",
                "record",
                "--task",
                ",".join(tasks),
                "--run-id",
                "live",
                "--no-screenshots",
                "--store",
                str(live_store),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        row = page.locator('#runs tr[data-run="live"]')
        try:
            # the page looks every 2 s: two short episodes may both end between two looks
            expect(row.locator(".progress-cell")).to_contain_text(re.compile(r"[12] / 3\s*recording"))
            expect(row.locator(".progress-cell")).to_contain_text("3 / 3")
        finally:
            out, err = recorder.communicate(timeout=300)
        assert recorder.returncode == 0, err
        expect(row.locator(".task-sr")).not_to_have_text("indexing…")
        expect(row.locator(".progress-cell")).not_to_contain_text("recording")
        assert page.evaluate("window.stillTheSamePage") is True
        open_view(page, app, "#/episodes?run=live")
        expect(page.locator("#episode-count")).to_have_text("episodes 1–3 of 3")
