"""WebSockets in WARC both ways (IIPC warc-specifications #115, as Browsertrix writes it): an
episode with a socket and an event stream exported, checked by warcio, restored into a new store
by ``mmina import warc`` and replayed by the clock at 100 % with every socket message repeated;
a socket archived the Browsertrix way (the frames' record first, CDP frame lines, a close frame)
read back into a socket row; a real socket application (Streamlit) round-tripped, heavy."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.fixtures.hardweb import BEHAVIOURS
from mmina.fixtures.hardweb.behaviours import write_suite
from mmina.fixtures.hardweb.server import HardWeb
from mmina.interchange.warc_records import read_records
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.replays import replay_run
from mmina.replayer.sockets import Message, parse_messages
from mmina.store import Store
from mmina.tasks.task import builtin_suite_path

WARCIO = str(Path(sys.executable).parent / "warcio")
SOCKET_PAGES = ("a WebSocket", "an EventSource stream")


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _sockets(store: Store, run_id: str) -> list[list[Message]]:
    """Each socket row's conversation (wall-clock times), in request order."""
    rows = sorted(
        (r for r in store.read("requests", run_id=run_id).to_pylist() if r["status"] == 101),
        key=lambda r: (r["episode_id"], r["seq"]),
    )
    blobs = store.read_blobs([r["response_body"] for r in rows])
    return [parse_messages(blobs[r["response_body"]], 0.0) for r in rows]


def _same_conversation(recorded: list[Message], restored: list[Message]) -> bool:
    """The same messages, each at its recorded moment (to the microsecond)."""
    return [(m.direction, m.data) for m in recorded] == [(m.direction, m.data) for m in restored] and all(
        abs(a.at - b.at) < 1e-5 for a, b in zip(recorded, restored)
    )


@pytest.fixture(scope="module")
def socket_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HardWeb, Path, str]]:
    """The hard web's socket and event-stream pages recorded by the oracle; the site restarted
    with new random state (a replay that reached it would show other text)."""
    folder = tmp_path_factory.mktemp("sockets")
    suite = write_suite(folder / "tasks", tuple(b for b in BEHAVIOURS if b.name in SOCKET_PAGES))
    with HardWeb() as web:
        store = Store.open(folder / "store", create=True)
        recorded = record_run(
            store,
            RecordConfig(
                tasks=str(suite), agent="oracle", browser=BrowserConfig(extra_args=tuple(web.chromium_args()))
            ),
        )
        web.restart()
        yield web, folder, recorded.run_id


def test_a_socket_episode_exported_and_restored_replays_by_the_clock_at_100_percent(socket_web) -> None:
    web, folder, run_id = socket_web
    warc, restored = folder / "run.warc.gz", folder / "restored"
    code, output = _cli("export", "warc", "--run", run_id, "--store", str(folder / "store"), "-o", str(warc))
    assert code == 0 and "1 socket(s)" in output, output
    done = subprocess.run([WARCIO, "check", "-v", str(warc)], capture_output=True, text=True)
    assert done.returncode == 0 and "fail" not in done.stdout, done.stdout[-2000:]
    [frames] = [
        r
        for r in read_records(warc)
        if r.kind == "resource" and r.get("warc-target-uri").startswith("wss://")
    ]
    assert (
        frames.get("content-type") == 'application/jsonl; format="cdp"'
        and frames.get("warc-resource") == "websocket"
    )
    lines = [json.loads(line) for line in frames.block.splitlines()]
    assert {tuple(sorted(line)) for line in lines} == {("mask", "opcode", "payloadData", "ts", "type")}
    assert {line["type"] for line in lines} == {"send", "recv"} and lines[0]["ts"] >= 0
    handshake = [r for r in read_records(warc) if frames.get("warc-record-id") in r.concurrent()]
    assert sorted(r.kind for r in handshake) == ["request", "response"]
    assert all(r.get("warc-target-uri").startswith("https://") for r in handshake)

    code, output = _cli("import", "warc", str(warc), "--store", str(restored))
    assert code == 0 and "2 episode(s) restored" in output and "1 socket(s)" in output, output
    original, copy = Store.open(folder / "store"), Store.open(restored)
    steps = [
        sorted(s.read("steps", run_id=run_id).to_pylist(), key=lambda r: (r["episode_id"], r["step_index"]))
        for s in (original, copy)
    ]
    assert steps[0] == steps[1]
    config = json.loads(copy.read("runs", run_id=run_id).to_pylist()[0]["config_json"])
    assert config["restored_from"] == {"files": [str(warc)], "run_id": run_id} and "limits" in config
    [recorded_socket], [restored_socket] = _sockets(original, run_id), _sockets(copy, run_id)
    assert len(recorded_socket) >= 4 and _same_conversation(recorded_socket, restored_socket)

    report = replay_run(copy, run_id, browser=BrowserConfig(extra_args=tuple(web.chromium_args())))
    assert report.fidelity == 1.0 and web.hits == [], [s.tree_diff for e in report.episodes for s in e.steps]
    assert [(e.requests.unmatched, e.requests.missing_body) for e in report.episodes] == [(0, 0), (0, 0)]
    sockets = [s for e in report.episodes for s in e.sockets]
    assert len(sockets) == 1 and sockets[0].faithful, sockets[0].first_difference


def _browsertrix_warc(path: Path) -> None:
    """A socket as Browsertrix's ws-support branch archives it: the frames' resource record
    first, then the handshake's 101 response naming it, then the request; frames as CDP gives
    them (``recv``, seconds since the handshake, binary in base64), a ping and a close frame."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    frames = [
        {"ts": 0.05, "type": "recv", "opcode": 1, "mask": False, "payloadData": "hello"},
        {"ts": 1.5, "type": "send", "opcode": 1, "mask": True, "payloadData": '{"ask":"tide"}'},
        {"ts": 1.75, "type": "recv", "opcode": 2, "mask": False, "payloadData": "AAEC"},
        {"ts": 1.9, "type": "recv", "opcode": 9, "mask": False, "payloadData": ""},
        {
            "ts": 2.0,
            "type": "recv",
            "opcode": 8,
            "mask": False,
            "payloadData": "A+g=",
            "closeCode": 1000,
            "closeReason": "bye",
        },
    ]
    with path.open("wb") as sink:
        writer = WARCWriter(sink, gzip=True)
        page = writer.create_warc_record(
            "http://site.test/",
            "response",
            payload=io.BytesIO(b"<p>tide</p>"),
            http_headers=StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1"),
        )
        writer.write_record(page)
        body = "".join(json.dumps(f) + "\n" for f in frames).encode()
        resource = writer.create_warc_record(
            "ws://site.test/feed",
            "resource",
            payload=io.BytesIO(body),
            warc_content_type='application/jsonl; format="cdp"',
        )
        resource.rec_headers.add_header("WARC-Resource", "websocket")
        writer.write_record(resource)
        upgrade = writer.create_warc_record(
            "http://site.test/feed",
            "response",
            payload=io.BytesIO(b""),
            http_headers=StatusAndHeaders(
                "101 Switching Protocols", [("Upgrade", "websocket")], protocol="HTTP/1.1"
            ),
        )
        upgrade.rec_headers.add_header("WARC-Truncated", "payloadNotAvailable")
        upgrade.rec_headers.add_header(
            "WARC-Concurrent-To", resource.rec_headers.get_header("WARC-Record-ID")
        )
        writer.write_record(upgrade)


def test_a_socket_archived_the_browsertrix_way_becomes_a_socket_row_and_keeps_its_close(
    tmp_path: Path,
) -> None:
    _browsertrix_warc(tmp_path / "b.warc.gz")
    code, output = _cli(
        "import",
        "warc",
        str(tmp_path / "b.warc.gz"),
        "--tasks",
        str(builtin_suite_path()),
        "--task",
        "normal/1",
        "--run-id",
        "b",
        "--store",
        str(tmp_path / "store"),
        "--format",
        "json",
    )
    assert code == 0, output
    result = json.loads(output)
    assert (result["exchanges"], result["sockets"], result["socket_frames"], result["control_frames"]) == (
        2,
        1,
        3,
        2,
    )
    store = Store.open(tmp_path / "store")
    [row] = [r for r in store.read("requests", run_id="b").to_pylist() if r["status"] == 101]
    assert (
        row["url"] == "ws://site.test/feed"
        and {"name": "Upgrade", "value": "websocket"} in row["response_headers"]
    )
    opened = row["started_at"].timestamp() * 1e3
    said = parse_messages(store.read_blobs([row["response_body"]])[row["response_body"]], opened)
    assert said == [
        Message("receive", "hello", 0.05),
        Message("send", '{"ask":"tide"}', 1.5),
        Message("receive", b"\x00\x01\x02", 1.75),
    ]
    code, output = _cli(
        "export", "warc", "--run", "b", "--store", str(tmp_path / "store"), "-o", str(tmp_path / "o.gz")
    )
    assert code == 0, output
    [frames] = [
        r for r in read_records(tmp_path / "o.gz") if r.get("warc-target-uri") == "ws://site.test/feed"
    ]
    assert json.loads(frames.block.splitlines()[-1]) == {
        "ts": 2.0,
        "type": "recv",
        "opcode": 8,
        "mask": False,
        "payloadData": "",
        "closeCode": 1000,
        "closeReason": "bye",
    }


def test_bad_warc_imports_get_one_line_and_write_nothing(socket_web, tmp_path: Path) -> None:
    _browsertrix_warc(tmp_path / "b.warc.gz")
    for extra, says in (
        ([], "not written by mmina export warc"),
        (["--task", "normal/1"], "give --tasks too"),
    ):
        code, output = _cli(
            "import", "warc", str(tmp_path / "b.warc.gz"), *extra, "--store", str(tmp_path / "store")
        )
        assert code == 1 and says in output and len(output.splitlines()) == 1, output
    assert not (tmp_path / "store").exists()
    _web, folder, run_id = socket_web
    warc = tmp_path / "run.warc.gz"
    assert _cli("export", "warc", "--run", run_id, "--store", str(folder / "store"), "-o", str(warc))[0] == 0
    assert _cli("import", "warc", str(warc), "--store", str(tmp_path / "again"))[0] == 0
    code, output = _cli("import", "warc", str(warc), "--store", str(tmp_path / "again"))
    assert (
        code == 1
        and output == f"Error: run {run_id} already exists in {tmp_path / 'again'}; choose another --run-id\n"
    ), output


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_a_real_socket_application_round_trips_through_warc_as_faithfully_as_its_recording(
    tmp_path: Path,
) -> None:
    """Streamlit (a dashboard over a WebSocket, installed from PyPI): recorded, exported,
    restored into a new store, and both stores replayed after a restart with new state. The
    restored replay matches every step, reaches nothing live, and repeats the socket as well as
    the original's replay does."""
    from tests.realweb.apps import APPS, RunningApp
    from tests.realweb.apps import write_suite as app_suite
    from tests.realweb.check import AGENT

    app = next(a for a in APPS if a.name == "streamlit")
    store = Store.open(tmp_path / "store", create=True)
    with RunningApp(app, tmp_path) as running:
        browser = BrowserConfig(extra_args=tuple(running.chromium_args()))
        recorded = record_run(
            store,
            RecordConfig(tasks=str(app_suite(tmp_path / "tasks", (app,))), agent=AGENT, browser=browser),
        )
        warc = tmp_path / "run.warc.gz"
        assert (
            _cli("export", "warc", "--run", recorded.run_id, "--store", str(store.root), "-o", str(warc))[0]
            == 0
        )
        assert _cli("import", "warc", str(warc), "--store", str(tmp_path / "restored"))[0] == 0
        running.restart()
        original = replay_run(store, recorded.run_id, browser=browser).episodes[0]
        restored = replay_run(Store.open(tmp_path / "restored"), recorded.run_id, browser=browser).episodes[0]
        assert running.connections == 0
    assert (
        restored.fidelity == 1.0 and restored.requests.unmatched == 0 and restored.requests.missing_body == 0
    )
    assert [s.faithful for s in restored.sockets] == [
        s.faithful for s in original.sockets
    ] and restored.sockets
    assert all(
        _same_conversation(a, b)
        for a, b in zip(
            _sockets(store, recorded.run_id), _sockets(Store.open(tmp_path / "restored"), recorded.run_id)
        )
    )
