"""WARC, HAR and Inspect exports, and WARC import, each checked by the other side's own software:
warcio (check, index, and as the writer of a foreign WARC), pywb serving the export to a real
Chromium, Playwright's ``route_from_har`` and har-validator, inspect-ai's ``read_eval_log`` and
``inspect view`` in a real Chromium."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from playwright.sync_api import sync_playwright

from mmina import __version__
from mmina.cli import cli
from mmina.interchange.stored import Selection, stream_episodes
from mmina.interchange.warc_export import export_warc
from mmina.interchange.warc_import import import_warc
from mmina.observations.observation import flatten_snapshot
from mmina.replayer.fidelity import tree_change
from mmina.replayer.replays import replay_agent
from mmina.store import Store
from mmina.store.compact import compact_store
from mmina.store.schema import SCHEMA_VERSION
from mmina.tasks.task import builtin_suite_path
from tests.fake_openai import FakeOpenAI
from tests.interchange_tools import free_port, inspect_bin, inspect_python, pywb, server, validate_har
from tests.store_helpers import begin, episode_row, request_row, step_row, write_episode

CHROMIUM = "/usr/lib/chromium/chromium"
WARCIO = str(Path(sys.executable).parent / "warcio")


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _steps(store: Store, run_id: str) -> list[dict]:
    return sorted(
        store.read("steps", run_id=run_id, columns=["step_index", "url", "tree_text"]).to_pylist(),
        key=lambda s: s["step_index"],
    )


def _tree(page) -> str:
    page.wait_for_load_state("networkidle")
    return flatten_snapshot(page.aria_snapshot(mode="ai", boxes=True))[0]


def _index(path: Path) -> list[dict]:
    done = subprocess.run(
        [
            WARCIO,
            "index",
            "-f",
            "warc-type,warc-target-uri,warc-mmina-episode,warc-mmina-redacted",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def warc_file(recorded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("warc") / "run.warc.gz"
    code, output = _cli(
        "export", "warc", "--run", recorded[1].run_id, "--store", str(recorded[0]), "-o", str(path)
    )
    assert code == 0, output
    return path


# ---------------------------------------------------------------- WARC out


def test_warcio_checks_and_indexes_every_exchange_of_the_export(recorded, warc_file: Path) -> None:
    store = Store.open(recorded[0])
    done = subprocess.run([WARCIO, "check", "-v", str(warc_file)], capture_output=True, text=True)
    assert done.returncode == 0 and "digest pass" in done.stdout and "fail" not in done.stdout, done.stdout[
        -2000:
    ]
    index = _index(warc_file)
    requests = store.read("requests", run_id=recorded[1].run_id).to_pylist()
    served = [i["warc-target-uri"] for i in index if i["warc-type"] in ("response", "revisit")]
    assert sorted(served) == sorted(r["url"] for r in requests if r["status"] > 0)
    steps = [i for i in index if i.get("warc-target-uri", "").startswith("urn:mmina:step:")]
    assert len(steps) == len(_steps(store, recorded[1].run_id))
    info = gzip.open(warc_file).read(2000).decode()
    assert "mmina-runs: " + recorded[1].run_id in info and "schema_version: " in info and "[REDACTED]" in info


def test_pywb_serves_the_export_and_chromium_shows_the_recorded_pages(
    recorded, warc_file: Path, tmp_path: Path
) -> None:
    """pywb in proxy mode over the exported WARC: every recorded page, loaded by its own URL,
    shows the stored step's tree (no live site is running)."""
    steps = _steps(Store.open(recorded[0]), recorded[1].run_id)
    with pywb(tmp_path / "pywb", "run", [warc_file], "--proxy", "run") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, proxy={"server": url})
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        for step in steps:
            assert page.goto(step["url"]).status == 200
            assert tree_change(step["tree_text"], _tree(page)) == "", step["url"]
        browser.close()


def test_each_record_says_what_was_redacted_and_a_missing_body_is_truncated(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r")
    writer = store.episode_writer("r", "e1")
    body = writer.put_blob(b'{"token": "[REDACTED]", "ok": 1}', "application/json")
    writer.add_step(step_row(0))
    writer.add_requests(
        [
            request_row(0, body, mime_type="application/json"),
            request_row(
                1, None, response_headers=[{"name": "x-mmina-body", "value": "missing"}], request_headers=[]
            ),
        ]
    )
    writer.commit(episode_row(n_steps=1))
    result = export_warc(store, Selection(run="r"), tmp_path / "r.warc.gz")
    assert (result.redacted, result.missing_bodies) == (1, 1)
    responses = [i for i in _index(tmp_path / "r.warc.gz") if i["warc-type"] == "response"]
    assert responses[0]["warc-mmina-redacted"] == "request-headers, response-body"
    assert "warc-mmina-redacted" not in responses[1]
    raw = gzip.open(tmp_path / "r.warc.gz").read()
    assert raw.count(b"WARC-Truncated: unspecified") == 1 and b"x-mmina-body" not in raw


def test_episodes_stream_alike_from_their_own_files_and_from_a_compacted_batch(tmp_path: Path) -> None:
    """A compacted run holds many episodes per file: each is still read with only its own rows,
    and the export is the same record for record (ids are deterministic)."""
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r")
    for number in range(3):
        write_episode(
            store,
            "r",
            f"e{number}",
            blobs=[f"shot {number}".encode()],
            n_steps=number + 1,
            n_requests=number + 2,
        )

    def exported() -> tuple[list[tuple], list[dict]]:
        episodes = [
            (e.episode_id, [s["step_index"] for s in e.steps], [r["seq"] for r in e.requests])
            for e in stream_episodes(store, Selection(run="r"))
        ]
        export_warc(store, Selection(run="r"), tmp_path / "r.warc.gz")
        return sorted(episodes), [i for i in _index(tmp_path / "r.warc.gz") if i["warc-type"] != "warcinfo"]

    before = exported()
    assert before[0] == [("e0", [0], [0, 1]), ("e1", [0, 1], [0, 1, 2]), ("e2", [0, 1, 2], [0, 1, 2, 3])]
    compact_store(store)
    assert len(store.files("steps", "r")) == 1
    after = exported()
    assert after[0] == before[0] and sorted(map(json.dumps, after[1])) == sorted(map(json.dumps, before[1]))


def test_bad_selections_get_one_line(recorded, tmp_path: Path) -> None:
    for args in (
        ["export", "warc", "--run", "nope"],
        ["export", "warc"],
        ["export", "har", "--episode", "nope"],
        ["export", "inspect", "--run", recorded[1].run_id, "--evaluator", "nobody"],
    ):
        code, output = _cli(*args, "--store", str(recorded[0]), "-o", str(tmp_path / "x"))
        assert code == 1 and output.startswith("Error: ") and len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "x").exists()
    target = tmp_path / "no" / "run.warc.gz"
    code, output = _cli("export", "warc", "--run", "latest", "--store", str(recorded[0]), "-o", str(target))
    assert code == 1 and output == f"Error: cannot write {target}: no folder {target.parent}\n", output


# ---------------------------------------------------------------- WARC in


def test_an_exported_warc_imports_and_the_oracle_replays_it_offline(
    recorded, warc_file: Path, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "store", create=True)
    code, output = _cli(
        "import",
        "warc",
        str(warc_file),
        "--tasks",
        str(builtin_suite_path()),
        "--task",
        "normal/1",
        "--run-id",
        "imported",
        "--store",
        str(store.root),
    )
    assert code == 0, output
    report = replay_agent(Store.open(store.root), "oracle", run_id="imported")
    [episode] = report.episodes
    original = Store.open(recorded[0]).read("episodes", run_id=recorded[1].run_id).to_pylist()[0]
    assert (episode.result.final_answer, report.unmatched, report.coverage_gaps) == (
        original["final_answer"],
        0,
        [],
    )


TOKEN = "tok-7f3a9c2e5b81d4"


def _foreign_warc(path: Path) -> None:
    """A WARC written by warcio: a chunked gzip response, a revisit of it, one URL twice, a body
    stored de-chunked under its chunked header (as warcio's and pywb's recorders keep it), and a
    bearer token that a later body echoes."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    page = b"<html><body><h1>Harbour</h1>" + b"tide " * 200 + b"</body></html>"
    zipped = gzip.compress(page)
    chunked = (
        b"".join(
            b"%x\r\n%s\r\n" % (len(zipped[i : i + 100]), zipped[i : i + 100])
            for i in range(0, len(zipped), 100)
        )
        + b"0\r\n\r\n"
    )
    with path.open("wb") as sink:
        writer = WARCWriter(sink, gzip=True)
        headers = [
            ("Content-Type", "text/html"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
        ]
        plain = [("Content-Type", "text/html"), ("Transfer-Encoding", "chunked")]
        for url, body, http_headers in (
            ("http://site.test/", chunked, headers),
            ("http://site.test/count", b"one", [("Content-Type", "text/plain")]),
            ("http://site.test/count", b"two " + TOKEN.encode(), [("Content-Type", "text/plain")]),
            ("http://site.test/plain", b"<!DOCTYPE html>\n<p>plain</p>\n", plain),
        ):
            response = writer.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(body),
                http_headers=StatusAndHeaders("200 OK", http_headers, protocol="HTTP/1.1"),
            )
            writer.write_record(response)
            request = writer.create_warc_record(
                url,
                "request",
                payload=io.BytesIO(b""),
                http_headers=StatusAndHeaders(
                    "GET / HTTP/1.1",
                    [("Host", "site.test"), ("Authorization", f"Bearer {TOKEN}")],
                    is_http_request=True,
                ),
            )
            request.rec_headers.add_header(
                "WARC-Concurrent-To", response.rec_headers.get_header("WARC-Record-ID")
            )
            writer.write_record(request)
            if url == "http://site.test/":
                first = response
        revisit = writer.create_revisit_record(
            "http://site.test/again",
            first.rec_headers.get_header("WARC-Payload-Digest"),
            "http://site.test/",
            first.rec_headers.get_header("WARC-Date"),
            http_headers=StatusAndHeaders("200 OK", headers, protocol="HTTP/1.1"),
        )
        writer.write_record(revisit)


def test_a_foreign_warc_with_chunked_gzip_revisits_and_repeats_imports_decoded_and_redacted(
    tmp_path: Path,
) -> None:
    from mmina.replayer.archive import Archive, Matcher, exchanges_from_rows

    _foreign_warc(tmp_path / "f.warc.gz")
    store = Store.open(tmp_path / "store", create=True)
    result = import_warc(store, [tmp_path / "f.warc.gz"], str(builtin_suite_path()), "f", ["normal/1"])
    assert (result.exchanges, result.revisits, result.undecodable) == (5, 1, 0)
    rows = store.read("requests", run_id="f").to_pylist()
    blobs = store.read_blobs([r["response_body"] for r in rows if r["response_body"]])
    matcher = Matcher(Archive(exchanges_from_rows(rows, blobs)))
    page = matcher.match("GET", "http://site.test/").exchange
    assert page is not None and page.body.startswith(b"<html><body><h1>Harbour</h1>tide")
    assert matcher.match("GET", "http://site.test/again").exchange.body == page.body
    assert [matcher.match("GET", "http://site.test/count").exchange.body for _ in range(2)] == [
        b"one",
        b"two [REDACTED]",
    ]
    assert matcher.match("GET", "http://site.test/plain").exchange.body == b"<!DOCTYPE html>\n<p>plain</p>\n"
    assert {h["value"] for r in rows for h in r["request_headers"] if h["name"] == "Authorization"} == {
        "Bearer [REDACTED]"
    }
    assert not any(TOKEN.encode() in body for body in blobs.values())


def test_a_file_that_is_not_warc_gets_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    gzip.open(tmp_path / "cut.warc.gz", "wb").write(
        b"WARC/1.1\r\nWARC-Type: response\r\nContent-Length: 999\r\n\r\nabc"
    )
    for name, says in (
        ("notes.txt", "is not a WARC file"),
        ("cut.warc.gz", "is cut off"),
        ("none.warc", "no WARC"),
    ):
        code, output = _cli(
            "import",
            "warc",
            str(tmp_path / name),
            "--tasks",
            str(builtin_suite_path()),
            "--store",
            str(tmp_path / "store"),
        )
        assert code == 1 and says in output and len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "store").exists()


# ---------------------------------------------------------------- HAR out


def test_playwright_replays_the_har_export_and_it_is_valid_har(recorded, tmp_path: Path) -> None:
    store = Store.open(recorded[0])
    episode = store.read("episodes", run_id=recorded[1].run_id).to_pylist()[0]
    code, output = _cli(
        "export",
        "har",
        "--episode",
        episode["episode_id"],
        "--store",
        str(recorded[0]),
        "-o",
        str(tmp_path / "e.har"),
    )
    assert code == 0, output
    assert validate_har(tmp_path / "e.har") == []
    har = json.loads((tmp_path / "e.har").read_text())["log"]
    assert (har["creator"]["version"], har["_mmina"]["schema_version"]) == (__version__, SCHEMA_VERSION)
    entries = har["entries"]
    assert [e["_mmina_step"] for e in entries] == [
        r["step_index"]
        for r in sorted(store.read("requests", run_id=recorded[1].run_id).to_pylist(), key=lambda r: r["seq"])
    ]
    steps = _steps(store, recorded[1].run_id)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        context.route_from_har(str(tmp_path / "e.har"), not_found="abort")
        page = context.new_page()
        for step in steps:
            page.goto(step["url"])
            assert tree_change(step["tree_text"], _tree(page)) == "", step["url"]
        browser.close()


# ---------------------------------------------------------------- Inspect out


@pytest.fixture(scope="module")
def model_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """normal/1 recorded with the openai agent against the local fake endpoint (tokens, model input)."""
    from mmina.agents.settings import AgentSettings
    from mmina.recorder.recording import RecordConfig, record_run

    store = tmp_path_factory.mktemp("model") / "store"
    with pytest.MonkeyPatch.context() as patch, FakeOpenAI() as fake:
        patch.setenv("OPENAI_API_KEY", "sk-test-interchange")
        summary = record_run(
            Store.open(store, create=True),
            RecordConfig(
                agent="openai",
                task_ids=("normal/1",),
                agent_settings=AgentSettings(model="fake-model", base_url=fake.url, max_retries=1),
            ),
        )
    return store, summary.run_id


READ_LOG = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1], resolve_attachments=True)
sample = log.samples[0]
print(json.dumps({"status": log.status, "samples": len(log.samples),
    "metrics": {k: m.value for k, m in log.results.scores[0].metrics.items()},
    "usage": {k: [u.input_tokens, u.output_tokens] for k, u in log.stats.model_usage.items()},
    "scores": {k: s.value for k, s in sample.scores.items()}, "hops": sample.scores["hops"].metadata["hops"],
    "events": [e.event for e in sample.events],
    "screenshot": next(e.data["screenshot"][:23] for e in sample.events if e.event == "info"),
    "model_input": next(len(e.input) for e in sample.events if e.event == "model"),
    "mmina": log.eval.metadata["mmina"]}))
"""


def test_inspect_reads_the_eval_log_and_it_agrees_with_the_report(model_run, tmp_path: Path) -> None:
    store, run_id = model_run
    code, output = _cli(
        "export", "inspect", "--run", run_id, "--store", str(store), "-o", str(tmp_path / "r.eval")
    )
    assert code == 0, output
    log = json.loads(inspect_python(READ_LOG, str(tmp_path / "r.eval")))
    code, output = _cli("report", "--run", run_id, "--store", str(store), "--format", "json")
    report = json.loads(output)["tables"]
    overall = next(r for r in report["sr_by_bucket"] if r["bucket"] == "overall")
    cost = [r for r in report["cost"] if r["bucket"] != "overall"]
    tokens = [round(sum(r[f"mean_{k}_tokens"] * r["tasks"] for r in cost)) for k in ("prompt", "completion")]
    assert (log["status"], log["samples"]) == ("success", overall["tasks"])
    assert log["metrics"] == {"task_success": overall["task_sr"], "hop_success": overall["hop_sr"]}
    assert list(log["usage"].values()) == [tokens] and tokens[0] > 0
    assert log["scores"] == {"hops": 1.0 if overall["task_sr"] == 1 else 0.0}
    assert [h["verdict"] for h in log["hops"]] == ["pass"] * overall["hops_passed"] + ["fail"] * (
        overall["hops"] - overall["hops_passed"]
    )
    assert log["screenshot"] == "data:image/jpeg;base64," and log["model_input"] >= 2
    assert log["events"].count("model") == log["events"].count("info") > 0
    assert (log["mmina"]["schema_version"], log["mmina"]["mmina_version"]) == (SCHEMA_VERSION, __version__)


def test_inspect_view_shows_the_exported_samples_in_chromium(recorded, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    code, output = _cli(
        "export",
        "inspect",
        "--run",
        recorded[1].run_id,
        "--store",
        str(recorded[0]),
        "-o",
        str(logs / "run.eval"),
    )
    assert code == 0, output
    port = free_port()
    command = [
        str(inspect_bin() / "inspect"),
        "view",
        "start",
        "--log-dir",
        str(logs),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with server(command, tmp_path, port) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page()
        page.goto(url)
        page.get_by_text("mmina/builtin").first.click(timeout=60_000)
        page.get_by_text("normal/1").first.wait_for(timeout=60_000)
        assert "Vell Mountain Tea" in page.inner_text("body")
        browser.close()


def test_every_interchange_command_has_help_with_an_example_and_is_documented() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "interchange.md").read_text()
    for command in (
        ["export"],
        ["export", "warc"],
        ["export", "wacz"],
        ["export", "har"],
        ["export", "inspect"],
        ["import", "warc"],
    ):
        code, output = _cli(*command, "--help")
        assert code == 0 and "Example" in output, command
        assert f"mmina {' '.join(command)}" in page, command
