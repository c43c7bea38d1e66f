"""WACZ export, checked by the archivists' own software: ReplayWeb.page (its published ``ui.js``
and ``sw.js`` from npm, served over http://localhost so its service worker runs) shows each
recorded page of the package in a real Chromium with the stored step's accessibility tree; py-wacz
validates the package; the index points at the records it names."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from urllib.parse import urljoin

import pytest
from click.testing import CliRunner
from playwright.sync_api import Frame, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from mmina.cli import cli
from mmina.interchange.wacz_index import decode_uri, post_query, surt
from mmina.interchange.warc_records import parse_http
from mmina.observations.observation import flatten_snapshot
from mmina.replayer.fidelity import tree_change
from mmina.store import Store
from tests.heavy import sized
from tests.interchange_tools import replaywebpage, static_server, wacz_bin

CHROMIUM = "/usr/lib/chromium/chromium"
LOAD_TIMEOUT_MS = 45_000
"""ReplayWeb.page's first page loads the package's index and pages (seconds; 10 s seen at a load of 12)."""


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def wacz_file(recorded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wacz") / "run.wacz"
    code, output = _cli(
        "export", "wacz", "--run", recorded[1].run_id, "--store", str(recorded[0]), "-o", str(path)
    )
    assert code == 0 and "page(s)" in output, output
    return path


def _steps(recorded) -> list[dict]:
    rows = Store.open(recorded[0]).read("steps", run_id=recorded[1].run_id).to_pylist()
    return sorted(rows, key=lambda s: s["step_index"])


def _site(folder: Path, wacz: Path) -> Path:
    """ReplayWeb.page's embed as its guide lays it out: ``ui.js`` beside the page, ``sw.js`` in
    ``replay/``, and the package."""
    package = replaywebpage()
    (folder / "replay").mkdir(parents=True)
    shutil.copy(package / "ui.js", folder / "ui.js")
    shutil.copy(package / "sw.js", folder / "replay" / "sw.js")
    shutil.copy(wacz, folder / "run.wacz")
    return folder


def _show(page: Page, site: Path, base: str, step: dict) -> str:
    """ReplayWeb.page showing ``step``'s URL at its time; the archived page's tree as the
    recorder reads one."""
    stamp = step["started_at"].strftime("%Y%m%d%H%M%S")
    (site / "index.html").write_text(
        '<!doctype html><html><body style="margin:0"><script src="ui.js"></script>'
        f'<replay-web-page style="display:block;height:720px" source="run.wacz" url="{step["url"]}" ts="{stamp}" '
        'embed="replayonly"></replay-web-page></body></html>'
    )
    page.goto(f"{base}/index.html")
    # the embed's frame must load under the service worker: wait for it once, then load again
    page.wait_for_function(
        "navigator.serviceWorker.getRegistration('./replay/').then(r => !!(r && r.active))",
        polling=200,
        timeout=LOAD_TIMEOUT_MS,
    )
    archived = _archived_frame(page) or _archived_frame(page)  # a second load if the first never showed it
    assert archived is not None, f"ReplayWeb.page showed no archived page for {step['url']}"
    archived.wait_for_load_state("networkidle")
    return flatten_snapshot(archived.locator("body").aria_snapshot(mode="ai", boxes=True))[0]


REWRITTEN = re.compile(r"^/replay/w/[^/]+/(?::[0-9a-f]+/)?\d+[a-z_]*/")
"""The prefix ReplayWeb.page gives a link to an archived URL (its own address for it)."""
URL_LINE = re.compile(r"^(\s*/url: )(.*)$", re.MULTILINE)


def _archived_frame(page: Page) -> Frame | None:
    """The frame ReplayWeb.page shows the archived page in, after loading the embed again (now
    under its service worker); None when it did not appear in time."""
    page.reload()
    try:
        page.frame_locator("replay-web-page iframe").frame_locator("iframe").locator("body").wait_for(
            timeout=LOAD_TIMEOUT_MS
        )
    except PlaywrightTimeout:
        return None
    return next((f for f in page.frames if "mp_/" in f.url), None)


def _comparable(tree: str, page_url: str) -> str:
    """A tree as the page wrote it, read in an embed: links as the absolute URLs they lead to
    (ReplayWeb.page rewrites each to its own address for it), and no ``[active]`` (the focus is
    the outer page's)."""

    def link(found: re.Match[str]) -> str:
        return found[1] + urljoin(page_url, REWRITTEN.sub("", found[2]))

    return URL_LINE.sub(link, tree.replace(" [active]", ""))


def test_replaywebpage_shows_the_recorded_pages_of_the_wacz(
    recorded, wacz_file: Path, tmp_path: Path
) -> None:
    steps = _steps(recorded)
    chosen = sized([steps[0], steps[2], steps[-1]], steps)
    site = _site(tmp_path / "site", wacz_file)
    with static_server(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        for step in chosen:
            tree = _show(page, site, base, step)
            assert (
                tree_change(_comparable(step["tree_text"], step["url"]), _comparable(tree, step["url"])) == ""
            ), step["url"]
            page.screenshot(path=str(tmp_path / f"step-{step['step_index']}.png"))
        browser.close()


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(wacz_bin() / "wacz"), "validate", "-f", str(path)], capture_output=True, text=True, timeout=300
    )


def test_the_wacz_is_valid_and_its_index_points_at_its_records(
    recorded, wacz_file: Path, tmp_path: Path
) -> None:
    done = _validate(wacz_file)
    assert done.returncode == 0 and "is valid" in done.stdout, (done.stdout + done.stderr)[-2000:]
    with zipfile.ZipFile(wacz_file) as package, zipfile.ZipFile(tmp_path / "tampered.wacz", "w") as tampered:
        for info in package.infolist():  # one page more than datapackage.json says: the validator must notice
            extra = (
                b'{"url": "http://elsewhere.test/", "ts": "2026-01-01T00:00:00Z"}\n'
                if info.filename.startswith("pages/")
                else b""
            )
            tampered.writestr(info, package.read(info) + extra)
    assert _validate(tmp_path / "tampered.wacz").returncode != 0
    with zipfile.ZipFile(wacz_file) as package:
        infos = {i.filename: i for i in package.infolist()}
        assert set(infos) == {
            "archive/data.warc.gz",
            "indexes/index.cdxj",
            "pages/pages.jsonl",
            "datapackage.json",
            "datapackage-digest.json",
        }
        assert infos["archive/data.warc.gz"].compress_type == zipfile.ZIP_STORED
        datapackage = package.read("datapackage.json")
        manifest = json.loads(datapackage)
        assert manifest["profile"] == "data-package" and manifest["wacz_version"] == "1.1.1"
        for resource in manifest["resources"]:
            data = package.read(resource["path"])
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest() and resource[
                "bytes"
            ] == len(data)
        digest = json.loads(package.read("datapackage-digest.json"))
        assert digest == {
            "path": "datapackage.json",
            "hash": "sha256:" + hashlib.sha256(datapackage).hexdigest(),
        }
        pages = [json.loads(line) for line in package.read("pages/pages.jsonl").splitlines()]
        warc = package.read("archive/data.warc.gz")
        index = package.read("indexes/index.cdxj").decode().splitlines()
    assert pages[0]["format"] == "json-pages-1.0"
    steps = _steps(recorded)
    assert [(p["url"], p["mmina_step"]) for p in pages[1:]] == [(s["url"], s["step_index"]) for s in steps]
    assert manifest["mainPageUrl"] == steps[0]["url"]
    assert index == sorted(index) and len(index) == sum(
        1
        for r in Store.open(recorded[0]).read("requests", run_id=recorded[1].run_id).to_pylist()
        if r["status"] > 0
    )
    for line in index:
        entry = json.loads(line.split(" ", 2)[2])
        record = gzip.decompress(warc[int(entry["offset"]) : int(entry["offset"]) + int(entry["length"])])
        head, _blank, block = record.partition(b"\r\n\r\n")
        assert f"WARC-Target-URI: {entry['url']}".encode() in head and b"WARC-Type: response" in head
        assert parse_http(block).status == int(entry["status"])


def test_bad_wacz_exports_get_one_line_and_write_nothing(recorded, tmp_path: Path) -> None:
    store = str(recorded[0])
    for args, says in (
        (["--run", "nope"], "no run"),
        (["--run", recorded[1].run_id, "--task", "nobody/1"], "holds no finished episode"),
        ([], "name what to export"),
    ):
        code, output = _cli("export", "wacz", *args, "--store", store, "-o", str(tmp_path / "x.wacz"))
        assert (
            code == 1 and output.startswith("Error: ") and says in output and len(output.splitlines()) == 1
        ), output
    target = tmp_path / "no" / "run.wacz"
    code, output = _cli("export", "wacz", "--run", "latest", "--store", store, "-o", str(target))
    assert code == 1 and output == f"Error: cannot write {target}: no folder {target.parent}\n", output
    assert list(tmp_path.iterdir()) == []


def test_request_bodies_and_urls_are_keyed_as_warcio_js_keys_them() -> None:
    """The expected strings are what warcio.js's ``postToGetUrl`` (JSON flattened through
    ``URLSearchParams``), ``decodeURI`` and ``getSurt`` give for the same input (run under node,
    2026-12-06): ReplayWeb.page computes these for the page's request and looks them up."""
    document = b'{"a": 1, "b": [true, "x y"], "c": {"a": null}, "d": "", "e": 2.0, "f": "~*!"}'
    assert (
        post_query(document, "application/json; charset=utf-8")
        == "a=1&b=true&b.2_=x+y&a.2_=null&e=2&f=%7E*%21"
    )
    assert post_query(b"a=x%20y&b=2", "application/x-www-form-urlencoded") == "a=x%20y&b=2"
    assert post_query(b'{"q": "tea"}', "text/plain") == "q=tea"
    assert post_query(b"hello", "text/plain") == "__wb_post_data=aGVsbG8="
    assert post_query(b"\x00\x01", "application/octet-stream") == "__wb_post_data=AAE="
    assert (
        post_query(
            b'--XX\r\nContent-Disposition: form-data; name="q"\r\n\r\ntea\r\n--XX--',
            "multipart/form-data; boundary=XX",
        )
        == "q=tea"
    )
    assert decode_uri("a=x%20y%26z%E2%82%AC") == "a=x y%26z\u20ac" and decode_uri("%E2%82") == ""
    assert surt("https://www2.Example.com:8443/A/b?z=1&a=2") == "com,example:8443)/a/b?a=2&z=1"
