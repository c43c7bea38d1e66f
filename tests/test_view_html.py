"""The HTML report and the episode viewer opened in a real headless Chromium, offline."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image, ImageColor
from playwright.sync_api import Page, sync_playwright

from mmina.analysis.viewer import SHOT_WIDTH, TERMINAL, shrink
from mmina.cli import cli
from mmina.recorder.browser import QUIET_ARGS, find_chromium
from mmina.store.marks import PALETTE
from tests.test_report import recorded_store

SECTIONS = (
    "summary",
    "sr-by-bucket",
    "hop-positions",
    "first-failures",
    "failure-modes",
    "per-site",
    "actions",
    "cost",
    "episodes",
    "viewer",
)
CHARTS = (
    "chart-sr-by-bucket",
    "chart-hop-heatmap",
    "chart-hop-heatmap-conditional",
    "chart-first-failures",
    "chart-failure-modes",
    "chart-actions",
)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    store, out = recorded_store(), tmp_path_factory.mktemp("html")
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "report",
            "--store",
            str(store),
            "--run",
            "seeded",
            "--format",
            "html",
            "--output",
            str(out / "report.html"),
        ],
    )
    assert result.exit_code == 0, result.output
    episode = next(p.stem for p in (store / "episodes" / "run_id=seeded").glob("normal-24-*.parquet")).split(
        "."
    )[0]
    result = runner.invoke(
        cli, ["view", "--episode", episode, "--store", str(store), "-o", str(out / "episode.html")]
    )
    assert result.exit_code == 0, result.output
    return out / "report.html", out / "episode.html"


def open_offline(path: Path, check) -> list[str]:
    """Open a file with every network request refused; returns the console errors."""
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=find_chromium(None, playwright), args=list(QUIET_ARGS)
        )
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("http*://**", lambda route: route.abort())
        page.goto(path.as_uri())
        check(page)
        browser.close()
    return errors


def _step_label(page: Page) -> str:
    return page.inner_text("#step-label")


def check_report(page: Page) -> None:
    for section in SECTIONS:
        assert page.locator(f"section#{section} h2").is_visible(), section
    for chart in CHARTS:
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
    assert page.locator('table[data-table="sr_by_bucket"] tbody tr').count() == 4
    assert "22.2%" in page.inner_text('table[data-table="sr_by_bucket"]')
    options = page.locator("#episode-select option").count()
    assert options == 9
    assert page.inner_text("#step-label").startswith("step 1 of")
    assert page.evaluate("document.getElementById('step-shot').naturalWidth") == 640
    page.click("#next-step")
    assert page.inner_text("#step-label").startswith("step 2 of")
    page.click("#prev-step")
    assert page.inner_text("#step-label").startswith("step 1 of")
    page.locator("#episodes tr", has_text="compare/5").locator("a").click()
    assert page.inner_text("#episode-title").startswith("compare/5 (seeded)")


def check_viewer(page: Page) -> None:
    assert page.locator("section#viewer").is_visible()
    assert page.inner_text("#episode-title").startswith("normal/24 (seeded)")
    assert page.get_attribute("#step-shot", "src").startswith("data:image/jpeg;base64,")
    assert page.evaluate("document.getElementById('step-shot').naturalWidth") == SHOT_WIDTH
    assert "type [" in page.inner_text("#step-action")
    assert page.inner_text("#step-target").startswith("[")
    shot, box = page.locator("#step-shot").bounding_box(), page.locator("#step-box").bounding_box()
    assert page.is_visible("#step-box") and box is not None and shot is not None, "the target's box is drawn"
    assert shot["x"] <= box["x"] and box["x"] + box["width"] <= shot["x"] + shot["width"] + 1
    assert shot["y"] <= box["y"] and box["y"] + box["height"] <= shot["y"] + shot["height"] + 1
    assert page.text_content("#step-input") == "no model was asked at this step"
    assert "hops: task fail, hop 1 pass, hop 2 fail" in page.inner_text("#episode-verdicts")
    total = int(_step_label(page).split(" of ")[1])
    for _ in range(total + 2):
        page.keyboard.press("ArrowRight")
    assert _step_label(page) == f"step {total} of {total}"
    assert page.is_disabled("#next-step")
    # the last entry is the terminal observation: the page after the stop (the stop's own page)
    assert page.inner_text("#step-action") == TERMINAL
    final_url = page.inner_text("#step-url")
    back = (
        "() => { document.getElementById('prev-step').click(); "
        "return document.getElementById('step-action').textContent }"
    )
    assert page.evaluate(back).startswith("stop [") and page.inner_text("#step-url") == final_url
    assert "goto [http://video.mmina.test/]" in page.evaluate(back)
    assert page.locator("#step-hops span.done").count() == 1


def test_report_opens_offline_with_every_section(pages: tuple[Path, Path]) -> None:
    report, _ = pages
    html = report.read_text()
    files = report.parent / "report_files"
    assert (
        '<script src="report_files/plotly.min.js">' in html and (files / "plotly.min.js").stat().st_size > 1e6
    )
    shots = re.findall(r'"shot": "(report_files/[0-9a-f]+\.jpg)"', html)
    assert shots and all((report.parent / s).read_bytes()[:2] == b"\xff\xd8" for s in shots)
    assert "data:image" not in html, "the report's screenshots are files next to it, not inlined"
    assert open_offline(report, check_report) == []


def test_episode_viewer_steps_through_the_trajectory(pages: tuple[Path, Path]) -> None:
    _, episode = pages
    assert open_offline(episode, check_viewer) == []


def _jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(out, "JPEG", quality=80)
    return out.getvalue()


def test_marks_are_painted_on_the_shrunk_screenshot_where_the_full_size_boxes_are() -> None:
    """``mmina view`` paints the marks on the half-size copy (quick): each box lands where the
    full-size one shrunk would, and a JPEG already small enough is kept as it is."""
    marks = [{"id": "12", "role": "link", "x": 800.0, "y": 1600.0, "width": 200.0, "height": 100.0}]
    small = Image.open(io.BytesIO(shrink(_jpeg(1280, 2048), marks=marks)))
    assert small.size == (SHOT_WIDTH, 1024)
    red = ImageColor.getrgb(PALETTE[0])
    edge = small.convert("RGB").getpixel((400, 825))  # the box's left edge, at half the full-size place
    assert all(abs(a - b) < 40 for a, b in zip(edge, red)), edge
    assert small.convert("RGB").getpixel((450, 825)) == pytest.approx(
        (255, 255, 255), abs=8
    )  # inside: untouched
    already = _jpeg(SHOT_WIDTH, 300)
    assert shrink(already) is already
